package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/schedule"
)

// The keys of fleet-wide limits and placement: pools and labels at the top,
// max_concurrent, pool, pool_wait and nodes on a job.
func TestParseLimits(t *testing.T) {
	in := `pools: {reports: 2, etl: 1}
labels: [gpu, zone=eu]
preferred_nodes: true
jobs:
  - name: sales
    schedule: "@every 1m"
    command: [report, sales]
    pool: reports
    pool_wait: 5m
    max_concurrent: 3
    nodes: [zone=eu]
  - name: load
    schedule: "@hourly"
    command: [load]
    pool: etl
`
	f, err := Parse("c.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"reports": 2, "etl": 1}; !reflect.DeepEqual(f.Pools, want) {
		t.Errorf("pools %v, want %v", f.Pools, want)
	}
	if want := []string{"gpu", "zone=eu"}; !reflect.DeepEqual(f.Labels, want) {
		t.Errorf("labels %v, want %v", f.Labels, want)
	}
	if !f.PreferredNodes {
		t.Error("preferred_nodes: true not read")
	}
	if f.ClaimAhead != 0 {
		t.Errorf("claim_ahead not given, read as %v", f.ClaimAhead)
	}
	if fa, err := Parse("c.yaml", []byte(strings.Replace(in, "preferred_nodes: true", "claim_ahead: 500ms", 1))); err != nil || fa.ClaimAhead != 500*time.Millisecond {
		t.Errorf("claim_ahead: 500ms: %+v, %v", fa, err)
	}
	j := f.Jobs[0].Job
	if j.Pool != "reports" || j.PoolWait != 5*time.Minute || j.MaxConcurrent != 3 || !reflect.DeepEqual(j.Nodes, []string{"zone=eu"}) {
		t.Errorf("sales: %+v", j)
	}
	if j := f.Jobs[1].Job; j.Pool != "etl" || j.PoolWait != 0 || j.MaxConcurrent != 0 || j.Nodes != nil || j.Overlap != schedule.OverlapSkip {
		t.Errorf("load: %+v", j)
	}
}

func TestParseLimitsErrors(t *testing.T) {
	job := "jobs:\n  - name: j\n    schedule: '@every 1s'\n    command: [x]\n"
	for _, tt := range []struct {
		name, in string
		want     []string
	}{
		{"unknown pool", job + "    pool: nightly\n",
			[]string{`c.yaml:5: job "j": pool: unknown pool "nightly" (the file defines no pools:)`}},
		{"unknown pool among others", "pools: {a: 1, b: 2}\n" + job + "    pool: c\n",
			[]string{`c.yaml:6: job "j": pool: unknown pool "c" (pools: defines a, b)`}},
		{"pool size", "pools: {a: 0, b: many, c: 20000}\n" + job,
			[]string{`c.yaml:1: pools.a: 0 is not within [1, 10000]`, `c.yaml:1: pools.b: want a whole number, got "many"`, `c.yaml:1: pools.c: 20000 is not within [1, 10000]`}},
		{"pool name", "pools: {'re ports': 1}\n" + job,
			[]string{`c.yaml:1: pools.re ports: invalid pool name: "re ports": want ASCII letters, digits and - _ . : = /, starting with a letter or digit`}},
		{"pools list", "pools: [a]\n" + job,
			[]string{`c.yaml:1: pools: want a mapping of pool names to sizes, e.g. {reports: 2}, got a list`}},
		{"labels", "labels: gpu\n" + job, []string{`c.yaml:1: labels: want a list of labels, e.g. [gpu, zone=eu], got "gpu"`}},
		{"label", "labels: [gpu, gpu, 'a b']\n" + job,
			[]string{`c.yaml:1: labels[1]: "gpu" is listed twice`, `c.yaml:1: labels[2]: "a b": want ASCII letters, digits and - _ . : = /, starting with a letter or digit`}},
		{"nodes", job + "    nodes: [-x]\n", []string{`c.yaml:5: job "j": nodes[0]: "-x": want ASCII letters, digits and - _ . : = /, starting with a letter or digit`}},
		{"max_concurrent", job + "    max_concurrent: -2\n", []string{`c.yaml:5: job "j": max_concurrent: -2 is negative`}},
		{"max_concurrent bound", job + "    max_concurrent: 10001\n", []string{`c.yaml:5: job "j": max_concurrent: 10001 is not within [0, 10000]`}},
		{"max_concurrent with overlap skip", job + "    overlap: skip\n    max_concurrent: 2\n",
			[]string{`c.yaml:5: job "j": overlap: skip, and max_concurrent is 2: max_concurrent lets up to that many runs overlap (omit overlap, or set it to allow)`}},
		{"pool_wait without pool", job + "    pool_wait: 1m\n",
			[]string{`c.yaml:5: job "j": pool_wait: set, and pool is not: it bounds the wait for a pool permit`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("c.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("no error; got %+v", f)
			}
			if got := AsErrors(err); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
	if _, err := Parse("c.yaml", []byte("pools: {a: 1}\n"+job+"    overlap: allow\n    max_concurrent: 2\n    pool: a\n")); err != nil {
		t.Errorf("overlap allow with max_concurrent: %v", err)
	}
}
