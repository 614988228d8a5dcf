package dashboard

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/tasklock/tasklock/memstore"
)

// TestUnknownQueryParameter: every API operation refuses a query parameter
// that openapi.json does not give it, with a 400 naming the parameter and
// what the operation takes; GET /api/jobs?job=x used to answer every job,
// as if unfiltered (the filter is name=). The parameters the document
// gives are not refused.
func TestUnknownQueryParameter(t *testing.T) {
	hh, err := New(Options{Store: memstore.New(nil), Token: "t", DefineJob: func([]byte, string) (string, string, error) { return "", "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*handler)
	param := regexp.MustCompile(`\{[^}]+\}`)
	checked := 0
	for _, r := range h.routes {
		if !strings.HasPrefix(r.pattern, "/api/") || r.pattern == "/api/openapi.json" {
			continue
		}
		checked++
		req := httptest.NewRequest(r.method, param.ReplaceAllString(r.pattern, "x")+"?limit=1&bogus=1", nil)
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `unknown query parameter \"bogus\"; `+r.method+" ") {
			t.Errorf("%s %s?bogus=1: %d %s, want 400 naming bogus", r.method, r.pattern, rec.Code, rec.Body)
		}
	}
	if checked < 15 {
		t.Fatalf("only %d API operations checked", checked)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/api/jobs?job=x", nil)
	req.Header.Set("Authorization", "Bearer t")
	h.ServeHTTP(rec, req)
	if want := `{"error":"unknown query parameter \"job\"; GET /api/jobs takes q, name, after, ticks, recent, limit"}`; rec.Code != http.StatusBadRequest || strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("GET /api/jobs?job=x: %d %s, want 400 %s", rec.Code, rec.Body, want)
	}
	for _, target := range []string{"/api/jobs?name=x&ticks=5&recent=3&limit=10&q=a", "/api/runs?job=x&status=ok&limit=5", "/api/audit?job=x&limit=5", "/healthz?probe=1", "/api/openapi.json?v=1"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer t")
		h.ServeHTTP(rec, req)
		if strings.Contains(rec.Body.String(), "unknown query parameter") {
			t.Errorf("GET %s: %d %s: a parameter it takes was refused", target, rec.Code, rec.Body)
		}
	}
}
