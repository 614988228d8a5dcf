package openapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/redisstore"
	"github.com/tasklock/tasklock/schedule"
	"github.com/tasklock/tasklock/sqlitestore"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// docPath is the document the dashboard embeds.
const docPath = "../../dashboard/openapi.json"

// token is the dashboards' token.
const token = "contract-token"

// loadDoc loads and validates an OpenAPI 3.1 document.
func loadDoc(t testing.TB, data []byte) *openapi3.T {
	t.Helper()
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(data)
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi.json is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(l.Context); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// TestOpenAPIDocumentValid checks the document itself: it loads and
// validates as OpenAPI 3.1, and every operation has an operationId, a
// 2xx answer, and answers its errors as the Error schema.
func TestOpenAPIDocumentValid(t *testing.T) {
	data, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := loadDoc(t, data)
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, ok := ids[op.OperationID]; ok {
				t.Errorf("%s: operationId %q is %s's too", where, op.OperationID, other)
			}
			ids[op.OperationID] = where
			ok2xx := false
			for code, r := range op.Responses.Map() {
				if strings.HasPrefix(code, "2") {
					ok2xx = true
					continue
				}
				if code[0] != '4' && code[0] != '5' {
					continue
				}
				want := "#/components/schemas/Error"
				if path == "/readyz" { // not ready is an answer, not an error
					want = "#/components/schemas/Readiness"
				}
				mt := r.Value.Content.Get("application/json")
				if mt == nil || mt.Schema == nil || mt.Schema.Ref != want {
					t.Errorf("%s: the %s answer is not application/json of the Error schema", where, code)
				}
			}
			if !ok2xx {
				t.Errorf("%s: no 2xx answer", where)
			}
		}
	}
}

// ledgerStore is what the fixture needs of a store.
type ledgerStore interface {
	driver.Store
	driver.Lister
	driver.ForceReleaser
	ledger.Ledger
	ledger.Catalog
}

// lockStore hides every capability of a store but locking: the dashboard
// over it answers 501 where it needs a ledger, a catalog or a listing.
type lockStore struct{ driver.Store }

func newSQLite(t *testing.T) ledgerStore {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "tl.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db, &sqlitestore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func newRedis(t *testing.T) ledgerStore {
	t.Helper()
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// defineStub stands in for serve's check of a job definition: a JSON
// object with a name and a schedule.
func defineStub(body []byte, name string) (string, string, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return "", "", errors.New("not JSON: " + err.Error())
	}
	if name != "" {
		m["name"] = name
	}
	n, _ := m["name"].(string)
	if n == "" || m["schedule"] == nil {
		return "", "", errors.New("schedule: missing")
	}
	def, _ := json.Marshal(m)
	return n, string(def), nil
}

// configured are the fixture's configured jobs: "a" runs, "b" is paused,
// "c" waits for "a", "s" is sharded.
var configured = []schedule.Job{
	{Name: "a", Schedule: "@every 10s"},
	{Name: "b", Schedule: "0 30 2 * * *", TimeZone: "Europe/Berlin"},
	{Name: "c", Schedule: "@hourly", After: []string{"a"}},
	{Name: "s", Schedule: "@hourly"},
}

// fill gives st what every field of the answers needs: held locks of
// every kind (a job's, a node's, the leader's, a read-write lock's and a
// semaphore's), runs of every shape (with output and error, never
// started, sharded, running), paused and triggered and registered jobs, a
// job defined at run time and audit entries.
func fill(t *testing.T, st ledgerStore) {
	t.Helper()
	ctx := context.Background()
	for i, p := range []driver.AcquireParams{
		{Key: "schedule/a", Owner: "n1"},
		{Key: "serve/node/n1", Owner: dashboard.NodeOwner("n1", "v1.2.3")},
		{Key: "serve/node/n2", Owner: "n2"},
		{Key: "serve/leader", Owner: "n1"},
		{Key: "other/x", Owner: "someone"},
		{Key: "plain", Owner: "someone"},
		{Key: "rw", Owner: "reader", Mode: driver.ModeRead},
		{Key: "sem", Owner: "p1", Mode: driver.ModePermit, Limit: 3},
	} {
		p.Token, p.TTL = fmt.Sprint("tok", i), time.Minute
		if _, err := st.Acquire(ctx, p); err != nil {
			t.Fatalf("acquire %s: %v", p.Key, err)
		}
	}
	now := time.Now().UTC().Truncate(time.Second)
	// On a tick of a's schedule (@every 10s), so that its runs can be re-run.
	tick := now.Add(-time.Hour).Truncate(10 * time.Second)
	err := st.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "a", Tick: tick, Attempt: 1, Node: "n1", Fence: 7, Start: tick, End: tick.Add(time.Second), Status: ledger.RunOK, Output: "hello\n"},
		{Job: "a", Tick: tick.Add(10 * time.Second), Attempt: 2, Node: "n2", Fence: 8, Start: tick.Add(10 * time.Second), End: tick.Add(12 * time.Second), Status: ledger.RunFailed, Error: "exit status 1", Output: "boom\n"},
		{Job: "b", Tick: tick, Attempt: 1, Status: ledger.RunMissed},
		{Job: "s", Tick: tick, Shard: 0, Shards: 2, Attempt: 1, Node: "n1", Fence: 9, Start: tick, End: tick.Add(time.Second), Status: ledger.RunOK},
		{Job: "s", Tick: tick, Shard: 1, Shards: 2, Attempt: 1, Node: "n2", Fence: 10, Start: tick, Status: ledger.RunRunning},
		{Job: "gone", Tick: tick, Attempt: 1, Node: "n3", Fence: 3, Start: tick, End: tick.Add(time.Second), Status: ledger.RunInterrupted, Error: "node n3 stopped"},
		{Job: "a", Tick: tick.Add(20 * time.Second), Trigger: "trig0", Attempt: 1, Node: "n1", Fence: 11, Start: tick.Add(20 * time.Second), End: tick.Add(80 * time.Second), Status: ledger.RunTimeout, Error: "timed out after 1m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A notification of a's failure, delivered on the second attempt, as
	// serve logs it.
	next := tick.Add(15 * time.Second)
	for _, d := range []apijson.Delivery{
		{ID: "n-1", Event: "failure", Tick: tick.Add(10 * time.Second), Status: "failed", Target: "webhook https://hooks.example/x", Attempt: 1, Error: "connection refused", Result: "retrying", NextRetry: &next},
		{ID: "n-1", Event: "failure", Tick: tick.Add(10 * time.Second), Status: "failed", Target: "webhook https://hooks.example/x", Attempt: 2, Code: 200, Result: "delivered"},
	} {
		e := ledger.AuditEntry{Who: apijson.NotifyWhoPrefix + "n1", Job: "a", Action: apijson.NotifyAction, Detail: apijson.DeliveryDetail(d)}
		if err := st.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []ledger.JobStateParams{
		{Job: "b", Op: ledger.JobPause},
		{Job: "a", Op: ledger.JobTrigger, Trigger: "trig1"},
		{Job: "a", Op: ledger.JobTrigger, Trigger: "trig2", Tick: tick, Rerun: true},
		{Job: "a", Op: ledger.JobRegister, Spec: "@every 10s", Since: tick},
		{Job: "elsewhere", Op: ledger.JobRegister, Spec: "@daily", Since: tick},
	} {
		if _, err := st.SetJobState(ctx, p); err != nil {
			t.Fatalf("%v %s: %v", p.Op, p.Job, err)
		}
	}
}

// serve starts a dashboard over st with the configured jobs and the job
// API on.
func serve(t *testing.T, st driver.Store, tok string, mod func(*dashboard.Options)) *httptest.Server {
	t.Helper()
	o := dashboard.Options{
		Store: st, StoreURL: "sqlite:///var/lib/tasklock.db", Node: "n1", Version: "v1.2.3", Token: tok,
		Jobs:      func() []schedule.Job { return configured },
		DefineJob: defineStub,
		FileJob: func(name string) bool {
			return slices.ContainsFunc(configured, func(j schedule.Job) bool { return j.Name == name })
		},
		EventInterval: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(&o)
	}
	h, err := dashboard.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// checker sends requests to one dashboard and checks each request and
// its answer against the OpenAPI document the dashboard serves.
type checker struct {
	t      *testing.T
	base   string
	doc    *openapi3.T
	router routers.Router
	// covered holds "METHOD PATH STATUS" of every answer checked, PATH as
	// the document spells it.
	covered map[string]bool
}

func newChecker(t *testing.T, srv *httptest.Server, covered map[string]bool) *checker {
	t.Helper()
	resp, err := http.Get(srv.URL + "/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/openapi.json without credentials: %d %s", resp.StatusCode, data)
	}
	file, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, file) {
		t.Fatal("GET /api/openapi.json is not dashboard/openapi.json")
	}
	doc := loadDoc(t, data)
	doc.Servers = openapi3.Servers{{URL: srv.URL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &checker{t: t, base: srv.URL, doc: doc, router: router, covered: covered}
}

// call is one request and the status it must get.
type call struct {
	method, path string
	hdr          map[string]string
	body         string // JSON, or a form with a form content type in hdr
	want         int
	// refused: the document must refuse the request too (a parameter
	// out of its limits, missing credentials), as the server does.
	refused bool
}

// authenticate checks that a request carries what a security scheme of
// the document names.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	switch in.SecuritySchemeName {
	case "bearer":
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return nil
		}
	case "session":
		if _, err := r.Cookie("tasklock_session"); err == nil {
			return nil
		}
	case "csrf":
		if r.Header.Get("X-CSRF-Token") != "" {
			return nil
		}
	default:
		return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
	}
	return fmt.Errorf("no %s credentials", in.SecuritySchemeName)
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (c *checker) newRequest(k call) *http.Request {
	req, err := http.NewRequest(k.method, c.base+k.path, strings.NewReader(k.body))
	if err != nil {
		c.t.Fatal(err)
	}
	if k.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, v := range k.hdr {
		req.Header.Set(name, v)
	}
	return req
}

// do sends k, checks its status, and checks the request and the answer
// against the document; it returns the answer's body.
func (c *checker) do(k call) []byte {
	c.t.Helper()
	body, _ := c.doHeader(k)
	return body
}

// doHeader is do, returning the answer's header as well.
func (c *checker) doHeader(k call) ([]byte, http.Header) {
	c.t.Helper()
	where := k.method + " " + k.path
	resp, err := noRedirects.Do(c.newRequest(k))
	if err != nil {
		c.t.Fatalf("%s: %v", where, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != k.want {
		c.t.Errorf("%s: %d %s, want %d", where, resp.StatusCode, body, k.want)
		return body, resp.Header
	}
	vreq := c.newRequest(k)
	route, params, err := c.router.FindRoute(vreq)
	if errors.Is(err, routers.ErrMethodNotAllowed) && k.want == http.StatusMethodNotAllowed {
		c.notAllowed(k, resp.Header, body)
		return body, resp.Header
	}
	if err != nil {
		c.t.Errorf("%s: the document has no such operation: %v", where, err)
		return body, resp.Header
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true},
	}
	err = openapi3filter.ValidateRequest(ctx, in)
	switch {
	case k.refused && err == nil:
		c.t.Errorf("%s: the server answers %d but the document accepts the request", where, resp.StatusCode)
	case !k.refused && err != nil:
		c.t.Errorf("%s: the document refuses the request: %v", where, err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		c.t.Errorf("%s: the answer %d %s does not match the document: %v", where, resp.StatusCode, body, err)
		return body, resp.Header
	}
	c.covered[fmt.Sprintf("%s %s %d", k.method, route.Path, resp.StatusCode)] = true
	return body, resp.Header
}

// notAllowed checks a 405, which the document cannot describe (it has no
// operation for the method): an Error, and an Allow header naming the
// path's operations in the document.
func (c *checker) notAllowed(k call, hdr http.Header, body []byte) {
	c.t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		c.t.Errorf("%s: 405 answer %s: %v", k.method+" "+k.path, body, err)
		return
	}
	if err := c.doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s: 405 answer %s does not match the Error schema: %v", k.method+" "+k.path, body, err)
	}
	u, _ := url.Parse(c.base + k.path)
	for path, item := range c.doc.Paths.Map() {
		req := &http.Request{Method: http.MethodGet, URL: u}
		for method := range item.Operations() {
			req.Method = method
			if r, _, err := c.router.FindRoute(req); err == nil && r.Path == path {
				if !strings.Contains(hdr.Get("Allow"), method) {
					c.t.Errorf("%s: 405 with Allow %q, but the document has %s %s", k.method+" "+k.path, hdr.Get("Allow"), method, path)
				}
				c.covered[fmt.Sprintf("%s %s 405", k.method, path)] = true
			}
		}
	}
}

// event reads the first summary of GET /api/events and checks it against
// the Summary schema.
func (c *checker) event(hdr map[string]string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := c.newRequest(call{method: "GET", path: "/api/events", hdr: hdr}).WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	op := c.doc.Paths.Find("/api/events").Get
	if resp.StatusCode != http.StatusOK || op.Responses.Status(200).Value.Content.Get(resp.Header.Get("Content-Type")) == nil {
		c.t.Fatalf("GET /api/events: %d %q, not an answer of the document", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			c.t.Fatalf("event data: %v", err)
		}
		if err := c.doc.Components.Schemas["Summary"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			c.t.Errorf("event data %s does not match the Summary schema: %v", data, err)
		}
		c.covered["GET /api/events 200"] = true
		return
	}
	c.t.Fatalf("GET /api/events: no event: %v", sc.Err())
}

// login starts a session and returns its cookie and CSRF token headers.
func (c *checker) login() map[string]string {
	c.t.Helper()
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
	c.do(call{method: "POST", path: "/login", hdr: form, body: "token=wrong", want: 401})
	body, hdr := c.doHeader(call{method: "POST", path: "/login", hdr: form, body: "token=" + token, want: 200})
	var out struct{ CSRF string }
	if err := json.Unmarshal(body, &out); err != nil || out.CSRF == "" {
		c.t.Fatalf("login: %s %v", body, err)
	}
	var cookie string
	for _, ck := range (&http.Response{Header: hdr}).Cookies() {
		if ck.Name == "tasklock_session" {
			cookie = ck.Value
		}
	}
	return map[string]string{"Cookie": "tasklock_session=" + cookie, "X-CSRF-Token": out.CSRF}
}

// TestOpenAPIAnswersMatch checks real answers of dashboards over
// memstore, SQLite and Redis against the document: every operation's success, the
// errors, and the writes, through a bearer token and through a session.
func TestOpenAPIAnswersMatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) ledgerStore
	}{
		{"memstore", func(*testing.T) ledgerStore { return memstore.New(nil) }},
		{"sqlitestore", newSQLite},
		{"redisstore", newRedis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			covered := map[string]bool{}
			st := tc.open(t)
			fill(t, st)
			c := newChecker(t, serve(t, st, token, nil), covered)
			checkAnswers(t, c)
			// Without a token: read-only, every write 403.
			ro := newChecker(t, serve(t, st, "", nil), covered)
			ro.do(call{method: "GET", path: "/api/info", want: 200})
			ro.do(call{method: "POST", path: "/api/jobs/a/pause", want: 403, refused: true})
			ro.do(call{method: "POST", path: "/login", hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "token=x", want: 403})
			// A store that only locks: 501 where a ledger, a catalog or a
			// listing is needed; /api/nodes has nothing to show.
			bare := newChecker(t, serve(t, lockStore{st}, "", nil), covered)
			for _, p := range []string{"/api/jobs", "/api/runs", "/api/run?id=x", "/api/locks", "/api/audit", "/api/overview"} {
				bare.do(call{method: "GET", path: p, want: 501})
			}
			bare.do(call{method: "GET", path: "/api/nodes", want: 200})
			bareTok := newChecker(t, serve(t, lockStore{st}, token, func(o *dashboard.Options) { o.DefineJob = nil }), covered)
			bearer := map[string]string{"Authorization": "Bearer " + token}
			bareTok.do(call{method: "POST", path: "/api/jobs", hdr: bearer, body: `{"name":"y","schedule":"@daily"}`, want: 501})
			bareTok.do(call{method: "POST", path: "/api/jobs/a/trigger", hdr: bearer, want: 501})
			bareTok.do(call{method: "POST", path: "/api/locks/plain/release", hdr: bearer, want: 501})
			// Public reading: anonymous GETs answer.
			pub := newChecker(t, serve(t, st, token, func(o *dashboard.Options) { o.PublicRead = true }), covered)
			pub.do(call{method: "GET", path: "/api/jobs", want: 200})
			pub.do(call{method: "POST", path: "/api/jobs/a/pause", want: 401, refused: true})

			if t.Failed() {
				return
			}
			// Every operation of the document got a 2xx answer.
			for path, item := range c.doc.Paths.Map() {
				for method := range item.Operations() {
					ok := false
					for k := range covered {
						if strings.HasPrefix(k, method+" "+path+" 2") {
							ok = true
						}
					}
					if !ok {
						t.Errorf("%s %s: no 2xx answer was checked against the document: add a call to checkAnswers (systest/openapi/api_test.go)", method, path)
					}
				}
			}
			var keys []string
			for k := range covered {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			t.Logf("checked %d (operation, status) pairs: %s", len(keys), strings.Join(keys, "; "))
		})
	}
}

// checkAnswers runs the calls of TestOpenAPIAnswersMatch on a dashboard
// with a token over a filled store.
func checkAnswers(t *testing.T, c *checker) {
	bearer := map[string]string{"Authorization": "Bearer " + token}
	wrong := map[string]string{"Authorization": "Bearer nope"}

	c.do(call{method: "GET", path: "/healthz", want: 200})
	c.do(call{method: "GET", path: "/readyz", want: 200})
	c.do(call{method: "GET", path: "/api/openapi.json", want: 200})
	c.do(call{method: "GET", path: "/api/info", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/info", want: 401})
	c.do(call{method: "GET", path: "/api/jobs", hdr: wrong, want: 401})

	// Reading, with the parameters at and past their limits.
	var jobs struct {
		Jobs []struct {
			Job     string
			Running []any
		}
		Next string
	}
	json.Unmarshal(c.do(call{method: "GET", path: "/api/jobs", hdr: bearer, want: 200}), &jobs)
	if len(jobs.Jobs) < 5 || jobs.Jobs[0].Job != "a" || len(jobs.Jobs[0].Running) != 1 {
		t.Errorf("jobs: %+v, want a (running), b, c, elsewhere, gone, s", jobs)
	}
	json.Unmarshal(c.do(call{method: "GET", path: "/api/jobs?limit=2&q=E", hdr: bearer, want: 200}), &jobs)
	c.do(call{method: "GET", path: "/api/jobs?limit=1000&after=" + url.QueryEscape(jobs.Next), hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/jobs?name=s&ticks=20", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/jobs?name=b", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/jobs?recent=5", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/jobs?recent=101", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/overview", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/overview?window=2h&bucket=5m", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/overview?window=soon", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/jobs?ticks=21", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/jobs?limit=0", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/jobs?limit=1001", hdr: bearer, want: 400, refused: true})

	var runs struct {
		Runs []struct {
			ID, Job, Tick, Trigger, Status string
			Shard, Attempt                 int
		}
	}
	json.Unmarshal(c.do(call{method: "GET", path: "/api/runs", hdr: bearer, want: 200}), &runs)
	if len(runs.Runs) != 7 {
		t.Errorf("runs: %d, want 7", len(runs.Runs))
	}
	for _, r := range runs.Runs {
		c.do(call{method: "GET", path: "/api/run?id=" + url.QueryEscape(r.ID), hdr: bearer, want: 200})
	}
	tick := url.QueryEscape(runs.Runs[0].Tick)
	for _, r := range runs.Runs {
		if r.Job == "s" && r.Shard == 1 {
			c.do(call{method: "GET", path: fmt.Sprintf("/api/run?job=s&shard=1&attempt=%d&tick=%s", r.Attempt, url.QueryEscape(r.Tick)), hdr: bearer, want: 200})
		}
	}
	c.do(call{method: "GET", path: "/api/run?job=a&attempt=9&tick=" + tick, hdr: bearer, want: 404})
	c.do(call{method: "GET", path: "/api/run?job=a&tick=yesterday", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/run?id=nope", hdr: bearer, want: 400})
	var page struct{ Next string }
	json.Unmarshal(c.do(call{method: "GET", path: "/api/runs?limit=2", hdr: bearer, want: 200}), &page)
	if page.Next == "" {
		t.Error("runs?limit=2: no next")
	}
	c.do(call{method: "GET", path: "/api/runs?limit=2&before=" + url.QueryEscape(page.Next), hdr: bearer, want: 200})
	from := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	c.do(call{method: "GET", path: "/api/runs?job=a&status=failed&from=" + from, hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/runs?job=s&status=running", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/runs?status=bogus", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/runs?from=yesterday", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "GET", path: "/api/runs?before=!!", hdr: bearer, want: 400})

	var locks struct{ Locks []any }
	json.Unmarshal(c.do(call{method: "GET", path: "/api/locks", hdr: bearer, want: 200}), &locks)
	if len(locks.Locks) != 8 {
		t.Errorf("locks: %d, want 8", len(locks.Locks))
	}
	c.do(call{method: "GET", path: "/api/locks?prefix=serve/&limit=1&after=serve/leader", hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/locks?limit=-1", hdr: bearer, want: 400, refused: true})

	var nodes struct {
		Nodes  []any
		Leader *struct{ Node string }
	}
	json.Unmarshal(c.do(call{method: "GET", path: "/api/nodes", hdr: bearer, want: 200}), &nodes)
	if len(nodes.Nodes) < 3 || nodes.Leader == nil || nodes.Leader.Node != "n1" {
		t.Errorf("nodes: %+v, want n1 (leader), n2, n3", nodes)
	}
	c.event(bearer)

	// Acting, through the bearer token.
	c.do(call{method: "POST", path: "/api/jobs/a/trigger", hdr: bearer, want: 200})
	c.do(call{method: "POST", path: "/api/jobs/b/resume", hdr: bearer, want: 200})
	c.do(call{method: "POST", path: "/api/jobs/c/pause", hdr: bearer, want: 200})
	c.do(call{method: "POST", path: "/api/jobs/nope/pause", hdr: bearer, want: 404})
	c.do(call{method: "POST", path: "/api/jobs/a/pause", want: 401, refused: true})
	c.do(call{method: "GET", path: "/api/jobs/a/pause", hdr: bearer, want: 405, refused: true})
	c.do(call{method: "POST", path: "/api/jobs", hdr: bearer, body: `{"name":"dyn","schedule":"@hourly","command":["true"]}`, want: 201})
	c.do(call{method: "POST", path: "/api/jobs", hdr: bearer, body: `{"name":"dyn","schedule":"@daily"}`, want: 409})
	c.do(call{method: "POST", path: "/api/jobs", hdr: bearer, body: `{"name":"a","schedule":"@daily"}`, want: 409})
	c.do(call{method: "POST", path: "/api/jobs", hdr: bearer, body: `{"name":"x"}`, want: 400, refused: true})
	c.do(call{method: "PUT", path: "/api/jobs/dyn", hdr: bearer, body: `{"schedule":"@daily","command":["true"]}`, want: 200})
	c.do(call{method: "PUT", path: "/api/jobs/undefined", hdr: bearer, body: `{"schedule":"@daily"}`, want: 404})
	c.do(call{method: "DELETE", path: "/api/jobs/dyn?cancel=maybe", hdr: bearer, want: 400, refused: true})
	c.do(call{method: "DELETE", path: "/api/jobs/dyn?cancel=1", hdr: bearer, want: 200})
	c.do(call{method: "DELETE", path: "/api/jobs/dyn", hdr: bearer, want: 404})
	c.do(call{method: "POST", path: "/api/locks/plain/release", hdr: bearer, want: 200})
	c.do(call{method: "POST", path: "/api/locks/plain/release", hdr: bearer, want: 404})
	c.do(call{method: "POST", path: "/api/locks/other%2Fx/release", hdr: bearer, want: 200})

	// The audit of those, newest first, one page after another.
	var audit struct {
		Audit []struct{ Action string }
		Next  string
	}
	json.Unmarshal(c.do(call{method: "GET", path: "/api/audit?limit=2", hdr: bearer, want: 200}), &audit)
	if len(audit.Audit) != 2 || audit.Audit[0].Action != "delete" || audit.Next == "" {
		t.Errorf("audit: %+v, want the delete first and a next page", audit)
	}
	c.do(call{method: "GET", path: "/api/audit?job=a&before=" + audit.Next, hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/audit?before=0", hdr: bearer, want: 400, refused: true})

	// The delivery log of the notifications, one page after another.
	var notes struct {
		Notifications []struct{ Result string }
		Next          string
	}
	json.Unmarshal(c.do(call{method: "GET", path: "/api/notifications?job=a&limit=1", hdr: bearer, want: 200}), &notes)
	if len(notes.Notifications) != 1 || notes.Notifications[0].Result != "delivered" || notes.Next == "" {
		t.Errorf("notifications: %+v, want the delivery first and a next page", notes)
	}
	c.do(call{method: "GET", path: "/api/notifications?before=" + notes.Next, hdr: bearer, want: 200})
	c.do(call{method: "GET", path: "/api/notifications?limit=0", hdr: bearer, want: 400, refused: true})

	// Cancel and retry name a run as /api/runs lists it.
	runRef := func(job, tick, trigger string, shard int) string {
		b, _ := json.Marshal(map[string]any{"job": job, "tick": tick, "trigger": trigger, "shard": shard})
		return string(b)
	}
	var running, failed, timedOut, ok string
	for _, r := range runs.Runs {
		switch {
		case r.Job == "s" && r.Shard == 1:
			running = runRef(r.Job, r.Tick, "", 1)
		case r.Job == "a" && r.Status == "failed":
			failed = runRef(r.Job, r.Tick, "", 0)
		case r.Job == "a" && r.Status == "timeout":
			timedOut = runRef(r.Job, r.Tick, r.Trigger, 0)
		case r.Job == "a" && r.Status == "ok":
			ok = runRef(r.Job, r.Tick, "", 0)
		}
	}
	c.do(call{method: "POST", path: "/api/runs/cancel", hdr: bearer, body: running, want: 202})
	c.do(call{method: "POST", path: "/api/runs/cancel", hdr: bearer, body: ok, want: 409})
	c.do(call{method: "POST", path: "/api/runs/cancel", hdr: bearer, body: runRef("nope", runs.Runs[0].Tick, "", 0), want: 404})
	c.do(call{method: "POST", path: "/api/runs/cancel", hdr: bearer, body: `{"job":"a"}`, want: 400, refused: true})
	c.do(call{method: "POST", path: "/api/runs/cancel", body: running, want: 401, refused: true})
	c.do(call{method: "POST", path: "/api/runs/retry", hdr: bearer, body: failed, want: 202})
	c.do(call{method: "POST", path: "/api/runs/retry", hdr: bearer, body: timedOut, want: 202})
	c.do(call{method: "POST", path: "/api/runs/retry", hdr: bearer, body: ok, want: 409})
	c.do(call{method: "POST", path: "/api/runs/retry", hdr: bearer, body: `{"job":"a","tick":"soon"}`, want: 400, refused: true})
	// A trigger with a note.
	c.do(call{method: "POST", path: "/api/jobs/a/trigger", hdr: bearer, body: `{"note":"from the OpenAPI test"}`, want: 200})
	c.do(call{method: "POST", path: "/api/jobs/a/trigger", hdr: bearer, body: `{"note":"` + strings.Repeat("x", 1001) + `"}`, want: 400, refused: true})

	// Acting through a session: with its CSRF token, and without (403).
	sess := c.login()
	c.do(call{method: "GET", path: "/api/info", hdr: sess, want: 200})
	c.do(call{method: "POST", path: "/api/jobs/c/resume", hdr: sess, want: 200})
	noCSRF := map[string]string{"Cookie": sess["Cookie"]}
	c.do(call{method: "POST", path: "/api/jobs/c/pause", hdr: noCSRF, want: 403, refused: true})
	c.do(call{method: "POST", path: "/logout", hdr: sess, want: 200})
	c.do(call{method: "POST", path: "/login", hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "token=" + token, want: 303})
}
