package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseJobYAMLAndJSON(t *testing.T) {
	yamlJob := `name: nightly
schedule: "@every 10s"
command: [/bin/echo, hi]
timeout: 5s
retries: {max: 2, backoff: 1s}
`
	jsonJob := `{"name": "nightly", "schedule": "@every 10s", "command": ["/bin/echo", "hi"], "timeout": "5s", "retries": {"max": 2, "backoff": "1s"}}`
	a, err := ParseJob("a.yaml", []byte(yamlJob))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseJob("b.json", []byte(jsonJob))
	if err != nil {
		t.Fatal(err)
	}
	a.Line, b.Line = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("YAML and JSON differ:\n%+v\n%+v", a, b)
	}
	if a.Name != "nightly" || a.Timeout != 5*time.Second || a.Retries != 2 || a.KillGrace != DefaultKillGrace || !reflect.DeepEqual(a.Command, []string{"/bin/echo", "hi"}) {
		t.Fatalf("parsed %+v", a)
	}
}

// TestParseJobErrors: a snippet gets the messages of a file's job, naming
// the snippet's source and line.
func TestParseJobErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", `s.yaml: empty: want a job`},
		{"[1, 2]", `s.yaml:1: want a mapping, got a list`},
		{"name: x\nschedule: '@every 1s'\ncommand: [a]\ntimeout: 10x\n", `s.yaml:4: job "x": timeout: invalid duration "10x"`},
		{"name: x\nschedule: '@every 1s'\ncommand: [a]\nbogus: 1\n", `s.yaml:4: job "x": bogus: unknown key`},
		{"name: x\nschedule: 'nope'\ncommand: [a]\n", `s.yaml:2: job "x": schedule:`},
		{"name: x\nschedule: '@every 1s'\n", `s.yaml:1: job "x": command: missing`},
		{"schedule: '@every 1s'\ncommand: [a]\n", `s.yaml:1: name: missing`},
		{"{\"name\": \"x\", \"schedule\": \"@every 1s\", \"command\": \"a\"}", `s.yaml:1: job "x": command: want a list`},
		{"name: x\n---\nname: y\n", `a second YAML document`},
		{"name: x\nschedule: '@every 1s'\ncommand: [a]\nkill_grace: 6s\n", `kill_grace: kill_grace 6s must be less than half of lock_ttl 10s`},
		{"name: [x\n", `s.yaml:1: invalid YAML`},
		{strings.Repeat("#", MaxSnippet+1), `larger than 65536 bytes`},
	} {
		_, err := ParseJob("s.yaml", []byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseJob(%.40q) = %v, want it to contain %q", tc.in, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "jobs[") {
			t.Errorf("ParseJob(%.40q) = %v: a snippet has no jobs[N]", tc.in, err)
		}
	}
}

// TestDefine: the stored form is JSON that parses back to the same job;
// the request's name fills in or must match.
func TestDefine(t *testing.T) {
	j, def, err := Define("-f", []byte("schedule: '@every 2s'\ncommand: [/bin/true]\nmisfire: skip\n"), "beat")
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "beat" {
		t.Fatalf("name %q", j.Name)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(def), &m); err != nil || m["name"] != "beat" || m["misfire"] != "skip" {
		t.Fatalf("def %s: %v", def, err)
	}
	back, err := ParseJob("stored", []byte(def))
	if err != nil {
		t.Fatal(err)
	}
	j.Line, back.Line = 0, 0
	if !reflect.DeepEqual(j, back) {
		t.Fatalf("stored form parses to another job:\n%+v\n%+v", j, back)
	}
	_, _, err = Define("-f", []byte("name: other\nschedule: '@every 2s'\ncommand: [/bin/true]\n"), "beat")
	if err == nil || !strings.Contains(err.Error(), `-f:1: job "beat": name: "other" differs from the job named in the request, "beat"`) {
		t.Fatalf("mismatched name: %v", err)
	}
	_, _, err = Define("-f", []byte("schedule: '@every 2s'\ncommand: [/bin/true]\ntimeout: -1s\n"), "beat")
	if err == nil || !strings.Contains(err.Error(), `-f:3: job "beat": timeout: -1s is negative`) {
		t.Fatalf("bad timeout: %v", err)
	}
	if _, _, err := Define("-f", []byte("x: &a [1]\ny: *a\n"), ""); err == nil {
		t.Fatal("no error for a snippet of unknown keys")
	}
}

// lock_ttl with overlap allow and no pool or max_concurrent has no effect:
// Define (jobs create, POST /api/jobs) refuses it; ParseJob (a job stored
// before that check) accepts it and names it in NoEffect for serve to warn
// of. Such a job's kill_grace is no Lock.Grace, and is not bounded by a
// lock_ttl it has no use for.
func TestLockTTLWithoutALock(t *testing.T) {
	def := "name: x\nschedule: '@every 1s'\ncommand: [a]\noverlap: allow\nlock_ttl: 30s\n"
	if _, _, err := Define("s.yaml", []byte(def), ""); err == nil || !strings.Contains(err.Error(), `s.yaml:5: job "x": lock_ttl: has no effect: overlap is allow`) {
		t.Errorf("Define = %v, want lock_ttl refused", err)
	}
	j, err := ParseJob("stored", []byte(def))
	if err != nil || len(j.NoEffect) != 1 || !strings.HasPrefix(j.NoEffect[0], "lock_ttl has no effect") {
		t.Errorf("ParseJob = %+v, %v; want it accepted, lock_ttl in NoEffect", j.NoEffect, err)
	}
	j, err = ParseJob("s.yaml", []byte("name: x\nschedule: '@every 1s'\ncommand: [a]\noverlap: allow\nkill_grace: 8s\n"))
	if err != nil || j.KillGrace != 8*time.Second || j.Lock.Grace != 0 || len(j.NoEffect) != 0 {
		t.Errorf("kill_grace 8s with overlap allow: %+v, %v; want it accepted, no Lock.Grace", j, err)
	}
	for _, ok := range []string{
		"name: x\nschedule: '@every 1s'\ncommand: [a]\nlock_ttl: 30s\n",                                    // overlap skip
		"name: x\nschedule: '@every 1s'\ncommand: [a]\noverlap: allow\nmax_concurrent: 2\nlock_ttl: 30s\n", // the semaphore's permits
	} {
		if _, _, err := Define("s.yaml", []byte(ok), ""); err != nil {
			t.Errorf("Define(%q) = %v, want it accepted", ok, err)
		}
	}
}
