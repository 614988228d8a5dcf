//go:build unix

package main

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// scrape reads serve's /metrics into a map from series (name and labels as
// written) to value.
func scrape(t *testing.T, dash string) map[string]float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(dash + "metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// A job defined at run time (jobs create) gets its grace and late-ticks
// series as a job of the file does, so that the TasklockJobLate alert
// covers it; before, only the file's jobs had them.
func TestServeRuntimeJobGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "s.db")
	cfg := writeConfig(t, dir, "store: "+store+"\njobs:\n"+indent("name: file\nschedule: \"@every 1h\"\ncommand: [\"true\"]\n"))
	p := tl.Start(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "127.0.0.1:0")
	dash := dashboardURL(t, p)
	c := &cliClient{store: store, dir: dir}
	c.create(t, "name: rt\nschedule: \"@every 1h\"\nmisfire: {grace: 3s}\ncommand: [\"true\"]\n")
	var m map[string]float64
	p.WaitUntil(30*time.Second, func() bool {
		m = scrape(t, dash)
		_, late := m[`tasklock_job_ticks_late_total{job="rt"}`]
		return m[`tasklock_job_grace_seconds{job="rt"}`] == 3 && late
	}, "the runtime job's grace (3s) and late-ticks series")
	if _, ok := m[`tasklock_job_grace_seconds{job="file"}`]; !ok {
		t.Error("the file's job lost its grace series once a job was defined at run time")
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
}

// The per-job metrics of serve after runs: two jobs share a pool of one,
// so at each tick one runs 1.5s and the other waits for the permit, which
// makes it later than its grace (1s).
func TestServeJobMetrics(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cfg := writeConfig(t, t.TempDir(), `store: mem://
node: test-node
pools: {one: 1}
jobs:
  - name: a
    schedule: "@every 2s"
    pool: one
    misfire: {grace: 1s}
    command: ["sleep", "1.5"]
  - name: b
    schedule: "@every 2s"
    pool: one
    misfire: {grace: 1s}
    command: ["sleep", "1.5"]
`)
	p := tl.Start(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "127.0.0.1:0")
	dash := dashboardURL(t, p)
	var m map[string]float64
	p.WaitUntil(60*time.Second, func() bool {
		m = scrape(t, dash)
		return m[`tasklock_job_ticks_late_total{job="a"}`]+m[`tasklock_job_ticks_late_total{job="b"}`] >= 1 &&
			m[`tasklock_job_ticks_succeeded_total{job="a"}`] >= 2 && m[`tasklock_job_ticks_succeeded_total{job="b"}`] >= 2
	}, "a late tick (it waited for the pool) and two successes of each job")
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
	for _, job := range []string{"a", "b"} {
		get := func(name string) float64 {
			k := name + `{job="` + job + `"}`
			v, ok := m[k]
			if !ok {
				t.Errorf("no series %s", k)
			}
			return v
		}
		due, started, succeeded := get("tasklock_job_ticks_due_total"), get("tasklock_job_ticks_started_total"), get("tasklock_job_ticks_succeeded_total")
		skipped, missed := get("tasklock_job_ticks_skipped_total"), get("tasklock_ticks_missed_total")
		// A due tick ends as started, skipped or missed; at a scrape one
		// may wait for the pool, and the next be claimed, not yet skipped.
		if inHand := due - started - skipped - missed; inHand < 0 || inHand > 2 || succeeded > started {
			t.Errorf("%s: due %v, started %v, skipped %v, missed %v, succeeded %v", job, due, started, skipped, missed, succeeded)
		}
		last := get("tasklock_job_last_success_timestamp_seconds")
		if at := time.Unix(0, int64(last*1e9)); at.Before(start) || at.After(time.Now()) {
			t.Errorf("%s: last success at %v, not within the test (%v on)", job, at, start)
		}
		if n := get("tasklock_job_late_seconds_count"); n < started-1 || n > started {
			t.Errorf("%s: %v lateness observations for %v started ticks", job, n, started)
		}
		if g := get("tasklock_job_grace_seconds"); g != 1 {
			t.Errorf("%s: grace %v, want 1", job, g)
		}
	}
	waited := 0.0
	for _, job := range []string{"a", "b"} {
		waited += m[`tasklock_job_late_seconds_count{job="`+job+`"}`] - m[`tasklock_job_late_seconds_bucket{job="`+job+`",le="1"}`]
	}
	if late := m[`tasklock_job_ticks_late_total{job="a"}`] + m[`tasklock_job_ticks_late_total{job="b"}`]; waited < late || late < 1 {
		t.Errorf("%v ticks started later than 1s by the histograms, %v counted late", waited, late)
	}
}

// The shipped alert rules (deploy/prometheus) pass promtool's check and
// their tests of recorded series, and every tasklock metric they use is one
// serve serves. Without promtool (Debian's prometheus package) it skips,
// except in CI (CI=true), where make test installs it.
func TestPrometheusRules(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "prometheus")
	rules, err := os.ReadFile(filepath.Join(dir, "tasklock-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	served := servedMetricNames(t)
	used := map[string]bool{}
	for _, name := range regexp.MustCompile(`\btasklock_[a-z_]+`).FindAllString(string(rules), -1) {
		used[name] = true
	}
	if len(used) < 5 {
		t.Fatalf("the rules use %d tasklock metrics: %v", len(used), used)
	}
	for name := range used {
		if !served[name] {
			t.Errorf("the rules use %s, which serve does not serve (it serves %v)", name, sortedKeys(served))
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found; make test installs it (scripts/install-servers.sh prometheus)")
		}
		t.Skip("promtool not found: apt-get install prometheus (or make servers)")
	}
	for _, args := range [][]string{{"check", "rules", "tasklock-rules.yml"}, {"test", "rules", "tasklock-rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// servedMetricNames are the names of the metric families serve's observer
// serves once a job has run, been skipped, missed and been late.
func servedMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	o := newObserver(slog.New(slog.DiscardHandler))
	o.broken = func() map[string]bool { return map[string]bool{"j": false} }
	o.setJobs([]config.Job{{Job: schedule.Job{Name: "j"}}}, nil)
	tick := time.Now().Add(-time.Minute)
	for _, e := range []schedule.Event{
		{Type: schedule.EventClaimed, Job: "j", Tick: tick},
		{Type: schedule.EventRunStarted, Job: "j", Tick: tick, Attempt: 1, Late: time.Minute, Start: tick.Add(time.Minute)},
		{Type: schedule.EventRunEnded, Job: "j", Tick: tick, Attempt: 1, Start: tick.Add(time.Minute), Duration: time.Second, Status: ledger.RunOK},
		{Type: schedule.EventSkipped, Job: "j", Tick: tick, Status: ledger.RunSkipped},
		{Type: schedule.EventMissed, Job: "j", Tick: tick, Status: ledger.RunMissed},
	} {
		o.scheduleEvent(e)
	}
	o.lockEvent(tasklock.Event{Type: tasklock.EventObtained, Key: "k", Owner: "o", Fence: 1})
	fams, err := o.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
