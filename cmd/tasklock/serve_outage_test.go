package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// TestServeOutcomeWrittenAfterStoreOutage: a run that ends while the store
// is down (Redis killed, restarted with its data a few seconds later) gets
// its outcome into history once the store is back. The write of the
// outcome used to be tried twice and dropped, so the run stayed "running"
// in jobs history and the dashboard for as long as its node lived: no
// node settles a live node's running records.
func TestServeOutcomeWrittenAfterStoreOutage(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	url := "redis://" + srv.Addr()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	// The first run records its tick and waits for $OUT.stop; the later
	// ones end at once.
	script := `[ -e "$OUT.ran" ] && exit 0; echo "$TASKLOCK_TICK" > "$OUT.tick"; touch "$OUT.ran"; while [ ! -e "$OUT.stop" ]; do sleep 0.02; done; touch "$OUT.ended"`
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+
		indent(fmt.Sprintf("name: outage\nschedule: \"@every 1s\"\nlock_ttl: 30s\ncommand: [sh, -c, %q]\n", script)))
	nodes := startNodes(t, 1, cfg, out)
	node := nodes[0]
	node.WaitUntil(30*time.Second, func() bool { return fileExists(out + ".ran") }, "the first run to start")
	b, err := os.ReadFile(out + ".tick")
	if err != nil {
		t.Fatal(err)
	}
	tick, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Let the running record reach the store (appendfsync always), then
	// take the store down and end the run meanwhile.
	status := func() ledger.RunStatus {
		store, closeStore, err := storeurl.Open(context.Background(), url)
		if err != nil {
			return ""
		}
		defer closeStore()
		rs, err := store.(ledger.Ledger).Runs(context.Background(), ledger.RunQuery{Job: "outage", From: tick, To: tick.Add(time.Second)})
		if err != nil || len(rs) == 0 {
			return ""
		}
		return rs[0].Status
	}
	clitest.WaitFor(t, 30*time.Second, func() bool { return status() == ledger.RunRunning }, "the running record")
	srv.Kill(t)
	if err := os.WriteFile(out+".stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	node.WaitStderr(`"msg":"schedule: recording history","node":"node-0","job":"outage"`, 30*time.Second)
	srv.Restart(t)
	var got ledger.RunStatus
	clitest.WaitFor(t, 30*time.Second, func() bool {
		got = status()
		return got == ledger.RunOK
	}, "the run's outcome in history")
	stopNodes(t, nodes)
	if !strings.Contains(node.Stderr(), "wrote the history records a store error had held back") {
		t.Errorf("serve did not log that it wrote the held back records:\n%s", node.Stderr())
	}
}
