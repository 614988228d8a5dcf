package openapi_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/buildinfo"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/sqlitestore"
)

// shared pairs the JSON types the CLI and the API share with the
// document's component schemas.
var shared = []struct {
	schema string
	typ    any
}{
	{"JobState", apijson.Job{}},
	{"Trigger", apijson.Trigger{}},
	{"Run", apijson.Run{}},
	{"Lock", apijson.Lock{}},
	{"Audit", apijson.Audit{}},
	{"JobChange", apijson.JobChange{}},
	{"Released", apijson.Released{}},
	{"Build", buildinfo.Info{}},
}

// jsonField is a struct field as encoding/json writes it.
type jsonField struct {
	omitempty bool
	pointer   bool
}

// jsonFields lists the fields encoding/json writes for struct type t, by
// name, embedded structs' fields included.
func jsonFields(t reflect.Type, out map[string]jsonField) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonFields(f.Type, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{omitempty: slices.Contains(strings.Split(opts, ","), "omitempty"), pointer: f.Type.Kind() == reflect.Pointer}
	}
}

// schemaFields lists a component schema's properties, those of its allOf
// included, and its required ones.
func schemaFields(s *openapi3.Schema, props map[string]*openapi3.Schema, required map[string]bool) {
	for name, p := range s.Properties {
		props[name] = p.Value
	}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, sub := range s.AllOf {
		schemaFields(sub.Value, props, required)
	}
}

func readDoc(t *testing.T) *openapi3.T {
	t.Helper()
	data, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	return loadDoc(t, data)
}

// TestOpenAPISchemasMatchSharedTypes checks that each JSON type the CLI
// and the API share has exactly the fields of its component schema: the
// same names; required exactly when the field is always written (no
// omitempty); null allowed where a pointer is written as null.
func TestOpenAPISchemasMatchSharedTypes(t *testing.T) {
	doc := readDoc(t)
	for _, p := range shared {
		sr := doc.Components.Schemas[p.schema]
		if sr == nil {
			t.Errorf("no component schema %s for %T", p.schema, p.typ)
			continue
		}
		fields := map[string]jsonField{}
		jsonFields(reflect.TypeOf(p.typ), fields)
		props, required := map[string]*openapi3.Schema{}, map[string]bool{}
		schemaFields(sr.Value, props, required)
		for name, f := range fields {
			ps, ok := props[name]
			switch {
			case !ok:
				t.Errorf("%T writes %q, which schema %s does not have: add it to dashboard/openapi.json", p.typ, name, p.schema)
				continue
			case f.omitempty && required[name]:
				t.Errorf("%T's %q is omitted when empty, but schema %s requires it", p.typ, name, p.schema)
			case !f.omitempty && !required[name]:
				t.Errorf("%T always writes %q, but schema %s does not require it", p.typ, name, p.schema)
			}
			if f.pointer && !f.omitempty && ps.VisitJSON(nil, openapi3.EnableJSONSchema2020()) != nil {
				t.Errorf("%T writes %q as null when unset, but schema %s does not allow null", p.typ, name, p.schema)
			}
		}
		for name := range props {
			if _, ok := fields[name]; !ok {
				t.Errorf("schema %s has %q, which %T does not write", p.schema, name, p.typ)
			}
		}
	}
}

// TestOpenAPISharedValuesValidate validates values of the shared types,
// every field set and every field at its zero, against their schemas.
func TestOpenAPISharedValuesValidate(t *testing.T) {
	doc := readDoc(t)
	now := time.Now().UTC()
	run := &apijson.Run{Job: "a", Tick: now, Trigger: "t1", Shard: 1, Shards: 4, TickStatus: "running", Attempt: 2, Node: "n1", Fence: 9,
		Start: &now, End: &now, Status: "failed", Error: "exit status 1", Output: "out", Recorded: now}
	for _, v := range []struct {
		schema string
		value  any
	}{
		{"JobState", apijson.Job{Job: "a", State: apijson.StateBroken, Broken: "why", Paused: true, Spec: "@hourly", Since: &now, LastRun: run,
			Triggers: []apijson.Trigger{{ID: "t1", At: now, Tick: &now, Rerun: true}}, After: []string{"p"}, Children: []string{"c"}}},
		{"JobState", apijson.Job{Job: "a", State: apijson.StateOK, Triggers: []apijson.Trigger{}}},
		{"Run", run},
		{"Run", apijson.Run{Job: "a", Tick: now, Status: "missed", Recorded: now}},
		{"Lock", apijson.Lock{Key: "k", Owner: "o", Fence: 1, ExpiresInMS: 10, Kind: "permit", Permits: 3, Waiting: true}},
		{"Lock", apijson.Lock{Key: "k", Kind: "mutex"}},
		{"Audit", apijson.Audit{Seq: 1, At: now, Who: "api:token", Job: "a", Action: "pause", Detail: "d"}},
		{"Audit", apijson.Audit{Seq: 1, At: now, Who: "cli:u@h", Action: "create"}},
		{"JobChange", apijson.JobChange{Job: "a", Op: "update", Version: 2, Changed: true, Detail: "schedule: a -> b"}},
		{"Released", apijson.Released{Released: "k"}},
		{"Build", buildinfo.Get()},
	} {
		validate(t, doc, v.schema, v.value)
	}
}

// validate marshals v and checks it against the component schema.
func validate(t *testing.T, doc *openapi3.T, schema string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	validateJSON(t, doc, schema, b)
}

// validateJSON checks the JSON text b against the component schema.
func validateJSON(t *testing.T, doc *openapi3.T, schema string, b []byte) {
	t.Helper()
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if err := doc.Components.Schemas[schema].Value.VisitJSON(x, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s does not match schema %s: %v", b, schema, err)
	}
}

// TestOpenAPICLIOutputs runs the tasklock command's --json outputs that
// print the API's objects over a filled SQLite store and checks each
// object against its component schema.
func TestOpenAPICLIOutputs(t *testing.T) {
	doc := readDoc(t)
	tl, err := clitest.Build("github.com/tasklock/tasklock/cmd/tasklock")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Remove()
	path := filepath.Join(t.TempDir(), "tl.db")
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.New(db, &sqlitestore.Options{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, st)
	db.Close()

	store := "sqlite://" + path
	run := func(args ...string) []byte {
		t.Helper()
		code, out, errOut := tl.Run(t, nil, append(args, "--json")...)
		if code != 0 {
			t.Fatalf("tasklock %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return []byte(out)
	}
	// each checks every element of the list under key against schema.
	each := func(out []byte, key, schema string, atLeast int) {
		t.Helper()
		var m map[string][]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if len(m[key]) < atLeast {
			t.Errorf("%s: fewer than %d %s", out, atLeast, key)
		}
		for _, v := range m[key] {
			validateJSON(t, doc, schema, v)
		}
	}
	each(run("jobs", "list", "--store", store), "jobs", "JobState", 5)
	each(run("jobs", "history", "--store", store), "runs", "Run", 6)
	each(run("locks", "list", "--store", store), "locks", "Lock", 8)
	each(run("locks", "show", "--store", store, "rw"), "locks", "Lock", 1)
	validateJSON(t, doc, "JobState", run("jobs", "pause", "--store", store, "a"))
	validateJSON(t, doc, "JobState", run("jobs", "trigger", "--store", store, "a"))
	validateJSON(t, doc, "JobChange", run("jobs", "create", "--store", store, "dyn", "--schedule", "@hourly", "--command", "true"))
	validateJSON(t, doc, "JobChange", run("jobs", "delete", "--store", store, "dyn"))
	each(run("jobs", "audit", "--store", store), "audit", "Audit", 2)

	// The JobDefinition schema takes what serve's check of a job takes
	// (jobs create -f runs the same check as POST /api/jobs), and refuses
	// what it refuses.
	dir := t.TempDir()
	for i, def := range []struct {
		json string
		ok   bool
	}{
		{`{"name":"full","schedule":"0 30 2 * * *","timezone":"Europe/Berlin","command":["/bin/true","--all"],"kill_grace":"2s",
			"timeout":"10m","overlap":"skip","misfire":{"policy":"catch_up","grace":"30s","window":"1h","max":3},
			"retries":{"max":3,"backoff":"10s","backoff_max":"1m"},"jitter":"0s","lock_ttl":"10s","min_hold":"5s","max_hold":"1h",
			"nodes":["zone=eu"],"shards":4}`, true},
		{`{"name":"lead","schedule":"@hourly","command":["true"],"run_on":"leader","overlap":"allow","max_concurrent":2}`, true},
		{`{"name":"hook","schedule":"@every 1m","http":{"method":"POST","url":"https://example.com/hook","headers":{"X-A":"b"},"body":"{}","timeout":"10s"},
			"misfire":"skip","retries":2,"after":["full"],"within":"30m"}`, true},
		{`{"name":"bad1","schedule":"@hourly","command":["true"],"overlap":"sometimes"}`, false},
		{`{"name":"bad2","schedule":"@hourly","command":["true"],"timeout":"10"}`, false},
		{`{"name":"bad3","schedule":"@hourly","command":["true"],"colour":"red"}`, false},
		{`{"name":"bad4","schedule":"@hourly","command":"true"}`, false},
	} {
		file := filepath.Join(dir, fmt.Sprintf("job%d.json", i))
		if err := os.WriteFile(file, []byte(def.json), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := tl.Run(t, nil, "jobs", "create", "--store", store, "-f", file)
		var v any
		if err := json.Unmarshal([]byte(def.json), &v); err != nil {
			t.Fatal(err)
		}
		verr := doc.Components.Schemas["JobDefinition"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
		switch {
		case (code == 0) != def.ok:
			t.Errorf("tasklock jobs create -f %s: exit %d (%s), want ok %v", def.json, code, errOut, def.ok)
		case def.ok && verr != nil:
			t.Errorf("serve takes %s, but the JobDefinition schema refuses it: %v", def.json, verr)
		case !def.ok && verr == nil:
			t.Errorf("serve refuses %s (%s), but the JobDefinition schema takes it", def.json, strings.TrimSpace(errOut))
		}
	}
	validateJSON(t, doc, "Released", run("locks", "release", "--store", store, "plain", "--force"))
	validateJSON(t, doc, "Build", run("version"))
}
