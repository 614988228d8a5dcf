package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tasklock/tasklock/memstore"
)

// openAPIDoc is the part of openapi.json these tests read.
type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

// operations are the keys of a path item that name a method.
var operations = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi.json: openapi is %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

// TestOpenAPIDocumentsEveryRoute fails when the handler serves a method
// and path that openapi.json does not describe, or openapi.json describes
// one that the handler does not route: a new endpoint needs its entry in
// the document (see the systest module's openapi tests for the shapes).
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	hh, err := New(Options{Store: memstore.New(nil), Token: "t", DefineJob: func([]byte, string) (string, string, error) { return "", "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*handler)
	if len(h.routes) < 15 {
		t.Fatalf("only %d routes recorded: is route or methods still recording them?", len(h.routes))
	}

	// Every route the handler registered is in the document.
	routed := map[string]bool{}
	for _, r := range h.routes {
		path := strings.ReplaceAll(r.pattern, "...}", "}")
		method := strings.ToLower(r.method)
		routed[method+" "+path] = true
		item, ok := doc.Paths[path]
		if !ok {
			t.Errorf("%s %s is routed but openapi.json has no path %q: add it to dashboard/openapi.json", r.method, r.pattern, path)
			continue
		}
		if _, ok := item[method]; !ok {
			t.Errorf("%s %s is routed but openapi.json's path %q has no %q operation: add it to dashboard/openapi.json", r.method, r.pattern, path, method)
		}
	}

	// Every operation of the document is routed, to that pattern.
	param := regexp.MustCompile(`\{[^}]+\}`)
	for path, item := range doc.Paths {
		for _, method := range operations {
			if _, ok := item[method]; !ok {
				continue
			}
			if !routed[method+" "+path] {
				t.Errorf("openapi.json describes %s %s, which the handler does not route: remove it or route it", strings.ToUpper(method), path)
				continue
			}
			req := httptest.NewRequest(strings.ToUpper(method), param.ReplaceAllString(path, "x"), nil)
			if _, pattern := h.mux.Handler(req); strings.ReplaceAll(pattern, "...}", "}") != path {
				t.Errorf("openapi.json describes %s %s, but a request to it goes to the pattern %q", strings.ToUpper(method), path, pattern)
			}
		}
	}
	if t.Failed() {
		var keys []string
		for k := range routed {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Logf("routed: %s", strings.Join(keys, ", "))
	}
}

// TestOpenAPIServed checks GET /api/openapi.json: the embedded document,
// with no credentials even when reading needs the token.
func TestOpenAPIServed(t *testing.T) {
	h, err := New(Options{Store: memstore.New(nil), Token: "secret-token"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/openapi.json", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/openapi.json: %d %q, want 200 application/json", rec.Code, rec.Header().Get("Content-Type"))
	}
	if string(body) != string(openAPI) {
		t.Fatal("GET /api/openapi.json does not answer the embedded document")
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/openapi.json", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /api/openapi.json: %d, want 405", rec.Code)
	}
}
