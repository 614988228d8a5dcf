package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// fakeClock is a clock that moves only when told; its timers are real.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) tasklock.Timer {
	return tasklock.SystemClock{}.NewTimer(d)
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const testToken = "correct horse battery"

// login logs in and returns the session cookie's value and the CSRF token.
func login(t *testing.T, base string) (cookie, csrf string) {
	t.Helper()
	code, body, resp := call(t, nil, "POST", base+"/login", map[string]string{"Accept": "application/json"}, "token="+url.QueryEscape(testToken))
	if code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "tasklock_session" {
			cookie = c.Value
		}
	}
	var l struct{ CSRF string }
	decode(t, body, &l)
	if cookie == "" || l.CSRF == "" {
		t.Fatalf("login gave cookie %q and csrf %q", cookie, l.CSRF)
	}
	return cookie, l.CSRF
}

// TestDashboardSessionsAreDistinct: two logins in the same second (the
// clock does not move) get different session cookies and CSRF tokens.
func TestDashboardSessionsAreDistinct(t *testing.T) {
	clk := newFakeClock()
	srv := server(t, memstore.New(nil), testToken, func(o *dashboard.Options) { o.Clock = clk })
	c1, x1 := login(t, srv.URL)
	c2, x2 := login(t, srv.URL)
	if c1 == c2 {
		t.Errorf("two logins got the same session cookie %q", c1)
	}
	if x1 == x2 {
		t.Errorf("two logins got the same CSRF token %q", x1)
	}
	// A session's CSRF token does not work with another session's cookie.
	code, _, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", map[string]string{"Cookie": "tasklock_session=" + c1, "X-CSRF-Token": x2}, "")
	if code != http.StatusForbidden {
		t.Errorf("cookie 1 with CSRF token 2: %d, want 403", code)
	}
}

// TestDashboardLogoutRevokes: after logout, a kept copy of the cookie and
// CSRF token can no longer act or read.
func TestDashboardLogoutRevokes(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		srv := server(t, st, testToken, nil)
		cookie, csrf := login(t, srv.URL)
		other, otherCSRF := login(t, srv.URL)
		hdr := map[string]string{"Cookie": "tasklock_session=" + cookie, "X-CSRF-Token": csrf}
		if code, body, _ := call(t, nil, "POST", srv.URL+"/logout", hdr, ""); code != 200 {
			t.Fatalf("logout: %d %s", code, body)
		}
		if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", hdr, ""); code != http.StatusUnauthorized {
			t.Errorf("pause with the logged-out cookie and CSRF token: %d %s, want 401", code, body)
		}
		if p, _ := paused(t, st, "a"); p {
			t.Error("a logged-out session paused a job")
		}
		if code, _, _ := call(t, nil, "GET", srv.URL+"/api/runs", hdr, ""); code != http.StatusUnauthorized {
			t.Errorf("read with the logged-out cookie: %d, want 401", code)
		}
		// The other session lives on.
		code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", map[string]string{"Cookie": "tasklock_session=" + other, "X-CSRF-Token": otherCSRF}, "")
		if code != 200 {
			t.Errorf("pause with another session: %d %s", code, body)
		}
	})
}

// TestDashboardSessionExpires: a session ends 12 hours after its login.
func TestDashboardSessionExpires(t *testing.T) {
	clk := newFakeClock()
	srv := server(t, memstore.New(nil), testToken, func(o *dashboard.Options) { o.Clock = clk })
	cookie, _ := login(t, srv.URL)
	hdr := map[string]string{"Cookie": "tasklock_session=" + cookie}
	clk.add(12*time.Hour - time.Second)
	if code, _, _ := call(t, nil, "GET", srv.URL+"/api/nodes", hdr, ""); code != 200 {
		t.Errorf("read 1 s before expiry: %d", code)
	}
	clk.add(time.Second)
	if code, _, _ := call(t, nil, "GET", srv.URL+"/api/nodes", hdr, ""); code != http.StatusUnauthorized {
		t.Errorf("read at expiry: %d, want 401", code)
	}
}

// getOnce makes a GET and returns its status and body, of an event stream
// only the first read (the stream does not end).
func getOnce(t *testing.T, u string, hdr map[string]string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b = buf[:n]
	} else {
		b, _ = io.ReadAll(resp.Body)
	}
	return resp.StatusCode, string(b), resp
}

// readPaths are the endpoints that show data.
var readPaths = []string{"/api/info", "/api/jobs", "/api/runs", "/api/locks", "/api/nodes", "/api/events", "/api/notifications"}

// TestDashboardReadNeedsToken: with a token, anonymous callers get 401
// from the API and the login page for the UI; the token, as a bearer or a
// session, reads; /healthz needs nothing.
func TestDashboardReadNeedsToken(t *testing.T) {
	eachStore(t, func(t *testing.T, st ledgerStore) {
		now := time.Now().UTC()
		if err := st.RecordRuns(context.Background(), []ledger.RunRecord{{Job: "a", Tick: now, Attempt: 1, Node: "n1", Fence: 1,
			Start: now, End: now, Status: ledger.RunFailed, Error: "exit 1", Output: "private output tail"}}); err != nil {
			t.Fatal(err)
		}
		srv := server(t, st, testToken, nil)
		for _, p := range readPaths {
			code, body, resp := getOnce(t, srv.URL+p, nil)
			if code != http.StatusUnauthorized || !strings.Contains(body, `"error"`) || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("anonymous GET %s: %d %.100s, want 401 JSON with WWW-Authenticate", p, code, body)
			}
			if strings.Contains(body, "private output") || strings.Contains(body, "n1") {
				t.Errorf("anonymous GET %s shows data: %s", p, body)
			}
		}
		code, body, _ := call(t, nil, "GET", srv.URL+"/", nil, "")
		if code != http.StatusUnauthorized || !strings.Contains(body, `id="login-token"`) || strings.Contains(body, "app.js") {
			t.Errorf("anonymous GET /: %d %.300s, want 401 with the login page", code, body)
		}
		if code, _, _ := call(t, nil, "GET", srv.URL+"/app.js", nil, ""); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET /app.js: %d, want 401", code)
		}
		for _, p := range []string{"/style.css", "/login.js"} {
			if code, _, _ := call(t, nil, "GET", srv.URL+p, nil, ""); code != 200 {
				t.Errorf("anonymous GET %s (the login page's): %d", p, code)
			}
		}
		if code, body, _ := call(t, nil, "GET", srv.URL+"/healthz", nil, ""); code != 200 || body != "ok\n" {
			t.Errorf("anonymous GET /healthz: %d %q", code, body)
		}
		bearer := map[string]string{"Authorization": "Bearer " + testToken}
		for _, p := range append([]string{"/", "/app.js"}, readPaths...) {
			if code, body, _ := getOnce(t, srv.URL+p, bearer); code != 200 {
				t.Errorf("GET %s with the bearer token: %d %.200s", p, code, body)
			}
		}
		if _, body, _ := call(t, nil, "GET", srv.URL+"/api/runs", bearer, ""); !strings.Contains(body, "private output tail") {
			t.Errorf("runs with the bearer token: %s", body)
		}
		if code, _, _ := call(t, nil, "GET", srv.URL+"/api/runs", map[string]string{"Authorization": "Bearer wrong"}, ""); code != http.StatusUnauthorized {
			t.Errorf("GET /api/runs with a wrong bearer token: %d, want 401", code)
		}
		cookie, _ := login(t, srv.URL)
		sess := map[string]string{"Cookie": "tasklock_session=" + cookie}
		for _, p := range append([]string{"/"}, readPaths...) {
			if code, body, _ := getOnce(t, srv.URL+p, sess); code != 200 {
				t.Errorf("GET %s with a session: %d %.200s", p, code, body)
			}
		}
		if _, body, _ := call(t, nil, "GET", srv.URL+"/", sess, ""); !strings.Contains(body, `src="app.js"`) {
			t.Errorf("GET / with a session is not the dashboard: %.300s", body)
		}
		// A plain form post with a wrong token gets the page back.
		code, body, _ = call(t, nil, "POST", srv.URL+"/login", nil, "token=wrong")
		if code != http.StatusUnauthorized || !strings.Contains(body, "wrong token") || !strings.Contains(body, `id="login-form"`) {
			t.Errorf("form login with a wrong token: %d %.300s", code, body)
		}
	})
}

// TestDashboardPublicRead: with PublicRead anonymous callers read, but
// acting still needs the token.
func TestDashboardPublicRead(t *testing.T) {
	st := memstore.New(nil)
	srv := server(t, st, testToken, func(o *dashboard.Options) { o.PublicRead = true })
	for _, p := range append([]string{"/", "/app.js"}, readPaths...) {
		if code, body, _ := getOnce(t, srv.URL+p, nil); code != 200 {
			t.Errorf("anonymous GET %s with PublicRead: %d %.200s", p, code, body)
		}
	}
	_, body, _ := call(t, nil, "GET", srv.URL+"/api/info", nil, "")
	if !strings.Contains(body, `"public_read":true`) || !strings.Contains(body, `"read_only":false`) || !strings.Contains(body, `"logged_in":false`) {
		t.Errorf("info: %s", body)
	}
	if code, _, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous pause with PublicRead: %d, want 401", code)
	}
	if code, _, _ := call(t, nil, "GET", srv.URL+"/api/jobs", map[string]string{"Authorization": "Bearer wrong"}, ""); code != http.StatusUnauthorized {
		t.Errorf("a wrong bearer token with PublicRead: %d, want 401", code)
	}
	if p, _ := paused(t, st, "a"); p {
		t.Error("paused anonymously")
	}
}

// TestDashboardBearerSchemeCaseInsensitive: RFC 9110 makes the scheme
// name case-insensitive.
func TestDashboardBearerSchemeCaseInsensitive(t *testing.T) {
	st := memstore.New(nil)
	srv := server(t, st, testToken, nil)
	for _, scheme := range []string{"bearer", "BEARER", "bEaReR"} {
		code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", map[string]string{"Authorization": scheme + " " + testToken}, "")
		if code != 200 {
			t.Errorf("%s TOKEN: %d %s", scheme, code, body)
		}
	}
	if code, _, _ := call(t, nil, "GET", srv.URL+"/api/jobs", map[string]string{"Authorization": "bearer " + testToken}, ""); code != 200 {
		t.Errorf("GET with bearer TOKEN: %d", code)
	}
	if code, _, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", map[string]string{"Authorization": "Basic " + testToken}, ""); code != http.StatusUnauthorized {
		t.Errorf("Basic TOKEN: %d, want 401", code)
	}
}

// do serves one request from the address from.
func do(h http.Handler, from, method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = from
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestDashboardFailuresRateLimited: ten failed logins or bearer tokens from
// one address, then one per 6 s; the eleventh is 429 with Retry-After,
// even with the right token; other addresses are not affected, and
// successes do not count.
func TestDashboardFailuresRateLimited(t *testing.T) {
	clk := newFakeClock()
	h, err := dashboard.New(dashboard.Options{Store: memstore.New(nil), Token: testToken, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	const attacker, v6a, v6b, other = "192.0.2.7:4000", "[2001:db8:1:2::1]:4000", "[2001:db8:1:2::99]:4001", "192.0.2.8:4000"
	jsonHdr := map[string]string{"Accept": "application/json"}
	good := "token=" + url.QueryEscape(testToken)
	// Successes do not count.
	for i := range 20 {
		if w := do(h, attacker, "POST", "/login", jsonHdr, good); w.Code != 200 {
			t.Fatalf("good login %d: %d", i, w.Code)
		}
		if w := do(h, attacker, "GET", "/api/jobs", map[string]string{"Authorization": "Bearer " + testToken}, ""); w.Code != 200 {
			t.Fatalf("good bearer %d: %d", i, w.Code)
		}
	}
	for i := range 10 {
		if w := do(h, attacker, "POST", "/login", jsonHdr, "token=guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("bad login %d: %d, want 401", i+1, w.Code)
		}
	}
	w := do(h, attacker, "POST", "/login", jsonHdr, "token=guess")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "6" {
		t.Fatalf("11th bad login: %d Retry-After %q, want 429 and 6", w.Code, w.Header().Get("Retry-After"))
	}
	if w := do(h, attacker, "POST", "/login", jsonHdr, good); w.Code != http.StatusTooManyRequests {
		t.Errorf("the right token while limited: %d, want 429", w.Code)
	}
	if w := do(h, attacker, "POST", "/api/jobs/a/pause", map[string]string{"Authorization": "Bearer guess"}, ""); w.Code != http.StatusTooManyRequests {
		t.Errorf("a bearer guess while limited: %d, want 429", w.Code)
	}
	if w := do(h, attacker, "POST", "/login", nil, "token=guess"); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `id="login-form"`) {
		t.Errorf("a form login while limited: %d, want 429 with the login page", w.Code)
	}
	if w := do(h, other, "POST", "/login", jsonHdr, "token=guess"); w.Code != http.StatusUnauthorized {
		t.Errorf("another address: %d, want 401", w.Code)
	}
	clk.add(3 * time.Second)
	if w := do(h, attacker, "POST", "/login", jsonHdr, good); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "3" {
		t.Errorf("3 s later: %d Retry-After %q, want 429 and 3", w.Code, w.Header().Get("Retry-After"))
	}
	clk.add(3 * time.Second)
	if w := do(h, attacker, "POST", "/login", jsonHdr, good); w.Code != 200 {
		t.Errorf("6 s later with the right token: %d, want 200", w.Code)
	}
	if w := do(h, attacker, "POST", "/login", jsonHdr, "token=guess"); w.Code != http.StatusUnauthorized {
		t.Errorf("6 s later a guess: %d, want 401", w.Code)
	}
	if w := do(h, attacker, "POST", "/login", jsonHdr, "token=guess"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a second guess within 6 s: %d, want 429", w.Code)
	}

	// Bearer failures count the same way; an IPv6 client is its /64.
	for i := range 10 {
		if w := do(h, v6a, "GET", "/api/runs", map[string]string{"Authorization": "Bearer guess"}, ""); w.Code != http.StatusUnauthorized {
			t.Fatalf("bad bearer %d: %d, want 401", i+1, w.Code)
		}
	}
	if w := do(h, v6b, "GET", "/api/runs", map[string]string{"Authorization": "bearer " + testToken}, ""); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("11th bearer from the same /64: %d, want 429 with Retry-After", w.Code)
	}
}

// TestDashboardReadOnlyHint: without a token the pages say why acting is
// off and offer no login.
func TestDashboardReadOnlyHint(t *testing.T) {
	srv := server(t, memstore.New(nil), "", nil)
	_, body, _ := call(t, nil, "GET", srv.URL+"/", nil, "")
	if !strings.Contains(body, "started without --token") {
		t.Errorf("the read-only page does not say it was started without --token: %s", body)
	}
	_, js, _ := call(t, nil, "GET", srv.URL+"/app.js", nil, "")
	if !strings.Contains(js, "started without --token") {
		t.Error("app.js does not explain disabled buttons with \"started without --token\"")
	}
}
