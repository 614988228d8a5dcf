//go:build unix

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
)

// jsonLines parses serve's --log-format json stderr.
func jsonLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil && strings.HasSuffix(stderr, "\n") {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// Failed, timed-out runs log at WARN; ok runs stay at INFO. Before: every
// run line was INFO.
func TestLogLevels(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), memConfig(`  - name: good
    schedule: "@every 1s"
    command: ["true"]
  - name: bad
    schedule: "@every 1s"
    command: ["false"]
  - name: slow
    schedule: "@every 1s"
    command: ["sleep", "5"]
    timeout: 300ms
    kill_grace: 100ms
`))
	p := tl.Start(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "")
	want := map[string]string{"ok": "INFO", "failed": "WARN", "timeout": "WARN"}
	levels := map[string]map[string]bool{}
	clitest.WaitFor(t, 20*time.Second, func() bool {
		clear(levels)
		for _, rec := range jsonLines(t, p.Stderr()) {
			if rec["msg"] != "run ended" {
				continue
			}
			st, _ := rec["status"].(string)
			lv, _ := rec["level"].(string)
			if levels[st] == nil {
				levels[st] = map[string]bool{}
			}
			levels[st][lv] = true
		}
		return len(levels["ok"]) > 0 && len(levels["failed"]) > 0 && len(levels["timeout"]) > 0
	}, "an ok, a failed and a timed-out run")
	for st, lv := range want {
		if len(levels[st]) != 1 || !levels[st][lv] {
			t.Errorf("runs ending %s logged at %v, want only %s", st, levels[st], lv)
		}
	}
	for _, rec := range jsonLines(t, p.Stderr()) {
		if rec["msg"] == "run started" && rec["level"] != "INFO" {
			t.Errorf("run started at %v", rec["level"])
		}
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.Stderr())
	}
}

// sqliteLedger opens a SQLite file store's ledger, as a serve node would.
func sqliteLedger(t *testing.T, url string) ledger.Ledger {
	t.Helper()
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeStore() })
	return store.(ledger.Ledger)
}

// listJobs runs jobs list --json.
func listJobs(t *testing.T, url string) map[string]jobJSON {
	t.Helper()
	code, out, errOut := tl.Run(t, nil, "jobs", "list", "--json", "--store", url)
	var list struct {
		Jobs []jobJSON `json:"jobs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("jobs list --json = %d\n%s%s", code, out, errOut)
	}
	m := map[string]jobJSON{}
	for _, j := range list.Jobs {
		m[j.Job] = j
	}
	return m
}

// trigger, pause and resume refuse a job no node registered (exit 1, no job
// named "NAME") unless --force, and jobs forget removes a job's state.
// Before: jobs trigger ghost exited 0 and ghost was listed from then on.
func TestJobsNoGhosts(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	l := sqliteLedger(t, url)
	if _, err := l.SetJobState(context.Background(), ledger.JobStateParams{Job: "real", Op: ledger.JobRegister, Spec: "@hourly", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"trigger", "pause", "resume"} {
		code, out, errOut := tl.Run(t, nil, "jobs", sub, "ghost", "--store", url)
		if code != 1 || out != "" || !strings.Contains(errOut, `no job named "ghost"`) {
			t.Errorf("jobs %s ghost = %d, stdout %q, stderr %q; want 1 and no job named \"ghost\"", sub, code, out, errOut)
		}
		if code, out, errOut := tl.Run(t, nil, "jobs", sub, "real", "--store", url); code != exitOK {
			t.Errorf("jobs %s real = %d\n%s%s", sub, code, out, errOut)
		}
	}
	if _, ok := listJobs(t, url)["ghost"]; ok {
		t.Fatal("a refused command left a ghost job listed")
	}
	if code, out, errOut := tl.Run(t, nil, "jobs", "pause", "ghost", "--force", "--store", url); code != exitOK || !strings.Contains(out, `paused "ghost"`) {
		t.Fatalf("jobs pause ghost --force = %d\n%s%s", code, out, errOut)
	}
	if j, ok := listJobs(t, url)["ghost"]; !ok || j.State != "paused" {
		t.Fatalf("after --force: ghost is %+v (listed %v), want paused", j, ok)
	}
	// forget removes it; forgetting it again is refused, unless --force.
	if code, out, errOut := tl.Run(t, nil, "jobs", "forget", "ghost", "--store", url); code != exitOK || !strings.Contains(out, `forgot "ghost"`) {
		t.Fatalf("jobs forget ghost = %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "ghost", "--store", url); code != 1 || !strings.Contains(errOut, `no job named "ghost"`) {
		t.Errorf("jobs forget ghost again = %d, %s", code, errOut)
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "ghost", "--force", "--store", url); code != exitOK {
		t.Errorf("jobs forget ghost --force = %d, %s", code, errOut)
	}
	jobs := listJobs(t, url)
	if _, ok := jobs["ghost"]; ok {
		t.Fatal("forgotten ghost still listed")
	}
	if j := jobs["real"]; j.State != "ok" || j.Spec != "@hourly" || j.Since == nil || len(j.Triggers) != 1 {
		t.Errorf("real: %+v, want ok, registered, one pending trigger", j)
	}
	// A job that ran its latest tick is refused: a node still has it, and
	// forgetting would drop its pause under it.
	tick := time.Now().Truncate(time.Hour)
	if err := l.RecordRuns(context.Background(), []ledger.RunRecord{{Job: "real", Tick: tick, Attempt: 1, Node: "n1", Start: tick, End: tick, Status: ledger.RunOK}}); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "real", "--store", url); code != 1 || !strings.Contains(errOut, `job "real" still looks configured`) || !strings.Contains(errOut, "--force") {
		t.Fatalf("jobs forget real, which ran tick %s = %d, %s; want 1, still looks configured", tick, code, errOut)
	}
	// A paused job too, whenever it ran: forgetting drops its pause.
	if code, _, errOut := tl.Run(t, nil, "jobs", "pause", "real", "--store", url); code != exitOK {
		t.Fatalf("jobs pause real = %d, %s", code, errOut)
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "real", "--store", url); code != 1 || !strings.Contains(errOut, `job "real" is paused`) {
		t.Fatalf("jobs forget real, paused = %d, %s; want 1, is paused", code, errOut)
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "real", "--force", "--store", url); code != exitOK {
		t.Fatalf("jobs forget real --force = %d, %s", code, errOut)
	}
	// Its history stays (until pruned), and lists it; its state is gone.
	if j, ok := listJobs(t, url)["real"]; ok && (j.Spec != "" || len(j.Triggers) != 0) {
		t.Fatalf("forgotten real still has its state: %+v", j)
	}
}

// jobs trigger refuses a job that no node of serve seems to have any more
// (its next tick after its latest record more than a minute past, nothing
// recorded since), unless --force: its request used to be accepted, exit
// 0, and then wait in the job's pending triggers, never run (a job taken
// out of every node's file keeps its state until jobs forget). A paused
// job, which records no ticks, and one whose latest run is in progress are
// still triggered.
func TestJobsTriggerRemovedJob(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	l := sqliteLedger(t, url)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	for _, job := range []string{"gone", "paused", "live", "long"} {
		if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: "@every 1s", Since: now.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		last := now.Add(-5 * time.Minute)
		status := ledger.RunOK
		switch job {
		case "live":
			last = now
		case "long": // its run still in progress
			status = ledger.RunRunning
		}
		if err := l.RecordRuns(ctx, []ledger.RunRecord{{Job: job, Tick: last, Attempt: 1, Node: "n1", Start: last, End: last, Status: status}}); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "pause", "paused", "--store", url); code != exitOK {
		t.Fatalf("jobs pause paused = %d, %s", code, errOut)
	}
	code, out, errOut := tl.Run(t, nil, "jobs", "trigger", "gone", "--store", url)
	if code != 1 || out != "" || !strings.Contains(errOut, `job "gone" looks removed from the configuration of every node`) ||
		!strings.Contains(errOut, "more than 1m0s past") || !strings.Contains(errOut, "--force") {
		t.Errorf("jobs trigger gone = %d, stdout %q, stderr %q; want 1, looks removed", code, out, errOut)
	}
	for _, args := range [][]string{{"gone", "--force"}, {"paused"}, {"live"}, {"long"}} {
		if code, out, errOut := tl.Run(t, nil, append([]string{"jobs", "trigger"}, append(args, "--store", url)...)...); code != exitOK {
			t.Errorf("jobs trigger %s = %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	jobs := listJobs(t, url)
	for job, want := range map[string]int{"gone": 1, "paused": 1, "live": 1, "long": 1} {
		if n := len(jobs[job].Triggers); n != want {
			t.Errorf("%s: %d pending triggers, want %d", job, n, want)
		}
	}
}

// jobs list shows a job whose registered schedule gives no next tick as
// broken, in text and JSON.
func TestBrokenJobsList(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	l := sqliteLedger(t, url)
	for job, spec := range map[string]string{"bad": "CRON_TZ=No/Such_Zone * * * * *", "good": "@hourly"} {
		if _, err := l.SetJobState(context.Background(), ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: spec, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	jobs := listJobs(t, url)
	if j := jobs["bad"]; j.State != "broken" || !strings.Contains(j.Broken, "No/Such_Zone") {
		t.Errorf("bad: %+v, want broken", j)
	}
	if j := jobs["good"]; j.State != "ok" || j.Broken != "" {
		t.Errorf("good: %+v, want ok", j)
	}
	code, out, _ := tl.Run(t, nil, "jobs", "list", "--store", url)
	if code != exitOK || !regexp.MustCompile(`(?m)^bad +broken `).MatchString(out) || !regexp.MustCompile(`(?m)^good +ok `).MatchString(out) {
		t.Errorf("jobs list = %d\n%s", code, out)
	}
}

// historyJSON runs jobs history --json for job.
func historyJSON(t *testing.T, url, job string) []runRecordJSON {
	t.Helper()
	code, out, errOut := tl.Run(t, nil, "jobs", "history", "--job", job, "--limit", "1000", "--json", "--store", url)
	var hist struct {
		Runs []runRecordJSON `json:"runs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &hist) != nil {
		t.Fatalf("jobs history --json = %d\n%s%s", code, out, errOut)
	}
	return hist.Runs
}

// dashboardURL waits for serve's dashboard line and returns its URL.
func dashboardURL(t *testing.T, p *proc) string {
	t.Helper()
	p.WaitStderr(`"msg":"dashboard"`, 20*time.Second)
	for _, rec := range jsonLines(t, p.Stderr()) {
		if rec["msg"] == "dashboard" {
			return rec["url"].(string)
		}
	}
	t.Fatal("no dashboard URL")
	return ""
}

type apiNode struct {
	Node       string     `json:"node"`
	Alive      bool       `json:"alive"`
	LastSeen   *time.Time `json:"last_seen"`
	Leader     bool       `json:"leader"`
	LeaderTerm uint64     `json:"leader_term"`
}

// apiLeader is the leader of /api/nodes.
type apiLeader struct {
	Node string `json:"node"`
	Term uint64 `json:"term"`
}

// getAPINodes reads a dashboard's /api/nodes: the nodes by name, and the
// leader (nil: none).
func getAPINodes(t *testing.T, base string) (map[string]apiNode, *apiLeader) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get(base + "api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Nodes  []apiNode  `json:"nodes"`
		Leader *apiLeader `json:"leader"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	m := map[string]apiNode{}
	for _, n := range out.Nodes {
		m[n.Node] = n
	}
	return m, out.Leader
}

func apiNodes(t *testing.T, base string) map[string]apiNode {
	t.Helper()
	m, _ := getAPINodes(t, base)
	return m
}

// A serve node SIGKILLed during a run: the run shows as running, then —
// once the node's lease ends — as interrupted, exactly once, written by the
// other node; /api/nodes shows the killed node gone, last seen before the
// kill. Before: the run never appeared in the history.
func TestServeKilledNodeRunIsInterrupted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "fleet.db")
	jobs := `jobs:
  - name: sleeper
    schedule: "@every 1s"
    command: ["sleep", "60"]
`
	procs := map[string]*proc{}
	urls := map[string]string{}
	for _, node := range []string{"n1", "n2"} {
		cfg := filepath.Join(dir, node+".yaml")
		if err := os.WriteFile(cfg, []byte("store: "+url+"\nnode: "+node+"\n"+jobs), 0o644); err != nil {
			t.Fatal(err)
		}
		procs[node] = tl.Start(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "127.0.0.1:0", "--grace", "1s")
	}
	for node, p := range procs {
		urls[node] = dashboardURL(t, p)
	}
	// Wait for the run in progress, and see both nodes alive.
	var running runRecordJSON
	clitest.WaitFor(t, 30*time.Second, func() bool {
		for _, r := range historyJSON(t, url, "sleeper") {
			if r.Status == "running" {
				running = r
				return true
			}
		}
		return false
	}, "a running record")
	t.Logf("%v: %s runs tick %v", time.Now().Format(time.StampMilli), running.Node, running.Tick)
	victim, survivor := running.Node, "n1"
	if victim == "n1" {
		survivor = "n2"
	}
	if n := apiNodes(t, urls[survivor])[victim]; !n.Alive {
		t.Fatalf("before the kill: %+v, want alive", n)
	}
	if err := procs[victim].Process().Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	procs[victim].Wait(10 * time.Second)

	sameRun := func(r runRecordJSON) bool {
		return r.Tick.Equal(running.Tick) && r.Attempt == running.Attempt && r.Trigger == running.Trigger
	}
	var rows []runRecordJSON
	clitest.WaitFor(t, 40*time.Second, func() bool {
		rows = rows[:0]
		for _, r := range historyJSON(t, url, "sleeper") {
			if sameRun(r) {
				rows = append(rows, r)
			}
		}
		return len(rows) == 1 && rows[0].Status == "interrupted"
	}, "the killed node's run to be recorded as interrupted")
	t.Logf("%v: recorded as interrupted, %v after the kill", time.Now().Format(time.StampMilli), time.Since(killedAt).Round(time.Millisecond))
	r := rows[0]
	if r.Node != victim || !strings.Contains(r.Error, victim) || !strings.Contains(r.Error, survivor) || r.End == nil || r.End.Before(killedAt) {
		t.Errorf("interrupted record %+v", r)
	}
	// Its end is when the survivor noticed, not when the command stopped:
	// the table gives the duration as a bound.
	if code, out, errOut := tl.Run(t, nil, "jobs", "history", "--job", "sleeper", "--status", "interrupted", "--store", url); code != 0 ||
		!regexp.MustCompile(`interrupted +interrupted +≤\d`).MatchString(out) {
		t.Errorf("jobs history: exit %d\n%s%s\nwant the interrupted run's duration as ≤ its end − start", code, out, errOut)
	}
	procs[survivor].WaitStderr(`"msg":"run interrupted`, 10*time.Second)
	interrupted := 0 // serve logs each run's end once: the Scheduler's own line would repeat it
	for _, rec := range jsonLines(t, procs[survivor].Stderr()) {
		m, _ := rec["msg"].(string)
		if strings.HasPrefix(m, "run interrupted") && rec["level"] != "WARN" {
			t.Errorf("run interrupted logged at %v", rec["level"])
		}
		if strings.Contains(m, "run interrupted") && rec["job"] == "sleeper" {
			interrupted++
		}
	}
	if interrupted != 1 {
		t.Errorf("%d lines say the run was interrupted, want 1\n%s", interrupted, procs[survivor].Stderr())
	}

	clitest.WaitFor(t, 20*time.Second, func() bool { return !apiNodes(t, urls[survivor])[victim].Alive }, "the killed node to show as gone")
	if n := apiNodes(t, urls[survivor])[victim]; n.LastSeen == nil || !n.LastSeen.Before(killedAt) {
		t.Errorf("killed node %+v, want last_seen before the kill at %v", n, killedAt)
	}
	if n := apiNodes(t, urls[survivor])[survivor]; !n.Alive || n.LastSeen == nil || n.LastSeen.After(time.Now()) {
		t.Errorf("surviving node %+v", n)
	}
	procs[survivor].Signal(syscall.SIGTERM)
	if code := procs[survivor].Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, procs[survivor].Stderr())
	}
}

// jobs forget of a job a node registered but that has not run yet (an
// hourly job just added to serve's file) went ahead: the job vanished from
// jobs list, and jobs trigger said no node had it, while serve still ran
// it. Its first tick after the registration stands in for the next tick
// after a record: not a minute past, forget is refused; long past, the
// job was removed without ever running, and forget goes ahead.
func TestJobsForgetNotRunYet(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	l := sqliteLedger(t, url)
	for job, since := range map[string]time.Time{"new": time.Now(), "old": time.Now().Add(-3 * time.Hour)} {
		if _, err := l.SetJobState(context.Background(), ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: "@hourly", Since: since}); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "new", "--store", url); code != 1 || !strings.Contains(errOut, `job "new" still looks configured`) || !strings.Contains(errOut, "has not run yet") {
		t.Errorf("jobs forget new, registered now, never run = %d, %s; want 1, still looks configured", code, errOut)
	}
	if _, ok := listJobs(t, url)["new"]; !ok {
		t.Error("new is no longer listed")
	}
	if code, out, errOut := tl.Run(t, nil, "jobs", "forget", "old", "--store", url); code != exitOK || !strings.Contains(out, `forgot "old"`) {
		t.Errorf("jobs forget old, registered 3h ago, never run = %d\n%s%s; want 0", code, out, errOut)
	}
	if code, _, errOut := tl.Run(t, nil, "jobs", "forget", "new", "--force", "--store", url); code != exitOK {
		t.Errorf("jobs forget new --force = %d, %s", code, errOut)
	}
}
