package dashboard_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tasklock/tasklock/dashboard"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/memstore"
)

// defineStub stands in for serve's job check: a JSON object with a name
// and a schedule.
func defineStub(body []byte, name string) (string, string, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return "", "", errors.New("not JSON: " + err.Error())
	}
	if name != "" {
		if n, ok := m["name"]; ok && n != name {
			return "", "", errors.New("name: differs")
		}
		m["name"] = name
	}
	n, _ := m["name"].(string)
	if n == "" || m["schedule"] == nil {
		return "", "", errors.New("schedule: missing")
	}
	def, _ := json.Marshal(m)
	return n, string(def), nil
}

// TestDashboardJobAPI: create, update and delete need the token (bearer,
// or session with CSRF), refuse the file's jobs, and write the audit with
// who did it — a session by a hash, never its cookie.
func TestDashboardJobAPI(t *testing.T) {
	st := memstore.New(nil)
	srv := server(t, st, testToken, func(o *dashboard.Options) {
		o.DefineJob = defineStub
		o.FileJob = func(name string) bool { return name == "a" }
	})
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", nil, `{"name":"x","schedule":"@hourly"}`); code != http.StatusUnauthorized {
		t.Errorf("anonymous POST: %d %s", code, body)
	}
	cookie, csrf := login(t, srv.URL)
	sess := map[string]string{"Cookie": "tasklock_session=" + cookie}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", sess, `{"name":"x","schedule":"@hourly"}`); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("session POST without CSRF: %d %s, want 403", code, body)
	}
	sess["X-CSRF-Token"] = csrf
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", sess, `{"name":"x","schedule":"@hourly"}`); code != http.StatusCreated || !strings.Contains(body, `"version":1`) {
		t.Fatalf("session POST: %d %s", code, body)
	}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", bearer, `{"name":"x","schedule":"@daily"}`); code != http.StatusConflict {
		t.Errorf("POST of a defined job: %d %s, want 409", code, body)
	}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", bearer, `{"name":"a","schedule":"@daily"}`); code != http.StatusConflict || !strings.Contains(body, "configuration file") {
		t.Errorf("POST of the file's job: %d %s, want 409", code, body)
	}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", bearer, `{"name":"y"}`); code != http.StatusBadRequest || !strings.Contains(body, "schedule: missing") {
		t.Errorf("POST of a bad job: %d %s, want 400 with the check's message", code, body)
	}
	if code, body, _ := call(t, nil, "PUT", srv.URL+"/api/jobs/x", bearer, `{"schedule":"@daily"}`); code != http.StatusOK || !strings.Contains(body, `"version":2`) {
		t.Errorf("PUT: %d %s", code, body)
	}
	if code, body, _ := call(t, nil, "DELETE", srv.URL+"/api/jobs/nope", bearer, ""); code != http.StatusNotFound {
		t.Errorf("DELETE of an undefined job: %d %s", code, body)
	}
	if code, body, _ := call(t, nil, "DELETE", srv.URL+"/api/jobs/x?cancel=maybe", bearer, ""); code != http.StatusBadRequest {
		t.Errorf("DELETE ?cancel=maybe: %d %s", code, body)
	}
	if code, body, _ := call(t, nil, "DELETE", srv.URL+"/api/jobs/x?cancel=1", bearer, ""); code != http.StatusOK {
		t.Errorf("DELETE: %d %s", code, body)
	}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs/a/pause", sess, ""); code != http.StatusOK {
		t.Errorf("pause: %d %s", code, body)
	}
	if code, body, _ := call(t, nil, "PATCH", srv.URL+"/api/jobs/x", bearer, ""); code != http.StatusMethodNotAllowed {
		t.Errorf("PATCH: %d %s, want 405", code, body)
	}

	code, body, _ := call(t, nil, "GET", srv.URL+"/api/audit", bearer, "")
	var page struct {
		Audit []apijson.Audit
		Next  string
	}
	decode(t, body, &page)
	if code != http.StatusOK || len(page.Audit) != 4 {
		t.Fatalf("GET /api/audit: %d %s", code, body)
	}
	if strings.Contains(body, cookie) {
		t.Errorf("the audit holds the session cookie: %s", body)
	}
	var got []string
	for _, e := range page.Audit {
		got = append(got, e.Action+" "+e.Job+" "+strings.TrimRight(e.Who, "0123456789abcdef"))
	}
	want := []string{"pause a api:session:", "delete x api:token", "update x api:token", "create x api:session:"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audit %q, want %q", got, want)
	}
	if page.Audit[1].Detail != apijson.DeleteCancel || page.Audit[2].Detail != `schedule: "@hourly" -> "@daily"` {
		t.Errorf("details %q, %q", page.Audit[1].Detail, page.Audit[2].Detail)
	}
	// Paged, and by job.
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/audit?limit=3", bearer, "")
	decode(t, body, &page)
	if len(page.Audit) != 3 || page.Next == "" {
		t.Fatalf("first page: %s", body)
	}
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/audit?limit=3&before="+page.Next, bearer, "")
	decode(t, body, &page)
	if len(page.Audit) != 1 || page.Audit[0].Action != "create" || page.Next != "" {
		t.Fatalf("second page: %s", body)
	}
	_, body, _ = call(t, nil, "GET", srv.URL+"/api/audit?job=a", bearer, "")
	decode(t, body, &page)
	if len(page.Audit) != 1 || page.Audit[0].Job != "a" {
		t.Fatalf("?job=a: %s", body)
	}
}

// TestDashboardJobAPIOff: without DefineJob the job API answers 501, and
// without a token every change is refused.
func TestDashboardJobAPIOff(t *testing.T) {
	st := memstore.New(nil)
	srv := server(t, st, testToken, nil)
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	if code, body, _ := call(t, nil, "POST", srv.URL+"/api/jobs", bearer, `{"name":"x","schedule":"@hourly"}`); code != http.StatusNotImplemented {
		t.Errorf("POST without DefineJob: %d %s, want 501", code, body)
	}
	ro := server(t, st, "", func(o *dashboard.Options) { o.DefineJob = defineStub })
	if code, body, _ := call(t, nil, "POST", ro.URL+"/api/jobs", nil, `{"name":"x","schedule":"@hourly"}`); code != http.StatusForbidden {
		t.Errorf("POST on a read-only dashboard: %d %s, want 403", code, body)
	}
	if code, body, _ := call(t, nil, "GET", ro.URL+"/api/audit", nil, ""); code != http.StatusOK {
		t.Errorf("GET /api/audit read-only: %d %s", code, body)
	}
}
