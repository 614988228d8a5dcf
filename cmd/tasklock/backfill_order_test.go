//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// TestJobsBackfillRunsInTickOrder: a serve node on a SQLite file starts the
// ticks of a backfill oldest first. The backfill writes its requests one at
// a time, paced, so the node takes them over several polls; before, each
// poll's requests waited for the job's lock beside the earlier polls' ones,
// and the ticks ran in a scrambled order.
func TestJobsBackfillRunsInTickOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "order.db")
	logFile := filepath.Join(dir, "runs.log")
	cfg := writeConfig(t, dir, "store: "+url+"\nnode: order-node\njobs:\n"+`  - name: bf
    schedule: "@every 1s"
    command: ["sh", "-c", "echo \"$TASKLOCK_TICK\" >> \"$RUNS\""]
`)
	p := tl.Start(t, []string{"RUNS=" + logFile}, "serve", "--config", cfg, "--http", "")
	clitest.WaitFor(t, 30*time.Second, func() bool { return fileExists(logFile) }, "the job's first run")
	// 60 ticks from before the node registered the job: none ran.
	const n = 60
	now := time.Now().UTC().Truncate(time.Second)
	from, to := now.Add(-time.Hour), now.Add(-time.Hour+(n-1)*time.Second)
	asked := time.Now()
	code, out, errOut := tl.Run(t, nil, "jobs", "backfill", "--store", url, "bf", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--timeout", "60s")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("requested %d ticks", n)) {
		t.Fatalf("jobs backfill = %d\n%s%s", code, out, errOut)
	}
	t.Logf("backfill took %v", time.Since(asked))
	// The backfilled ticks in the order they ran: RFC 3339 in UTC sorts
	// as time does.
	var ran []string
	clitest.WaitFor(t, 60*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		ran = ran[:0]
		for _, tick := range strings.Fields(string(b)) {
			if tick >= from.Format(time.RFC3339) && tick <= to.Format(time.RFC3339) {
				ran = append(ran, tick)
			}
		}
		return len(ran) >= n
	}, "the backfilled ticks to run")
	t.Logf("runs took %v", time.Since(asked))
	p.Signal(os.Interrupt)
	if code := p.Wait(30 * time.Second); code != exitOK {
		t.Fatalf("serve exit %d\n%s", code, p.Stderr())
	}
	if !slices.IsSorted(ran) || len(slices.Compact(slices.Clone(ran))) != len(ran) {
		late := 0
		for i := 1; i < len(ran); i++ {
			if ran[i] < ran[i-1] {
				late++
			}
		}
		t.Fatalf("the backfilled ticks ran in this order, %d of them after a later tick, want tick order, each once:\n%s", late, fmt.Sprint(ran))
	}
}
