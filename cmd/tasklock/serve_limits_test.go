//go:build unix

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/ledger"
)

// A pool of 2 shared by four jobs on two serves over SQLite, then Redis: the jobs want
// more than two runs at once (each runs 0.8s every second), and the pool
// never lets more than two overlap across the fleet. The --label flags pin
// two jobs to each serve (nodes:), so the pool is shared across processes.
// The oracle is the file the commands append "start"/"end" lines to, with
// the kernel's monotonic uptime: O_APPEND writes are ordered, and a run
// writes "end" before its process exits and its permit is released, so
// counting starts minus ends in file order over-counts overlap, never
// under-counts it.
func TestServePoolAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			testServePoolAcrossNodes(t, store)
		})
	}
}

func testServePoolAcrossNodes(t *testing.T, store string) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "fleet.db")
	if store == "redis" {
		url, _ = redisFor(t)
	}
	out := filepath.Join(dir, "runs.out")
	var jobs strings.Builder
	jobs.WriteString("store: " + url + "\npools: {reports: 2}\njobs:\n")
	for _, j := range []struct{ name, label string }{{"r1", "a"}, {"r2", "a"}, {"r3", "b"}, {"r4", "b"}} {
		jobs.WriteString(`  - name: ` + j.name + `
    schedule: "@every 1s"
    pool: reports
    nodes: [` + j.label + `]
    command: ["sh", "-c", "echo \"start $TASKLOCK_JOB $TASKLOCK_NODE $(cut -d' ' -f1 /proc/uptime)\" >> \"$RUNS_OUT\"; sleep 0.8; echo \"end $TASKLOCK_JOB $TASKLOCK_NODE $(cut -d' ' -f1 /proc/uptime)\" >> \"$RUNS_OUT\""]
`)
	}
	cfg := writeConfig(t, dir, jobs.String())
	env := []string{"RUNS_OUT=" + out}
	procs := []*proc{
		tl.Start(t, env, "serve", "--config", cfg, "--node", "n1", "--label", "a", "--log-format", "json"),
		tl.Start(t, env, "serve", "--config", cfg, "--node", "n2", "--label", "b", "--log-format", "json"),
	}
	type line struct{ kind, job, node string }
	read := func() []line {
		b, err := os.ReadFile(out)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var ls []line
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 4 {
				ls = append(ls, line{f[0], f[1], f[2]})
			}
		}
		return ls
	}
	ends := func() int {
		n := 0
		for _, l := range read() {
			if l.kind == "end" {
				n++
			}
		}
		return n
	}
	// Enough runs to have seen the pool full across both serves: on a
	// loaded machine that takes longer, not fewer checks.
	full := func() bool {
		running, peak, nodes := 0, 0, map[string]bool{}
		for _, l := range read() {
			switch l.kind {
			case "start":
				running++
				peak = max(peak, running)
				nodes[l.node] = true
			case "end":
				running--
			}
		}
		return peak >= 2 && len(nodes) == 2
	}
	procs[0].WaitUntil(3*time.Minute, func() bool { return ends() >= 8 && full() }, "8 runs of the pool's jobs, the pool full across both serves")
	seen := ends()
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("serve exit %d\n%s", code, p.Stderr())
		}
	}

	running, peak := 0, 0
	perNode := map[string]int{}
	for _, l := range read() {
		switch l.kind {
		case "start":
			running++
			perNode[l.node]++
			peak = max(peak, running)
			if want := map[string]string{"r1": "n1", "r2": "n1", "r3": "n2", "r4": "n2"}[l.job]; l.node != want {
				t.Errorf("%s ran on %s, want %s (nodes: and --label)", l.job, l.node, want)
			}
		case "end":
			running--
		}
	}
	if peak > 2 {
		b, _ := os.ReadFile(out)
		t.Fatalf("%d runs of pool reports (size 2) at once:\n%s", peak, b)
	}
	if peak < 2 || perNode["n1"] == 0 || perNode["n2"] == 0 {
		t.Fatalf("peak %d, runs by node %v: the pool was never full across both nodes, so the test shows nothing", peak, perNode)
	}
	// Runs that waited past their next tick are skipped, naming the pool.
	skipped, ok, waited := 0, 0, 0
	for _, job := range []string{"r1", "r2", "r3", "r4"} {
		for _, r := range historyJSON(t, url, job) {
			switch r.Status {
			case string(ledger.RunSkipped):
				skipped++
				if !strings.Contains(r.Error, `pool "reports"`) && !strings.Contains(r.Error, "still in progress") {
					t.Errorf("%s skipped: %q, want the pool named", job, r.Error)
				}
			case string(ledger.RunOK):
				ok++
				if r.Start != nil && r.Start.Sub(r.Tick) > 100*time.Millisecond {
					waited++ // started late: it waited for a permit
				}
			}
		}
	}
	t.Logf("peak %d; runs by node %v; history: %d ok (%d after waiting for a permit), %d skipped", peak, perNode, ok, waited, skipped)
	if ok < seen {
		t.Errorf("%d ok records, want at least the %d runs seen", ok, seen)
	}
}

// serve --label: repeatable, each checked, replacing the file's labels.
func TestServeLabelFlags(t *testing.T) {
	c, err := parseServe([]string{"--config", "x", "--label", "gpu", "--label", "zone=eu"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	f := &config.File{Labels: []string{"from-file"}}
	c.apply(f)
	if want := []string{"gpu", "zone=eu"}; !slices.Equal(f.Labels, want) {
		t.Errorf("labels %v, want %v", f.Labels, want)
	}
	c, err = parseServe([]string{"--config", "x"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	f = &config.File{Labels: []string{"from-file"}}
	c.apply(f)
	if !slices.Equal(f.Labels, []string{"from-file"}) {
		t.Errorf("without --label: labels %v, want the file's", f.Labels)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--config", "x", "--label", "a b"}},
		{[]string{"--config", "x", "--label", ""}},
		{[]string{"--config", "x", "--label", "a", "--label", "a"}},
	} {
		if _, err := parseServe(tc.args, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "-label") {
			t.Errorf("%q: error %v, want one naming --label", tc.args, err)
		}
	}
}
