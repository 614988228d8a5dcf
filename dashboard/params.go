package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// queryParams are the query parameters each API operation takes, as
// openapi.json describes them: "GET /api/jobs" → q, name, after, …. A
// request with any other is refused (checkParams), so that a misspelt
// filter (?job= where name= is meant) is not silently ignored and
// answered with everything.
var queryParams = mustQueryParams(openAPI)

// mustQueryParams reads the query parameters of every operation of doc,
// an OpenAPI document, following references to components/parameters.
// doc is embedded, and TestOpenAPI reads it too: a document it cannot
// read is a build mistake.
func mustQueryParams(doc []byte) map[string][]string {
	type param struct {
		Ref  string `json:"$ref"`
		In   string `json:"in"`
		Name string `json:"name"`
	}
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]param `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(fmt.Sprintf("dashboard: openapi.json: %v", err))
	}
	out := make(map[string][]string)
	for path, ops := range d.Paths {
		var shared []param
		if raw, ok := ops["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				panic(fmt.Sprintf("dashboard: openapi.json: %s parameters: %v", path, err))
			}
		}
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				Parameters []param `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				continue // not an operation (summary, description)
			}
			names := []string{}
			for _, p := range append(op.Parameters, shared...) {
				if p.Ref != "" {
					p = d.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				}
				if p.In == "query" {
					names = append(names, p.Name)
				}
			}
			out[strings.ToUpper(method)+" "+path] = names
		}
	}
	return out
}

// checkParams answers 400, naming it and what the operation takes, when r
// carries a query parameter that the API operation method pattern does
// not take, and reports whether r may go on. Only the API's operations on
// data are checked: probes, pages and the OpenAPI document take what they
// are given.
func checkParams(w http.ResponseWriter, r *http.Request, method, pattern string) bool {
	if !strings.HasPrefix(pattern, "/api/") || pattern == "/api/openapi.json" || r.URL.RawQuery == "" {
		return true
	}
	takes := queryParams[method+" "+strings.ReplaceAll(pattern, "...}", "}")]
	var unknown []string
	for name := range r.URL.Query() {
		if !slices.Contains(takes, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return true
	}
	slices.Sort(unknown)
	what := "none"
	if len(takes) > 0 {
		what = strings.Join(takes, ", ")
	}
	writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q; %s %s takes %s", unknown[0], method, pattern, what))
	return false
}
