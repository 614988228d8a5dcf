//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/ledger"
)

// TestActCancelRetrySQLite and TestActCancelRetryRedis: on two serve
// nodes, a long command runs on one; a cancel asked through the other
// node's API reaches it within the deadline, the run ends cancelled, the
// command and its child (which ignore SIGTERM) are gone, and the audit
// says who; a retry makes attempt 2 of the tick; a trigger with a note
// from the CLI is audited with it.
func TestActCancelRetrySQLite(t *testing.T) {
	t.Parallel()
	actScenario(t, "sqlite://"+filepath.Join(t.TempDir(), "ledger.db"))
}

func TestActCancelRetryRedis(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	actScenario(t, url)
}

func actScenario(t *testing.T, store string) {
	dir := t.TempDir()
	// The first run leaves a pid file and waits for ever, ignoring
	// SIGTERM with its child; the runs after it exit at once.
	cfg := writeConfig(t, dir, "store: "+store+`
jobs:
  - name: long
    schedule: "@every 1s"
    kill_grace: 300ms
    command: ["sh", "-c", "[ -e \"$DIR/pid\" ] && exit 0; trap '' TERM; sleep 1000 & echo $! > \"$DIR/child\"; echo $$ > \"$DIR/pid\"; wait"]
`)
	var nodes []*clitest.Proc
	apis := map[string]*apiClient{}
	for i := range 2 {
		name := fmt.Sprintf("node-%d", i)
		p := tl.Start(t, []string{"TASKLOCK_TOKEN=s3cret", "DIR=" + dir}, "serve", "--config", cfg, "--http", "127.0.0.1:0",
			"--log-format", "json", "--node", name)
		nodes = append(nodes, p)
		p.WaitStderr(`"msg":"dashboard"`, 20*time.Second)
		base := strings.TrimSuffix(regexp.MustCompile(`"msg":"dashboard"[^\n]*"url":"([^"]+)"`).FindStringSubmatch(p.Stderr())[1], "/")
		apis[name] = &apiClient{base: base, token: "s3cret", client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	}
	defer stopNodes(t, nodes)
	pid := clitest.ReadPid(t, filepath.Join(dir, "pid"))
	child := clitest.ReadPid(t, filepath.Join(dir, "child"))

	// The running run, and the other node's API.
	var run apijson.Run
	clitest.WaitFor(t, 60*time.Second, func() bool {
		for _, r := range apis["node-0"].runs(t, "long") {
			if r.Status == string(ledger.RunRunning) {
				run = r
				return true
			}
		}
		return false
	}, "the long run's running record")
	other := apis["node-0"]
	if run.Node == "node-0" {
		other = apis["node-1"]
	}
	key := fmt.Sprintf(`{"job":"long","tick":%q,"trigger":%q,"shard":%d}`, run.Tick.Format(time.RFC3339Nano), run.Trigger, run.Shard)
	asked := time.Now()
	if code, body := other.do(t, "POST", "/api/runs/cancel", key); code != http.StatusAccepted {
		t.Fatalf("cancel through the other node: %d %s", code, body)
	}
	find := func(attempt int) (apijson.Run, bool) {
		for _, r := range other.runs(t, "long") {
			if r.Tick.Equal(run.Tick) && r.Trigger == run.Trigger && r.Attempt == attempt {
				return r, true
			}
		}
		return apijson.Run{}, false
	}
	var ended apijson.Run
	// The record is written after the run ends, batched with others: on a
	// busy machine, seconds after.
	clitest.WaitFor(t, 30*time.Second, func() bool {
		r, ok := find(1)
		ended = r
		return ok && r.Status != string(ledger.RunRunning)
	}, "the cancelled run's record")
	t.Logf("cancel asked on the other node; the run on %s recorded %s %v later", run.Node, ended.Status, time.Since(asked))
	if ended.Status != string(ledger.RunCancelled) || !strings.Contains(ended.Error, "cancelled") || ended.End == nil {
		t.Fatalf("the run's record %+v, want cancelled", ended)
	}
	// How long the cancel took to end the run: from the request to the
	// run's end on the running node's clock (this machine's), not to when
	// this test saw the record.
	took := ended.End.Sub(asked)
	t.Logf("the run ended %v after the cancel was asked (recorded %v after its end)", took, ended.Recorded.Sub(*ended.End))
	// A poll (half a second) and the kill grace (300ms), with room for a
	// busy machine.
	if took > 5*time.Second {
		t.Errorf("the cancel took %v, want about a second", took)
	}
	clitest.WaitFor(t, 10*time.Second, func() bool { return !clitest.Alive(pid) && !clitest.Alive(child) }, "the command and its child to be killed")
	if code, body := other.do(t, "POST", "/api/runs/cancel", key); code != http.StatusConflict {
		t.Errorf("cancel of the ended run: %d %s, want 409", code, body)
	}

	// Retry: attempt 2 of the same tick, which exits at once.
	if code, body := apis[run.Node].do(t, "POST", "/api/runs/retry", key); code != http.StatusAccepted {
		t.Fatalf("retry: %d %s", code, body)
	}
	// Records lag the runs by seconds on a busy machine (see above).
	clitest.WaitFor(t, 60*time.Second, func() bool {
		r, ok := find(2)
		return ok && r.Status == string(ledger.RunOK)
	}, "attempt 2 of the cancelled tick, ok")

	// Trigger with a note, from the CLI.
	cli := &cliClient{store: store, dir: dir}
	cli.run(t, "trigger", "long", "--note", "after the deploy")
	code, _, errOut := tl.Run(t, nil, "jobs", "cancel", "long", run.Tick.Format(time.RFC3339), "--store", store)
	if code != 1 || !strings.Contains(errOut, "has ended") {
		t.Errorf("jobs cancel of the ended run = %d %s, want 1 and why", code, errOut)
	}

	es := other.audit(t, "long")
	var got []string
	for _, e := range es {
		got = append(got, e.Action)
	}
	if want := "trigger,retry,cancel"; strings.Join(got, ",") != want {
		t.Fatalf("audit actions %v, want %s", got, want)
	}
	if es[2].Who != "api:token" || !strings.Contains(es[2].Detail, "on node "+run.Node) || es[1].Who != "api:token" {
		t.Errorf("the cancel's and retry's audit entries: %+v", es[1:])
	}
	if !cli.who().MatchString(es[0].Who) || !strings.HasSuffix(es[0].Detail, ", note: after the deploy") {
		t.Errorf("the trigger's audit entry %+v, want the CLI user and the note", es[0])
	}
	b, _ := json.Marshal(es)
	if strings.Contains(string(b), "s3cret") {
		t.Errorf("the audit shows the token: %s", b)
	}
}
