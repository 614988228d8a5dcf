//go:build unix

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/storeurl"
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
	p := startTL(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "")
	want := map[string]string{"ok": "INFO", "failed": "WARN", "timeout": "WARN"}
	levels := map[string]map[string]bool{}
	waitFor(t, 20*time.Second, func() bool {
		clear(levels)
		for _, rec := range jsonLines(t, p.stderr()) {
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
	for _, rec := range jsonLines(t, p.stderr()) {
		if rec["msg"] == "run started" && rec["level"] != "INFO" {
			t.Errorf("run started at %v", rec["level"])
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.stderr())
	}
}

// sqliteLedger opens a SQLite file store's ledger, as a serve node would.
func sqliteLedger(t *testing.T, url string) driver.Ledger {
	t.Helper()
	store, closeStore, err := storeurl.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeStore() })
	return store.(driver.Ledger)
}

// listJobs runs jobs list --json.
func listJobs(t *testing.T, url string) map[string]jobJSON {
	t.Helper()
	code, out, errOut := runTL(t, nil, "jobs", "list", "--json", "--store", url)
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
	if _, err := l.SetJobState(context.Background(), driver.JobStateParams{Job: "real", Op: driver.JobRegister, Spec: "@hourly", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"trigger", "pause", "resume"} {
		code, out, errOut := runTL(t, nil, "jobs", sub, "ghost", "--store", url)
		if code != 1 || out != "" || !strings.Contains(errOut, `no job named "ghost"`) {
			t.Errorf("jobs %s ghost = %d, stdout %q, stderr %q; want 1 and no job named \"ghost\"", sub, code, out, errOut)
		}
		if code, out, errOut := runTL(t, nil, "jobs", sub, "real", "--store", url); code != exitOK {
			t.Errorf("jobs %s real = %d\n%s%s", sub, code, out, errOut)
		}
	}
	if _, ok := listJobs(t, url)["ghost"]; ok {
		t.Fatal("a refused command left a ghost job listed")
	}
	if code, out, errOut := runTL(t, nil, "jobs", "pause", "ghost", "--force", "--store", url); code != exitOK || !strings.Contains(out, `paused "ghost"`) {
		t.Fatalf("jobs pause ghost --force = %d\n%s%s", code, out, errOut)
	}
	if j, ok := listJobs(t, url)["ghost"]; !ok || j.State != "paused" {
		t.Fatalf("after --force: ghost is %+v (listed %v), want paused", j, ok)
	}
	// forget removes it; forgetting it again is refused, unless --force.
	if code, out, errOut := runTL(t, nil, "jobs", "forget", "ghost", "--store", url); code != exitOK || !strings.Contains(out, `forgot "ghost"`) {
		t.Fatalf("jobs forget ghost = %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runTL(t, nil, "jobs", "forget", "ghost", "--store", url); code != 1 || !strings.Contains(errOut, `no job named "ghost"`) {
		t.Errorf("jobs forget ghost again = %d, %s", code, errOut)
	}
	if code, _, errOut := runTL(t, nil, "jobs", "forget", "ghost", "--force", "--store", url); code != exitOK {
		t.Errorf("jobs forget ghost --force = %d, %s", code, errOut)
	}
	jobs := listJobs(t, url)
	if _, ok := jobs["ghost"]; ok {
		t.Fatal("forgotten ghost still listed")
	}
	if j := jobs["real"]; j.State != "ok" || j.Spec != "@hourly" || j.Since == nil || len(j.Triggers) != 1 {
		t.Errorf("real: %+v, want ok, registered, one pending trigger", j)
	}
	if code, _, errOut := runTL(t, nil, "jobs", "forget", "real", "--store", url); code != exitOK {
		t.Fatalf("jobs forget real = %d, %s", code, errOut)
	}
	if _, ok := listJobs(t, url)["real"]; ok {
		t.Fatal("forgotten real still listed")
	}
}

// jobs list shows a job whose registered schedule gives no next tick as
// broken, in text and JSON.
func TestBrokenJobsList(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	l := sqliteLedger(t, url)
	for job, spec := range map[string]string{"bad": "CRON_TZ=No/Such_Zone * * * * *", "good": "@hourly"} {
		if _, err := l.SetJobState(context.Background(), driver.JobStateParams{Job: job, Op: driver.JobRegister, Spec: spec, Since: time.Now()}); err != nil {
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
	code, out, _ := runTL(t, nil, "jobs", "list", "--store", url)
	if code != exitOK || !regexp.MustCompile(`(?m)^bad +broken `).MatchString(out) || !regexp.MustCompile(`(?m)^good +ok `).MatchString(out) {
		t.Errorf("jobs list = %d\n%s", code, out)
	}
}
