package dashboard_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
	"github.com/tasklock/tasklock/sqlitestore"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// secret is a password in the store URL that no answer may contain.
const secret = "hunter2-pw"

// ledgerStore is what the tests need of a store.
type ledgerStore interface {
	driver.Store
	ledger.Ledger
	driver.Lister
	driver.ForceReleaser
}

// eachStore runs f on memstore and on a fresh sqlitestore.
func eachStore(t *testing.T, f func(t *testing.T, st ledgerStore)) {
	t.Run("memstore", func(t *testing.T) { f(t, memstore.New(nil)) })
	t.Run("sqlitestore", func(t *testing.T) { f(t, newSQLite(t)) })
}

func newSQLite(t testing.TB) *sqlitestore.Store {
	t.Helper()
	st, _ := newSQLiteDB(t)
	return st
}

// newSQLiteDB is newSQLite with its database, for a test that changes the
// schema behind the store's back.
func newSQLiteDB(t testing.TB) (*sqlitestore.Store, *sql.DB) {
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
	return st, db
}

// server starts the dashboard over st with jobs a, b and c/d.
func server(t *testing.T, st driver.Store, token string, mod func(*dashboard.Options)) *httptest.Server {
	t.Helper()
	jobs := []schedule.Job{
		{Name: "a", Schedule: "@every 10s"},
		{Name: "b", Schedule: "0 30 2 * * *", TimeZone: "Europe/Berlin"},
		{Name: "c/d", Schedule: "@hourly"},
	}
	o := dashboard.Options{
		Store: st, StoreURL: "redis://user:" + secret + "@db.example:6379/0",
		Jobs: func() []schedule.Job { return jobs }, Node: "n1", Version: "v9.9.9", Token: token,
		EventInterval: 50 * time.Millisecond,
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

// call makes a request and returns the status and body, failing the test
// when the body holds the store password.
func call(t *testing.T, c *http.Client, method, u string, hdr map[string]string, body string) (int, string, *http.Response) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), secret) {
		t.Errorf("%s %s: the store password is in the answer: %s", method, u, b)
	}
	return resp.StatusCode, string(b), resp
}

func decode(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%v in %q", err, body)
	}
}

func paused(t *testing.T, st ledger.Ledger, job string) (bool, int) {
	t.Helper()
	sts, err := st.JobStates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sts {
		if s.Job == job {
			return s.Paused, len(s.Triggers)
		}
	}
	return false, 0
}

func TestDashboardReadOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		srv := server(t, st, "", nil)
		for _, p := range []string{"/", "/app.js", "/style.css", "/api/info", "/api/jobs", "/api/runs", "/api/locks", "/api/nodes"} {
			if code, body, _ := call(t, nil, "GET", srv.URL+p, nil, ""); code != 200 {
				t.Errorf("GET %s: %d %s", p, code, body)
			}
		}
		_, body, _ := call(t, nil, "GET", srv.URL+"/api/info", nil, "")
		if !strings.Contains(body, `"read_only":true`) || !strings.Contains(body, "db.example") {
			t.Errorf("info: %s", body)
		}
		for _, p := range []string{"/api/jobs/a/pause", "/api/jobs/a/trigger", "/api/locks/x/release", "/login"} {
			code, body, _ := call(t, nil, "POST", srv.URL+p, map[string]string{"Authorization": "Bearer anything"}, "token=x")
			if code != http.StatusForbidden || !strings.Contains(body, `"error"`) {
				t.Errorf("POST %s read-only: %d %s, want 403 with an error", p, code, body)
			}
		}
		if p, _ := paused(t, st, "a"); p {
			t.Error("a read-only dashboard paused a job")
		}
		if code, body, _ := call(t, nil, "GET", srv.URL+"/api/jobs/a/pause", nil, ""); code != http.StatusMethodNotAllowed || !strings.Contains(body, `"error"`) {
			t.Errorf("GET on a POST endpoint: %d %s", code, body)
		}
		if code, _, _ := call(t, nil, "GET", srv.URL+"/api/nope", nil, ""); code != http.StatusNotFound {
			t.Errorf("unknown endpoint: %d", code)
		}
	})
}

// TestDashboardBadPath: a page path that is not valid UTF-8 is a page
// that does not exist (404), not a server error.
func TestDashboardBadPath(t *testing.T) {
	srv := server(t, memstore.New(nil), "", nil)
	for _, p := range []string{"/%ff", "/jobs/%ff", "/jobs/%fe%ff/x", "/style.css%ff"} {
		if code, body, _ := call(t, nil, "GET", srv.URL+p, nil, ""); code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s, want 404", p, code, body)
		}
	}
}

func TestDashboardTokenAuth(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		const token = "correct horse battery"
		srv := server(t, st, token, nil)
		u := srv.URL + "/api/jobs/a/pause"
		if code, _, _ := call(t, nil, "POST", u, nil, ""); code != http.StatusUnauthorized {
			t.Errorf("no credentials: %d, want 401", code)
		}
		if code, _, _ := call(t, nil, "POST", u, map[string]string{"Authorization": "Bearer wrong"}, ""); code != http.StatusUnauthorized {
			t.Errorf("wrong bearer: %d, want 401", code)
		}
		if p, _ := paused(t, st, "a"); p {
			t.Fatal("paused without credentials")
		}
		bearer := map[string]string{"Authorization": "Bearer " + token}
		if code, body, _ := call(t, nil, "POST", u, bearer, ""); code != 200 || !strings.Contains(body, `"paused":true`) {
			t.Errorf("bearer pause: %d %s", code, body)
		}
		if p, _ := paused(t, st, "a"); !p {
			t.Error("bearer pause did not pause a in the store")
		}
		if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/nope/pause", bearer, ""); code != http.StatusNotFound {
			t.Errorf("pause of an unknown job: %d %s", code, body)
		}
		// c/d needs its slash escaped.
		if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/"+url.PathEscape("c/d")+"/trigger", bearer, ""); code != 200 {
			t.Errorf("trigger c/d: %d %s", code, body)
		}
		if _, n := paused(t, st, "c/d"); n != 1 {
			t.Errorf("c/d has %d pending triggers after a trigger, want 1", n)
		}

		// The browser's way: log in, then send the CSRF token.
		jar := newJar(t)
		c := &http.Client{Jar: jar}
		if code, _, _ := call(t, c, "POST", srv.URL+"/login", map[string]string{"Accept": "application/json"}, "token=wrong"); code != http.StatusUnauthorized {
			t.Errorf("login with a wrong token: %d", code)
		}
		code, body, resp := call(t, c, "POST", srv.URL+"/login", map[string]string{"Accept": "application/json"}, "token="+url.QueryEscape(token))
		if code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		sc := resp.Header.Get("Set-Cookie")
		for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
			if !strings.Contains(sc, want) {
				t.Errorf("session cookie %q lacks %s", sc, want)
			}
		}
		var login struct{ CSRF string }
		decode(t, body, &login)
		resume := srv.URL + "/api/jobs/a/resume"
		if code, _, _ := call(t, c, "POST", resume, nil, ""); code != http.StatusForbidden {
			t.Errorf("cookie without CSRF token: %d, want 403", code)
		}
		if code, _, _ := call(t, c, "POST", resume, map[string]string{"X-CSRF-Token": "forged"}, ""); code != http.StatusForbidden {
			t.Errorf("cookie with a wrong CSRF token: %d, want 403", code)
		}
		if p, _ := paused(t, st, "a"); !p {
			t.Fatal("resumed without a CSRF token")
		}
		_, body, _ = call(t, c, "GET", srv.URL+"/api/info", nil, "")
		var info struct {
			LoggedIn bool `json:"logged_in"`
			CSRF     string
		}
		decode(t, body, &info)
		if !info.LoggedIn || info.CSRF != login.CSRF {
			t.Errorf("info after login: %s; login gave csrf %q", body, login.CSRF)
		}
		if code, body, _ := call(t, c, "POST", resume, map[string]string{"X-CSRF-Token": info.CSRF}, ""); code != 200 {
			t.Errorf("cookie + CSRF header: %d %s", code, body)
		}
		if p, _ := paused(t, st, "a"); p {
			t.Error("resume with cookie + CSRF did not resume a")
		}
		// The form field works as well as the header.
		if code, body, _ := call(t, c, "POST", u, nil, "csrf="+url.QueryEscape(info.CSRF)); code != 200 {
			t.Errorf("cookie + CSRF form field: %d %s", code, body)
		}
		// A forged cookie is no session.
		forged := &http.Client{Jar: newJar(t)}
		su, _ := url.Parse(srv.URL)
		forged.Jar.SetCookies(su, []*http.Cookie{{Name: "tasklock_session", Value: "99999999999.AAAA"}})
		if code, _, _ := call(t, forged, "POST", resume, map[string]string{"X-CSRF-Token": info.CSRF}, ""); code != http.StatusUnauthorized {
			t.Errorf("forged cookie: %d, want 401", code)
		}
		if code, _, _ := call(t, c, "POST", srv.URL+"/logout", map[string]string{"X-CSRF-Token": info.CSRF}, ""); code != 200 {
			t.Errorf("logout: %d", code)
		}
		if code, _, _ := call(t, c, "POST", resume, map[string]string{"X-CSRF-Token": info.CSRF}, ""); code != http.StatusUnauthorized {
			t.Errorf("after logout: %d, want 401", code)
		}
	})
}

func newJar(t *testing.T) http.CookieJar {
	t.Helper()
	j, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestDashboardLocksAndRelease(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		ctx := context.Background()
		for i, k := range []string{"schedule/a", "serve/node/n1", "other/x"} {
			owner := "n1"
			if k == "serve/node/n1" {
				owner = dashboard.NodeOwner("n1", "v1.2.3")
			}
			if _, err := st.Acquire(ctx, driver.AcquireParams{Key: k, Token: fmt.Sprint("tok", i), Owner: owner, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		srv := server(t, st, "tok", nil)
		bearer := map[string]string{"Authorization": "Bearer tok"}
		_, body, _ := call(t, nil, "GET", srv.URL+"/api/locks?limit=2", bearer, "")
		var page struct {
			Locks []struct {
				Key         string
				Owner       string
				Fence       uint64
				ExpiresInMS int64 `json:"expires_in_ms"`
			}
			Total int
			Next  string
		}
		decode(t, body, &page)
		if page.Total != 3 || len(page.Locks) != 2 || page.Locks[0].Key != "other/x" || page.Next != "schedule/a" || page.Locks[0].ExpiresInMS <= 0 {
			t.Errorf("locks page 1: %s", body)
		}
		_, body, _ = call(t, nil, "GET", srv.URL+"/api/locks?limit=2&after="+url.QueryEscape(page.Next), bearer, "")
		decode(t, body, &page)
		if len(page.Locks) != 1 || page.Locks[0].Key != "serve/node/n1" || page.Next != "" {
			t.Errorf("locks page 2: %s", body)
		}

		_, body, _ = call(t, nil, "GET", srv.URL+"/api/jobs", bearer, "")
		var jobs struct {
			Jobs []struct {
				Job       string
				NextTicks []time.Time `json:"next_ticks"`
				Running   []struct {
					Node  string
					Fence uint64
				}
			}
			Total int
		}
		decode(t, body, &jobs)
		if jobs.Total != 3 || jobs.Jobs[0].Job != "a" || len(jobs.Jobs[0].Running) != 1 || jobs.Jobs[0].Running[0].Node != "n1" ||
			len(jobs.Jobs[0].NextTicks) != 3 || len(jobs.Jobs[1].Running) != 0 {
			t.Errorf("jobs: %s", body)
		}

		_, body, _ = call(t, nil, "GET", srv.URL+"/api/nodes", bearer, "")
		if !strings.Contains(body, `"node":"n1","alive":true`) || !strings.Contains(body, `"version":"v1.2.3"`) {
			t.Errorf("nodes: %s", body)
		}

		rel := srv.URL + "/api/locks/" + url.PathEscape("schedule/a") + "/release"
		if code, body, _ := call(t, nil, "POST", rel, bearer, ""); code != 200 || !strings.Contains(body, `"released":"schedule/a"`) {
			t.Errorf("release: %d %s", code, body)
		}
		ls, err := st.Leases(ctx, "schedule/")
		if err != nil || len(ls) != 0 {
			t.Errorf("after release: %v, %v", ls, err)
		}
		if code, _, _ := call(t, nil, "POST", rel, bearer, ""); code != http.StatusNotFound {
			t.Errorf("release of a free key: %d, want 404", code)
		}
	})
}

// record stores n run records of jobs job0..job(jobs-1), ticks one second
// apart, in batches.
func record(t testing.TB, st ledger.Ledger, jobs, n int, base time.Time) {
	t.Helper()
	const batch = 5000
	rs := make([]ledger.RunRecord, 0, batch)
	statuses := []ledger.RunStatus{ledger.RunOK, ledger.RunOK, ledger.RunOK, ledger.RunFailed, ledger.RunSkipped}
	for i := range n {
		tick := base.Add(time.Duration(i/jobs) * time.Second)
		rs = append(rs, ledger.RunRecord{
			Job: fmt.Sprintf("job%05d", i%jobs), Tick: tick, Attempt: 1, Node: fmt.Sprintf("node%d", i%3), Fence: uint64(i + 1),
			Start: tick, End: tick.Add(20 * time.Millisecond), Status: statuses[i%len(statuses)], Output: "line\n",
		})
		if len(rs) == batch || i == n-1 {
			if err := st.RecordRuns(context.Background(), rs); err != nil {
				t.Fatal(err)
			}
			rs = rs[:0]
		}
	}
}

func TestDashboardRunsPagination(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
		record(t, st, 7, 500, base)
		srv := server(t, st, "", nil)
		for _, filter := range []string{"", "&job=job00003", "&status=failed", "&from=" + base.Add(10*time.Second).Format(time.RFC3339) + "&to=" + base.Add(40*time.Second).Format(time.RFC3339)} {
			seen := map[string]int{}
			next, pages := "", 0
			for {
				u := srv.URL + "/api/runs?limit=37" + filter
				if next != "" {
					u += "&before=" + next
				}
				code, body, _ := call(t, nil, "GET", u, nil, "")
				if code != 200 {
					t.Fatalf("%s: %d %s", u, code, body)
				}
				var page struct {
					Runs []struct {
						Job     string
						Tick    time.Time
						Attempt int
						Status  string
					}
					Next string
				}
				decode(t, body, &page)
				pages++
				for _, r := range page.Runs {
					seen[fmt.Sprint(r.Job, r.Tick.Unix(), r.Attempt)]++
				}
				if next = page.Next; next == "" {
					break
				}
			}
			q, _ := url.ParseQuery(strings.TrimPrefix(filter, "&"))
			want := ledger.RunQuery{Job: q.Get("job"), Status: ledger.RunStatus(q.Get("status"))}
			want.From, _ = time.Parse(time.RFC3339, q.Get("from"))
			want.To, _ = time.Parse(time.RFC3339, q.Get("to"))
			all, err := st.Runs(context.Background(), want)
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != len(all) || len(all) == 0 {
				t.Errorf("filter %q: %d distinct records in %d pages, the store has %d", filter, len(seen), pages, len(all))
			}
			for k, n := range seen {
				if n != 1 {
					t.Errorf("filter %q: %s listed %d times", filter, k, n)
				}
			}
		}
		if code, _, _ := call(t, nil, "GET", srv.URL+"/api/runs?before=garbage", nil, ""); code != http.StatusBadRequest {
			t.Errorf("bad cursor: %d", code)
		}
		if code, _, _ := call(t, nil, "GET", srv.URL+"/api/runs?status=weird", nil, ""); code != http.StatusBadRequest {
			t.Errorf("bad status: %d", code)
		}
	})
}

// events opens /api/events with the bearer token and returns a function
// that reads the next summary and returns the sections it says changed;
// the stream ends with the test.
func events(t *testing.T, baseURL, token string) func() []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", baseURL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	return func() (changed []string) {
		t.Helper()
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok && event == "summary" {
				var s struct {
					Changed []string
					Error   string
				}
				decode(t, d, &s)
				if s.Error != "" {
					t.Fatalf("summary error: %s", s.Error)
				}
				return s.Changed
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return nil
	}
}

func TestDashboardEvents(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		srv := server(t, st, "tok", nil)
		nextEvent := events(t, srv.URL, "tok")
		if ch := nextEvent(); strings.Join(ch, ",") != "jobs,runs,locks,nodes" {
			t.Errorf("first event changed %v, want every section", ch)
		}
		if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/b/pause", map[string]string{"Authorization": "Bearer tok"}, ""); code != 200 {
			t.Fatalf("pause: %d %s", code, body)
		}
		for {
			ch := nextEvent()
			if strings.Contains(strings.Join(ch, ","), "jobs") {
				break
			}
		}
	})
}

func TestDashboardMountedUnderPrefix(t *testing.T) {
	st := memstore.New(nil)
	h, err := dashboard.New(dashboard.Options{Store: st, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	mux.Handle("/ops", http.StripPrefix("/ops", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &http.Client{Jar: newJar(t), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if code, _, resp := call(t, c, "GET", srv.URL+"/ops", nil, ""); code != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ops/" {
		t.Errorf("GET /ops: %d to %q", code, resp.Header.Get("Location"))
	}
	// Before logging in, the login page, which posts to ops/login.
	if code, body, _ := call(t, c, "GET", srv.URL+"/ops/", nil, ""); code != http.StatusUnauthorized || !strings.Contains(body, `action="login"`) {
		t.Errorf("GET /ops/ before login: %d %.200s", code, body)
	}
	// A plain form post logs in and goes back to the pages, to the hash
	// route the page was asked for (login.js puts it in "next"); a wrong
	// token keeps it in the page; a "next" that is not a route is ignored.
	code, body, _ := call(t, c, "POST", srv.URL+"/ops/login", nil, "token=wrong&next=%23%2Fjob%2Fx")
	if code != http.StatusUnauthorized || !strings.Contains(body, `name="next" type="hidden" value="#/job/x"`) {
		t.Errorf("login with a wrong token: %d %.600s, want the page with next #/job/x", code, body)
	}
	for next, want := range map[string]string{"": "/ops/", "%23%2Fjob%2Fx": "/ops/#/job/x", "%2F%2Fevil.example": "/ops/", "%23%2Fa%0d%0aX: y": "/ops/"} {
		code, _, resp := call(t, c, "POST", srv.URL+"/ops/login", nil, "token=tok&next="+next)
		if code != http.StatusSeeOther || resp.Header.Get("Location") != want || !strings.Contains(resp.Header.Get("Set-Cookie"), "Path=/ops/") {
			t.Errorf("login with next %q: %d to %q, cookie %q; want %d to %q", next, code, resp.Header.Get("Location"), resp.Header.Get("Set-Cookie"), http.StatusSeeOther, want)
		}
	}
	if code, body, _ := call(t, c, "GET", srv.URL+"/ops/", nil, ""); code != 200 || !strings.Contains(body, `src="app.js"`) {
		t.Errorf("GET /ops/ after login: %d %.200s", code, body)
	}
	if code, body, _ := call(t, c, "GET", srv.URL+"/ops/api/jobs", nil, ""); code != 200 || !strings.Contains(body, `"jobs":[]`) {
		t.Errorf("jobs: %d %s", code, body)
	}
	if code, _, _ := call(t, c, "POST", srv.URL+"/ops/api/jobs/x/pause", map[string]string{"Authorization": "Bearer tok"}, ""); code != 200 {
		t.Errorf("pause without configured jobs: %d", code)
	}
}

// TestDashboardStateChangeShowsLastRun: the job a pause or resume answers
// with carries its last run, as /api/jobs shows it, whether or not the
// dashboard had listed the job before, and also a run newer than the
// last listing (it used to answer with the listing's, minutes old).
func TestDashboardStateChangeShowsLastRun(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		tick := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
		srv := server(t, st, testToken, nil)
		bearer := map[string]string{"Authorization": "Bearer " + testToken}
		for i, op := range []string{"pause", "resume", "pause"} { // before and after /api/jobs listed a
			tick := tick.Add(time.Duration(i) * time.Minute)
			if i != 1 { // a newer run than the listing's
				if err := st.RecordRuns(context.Background(), []ledger.RunRecord{{Job: "a", Tick: tick, Attempt: 1, Node: "n1", Fence: 7,
					Start: tick, End: tick.Add(time.Second), Status: ledger.RunOK}}); err != nil {
					t.Fatal(err)
				}
			} else {
				tick = tick.Add(-time.Minute)
			}
			code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/"+op, bearer, "")
			var out struct {
				Job struct {
					LastRun *struct {
						Tick   time.Time `json:"tick"`
						Fence  uint64    `json:"fence"`
						Status string    `json:"status"`
					} `json:"last_run"`
				} `json:"job"`
			}
			if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
				t.Fatalf("%s: %d %s", op, code, body)
			}
			if lr := out.Job.LastRun; lr == nil || !lr.Tick.Equal(tick) || lr.Fence != 7 || lr.Status != "ok" {
				t.Errorf("%s: last_run %+v, want the ok run of %v with fence 7\n%s", op, lr, tick, body)
			}
			if code, body, _ := call(t, nil, "GET", srv.URL+"/api/jobs", bearer, ""); code != 200 {
				t.Fatalf("/api/jobs: %d %s", code, body)
			}
		}
	})
}
