//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
)

// shardLine is one line of the sharded job's oracle file: "start" or
// "end", the tick, the shard, the shard count and the node.
type shardLine struct {
	what, tick, node string
	shard, shards    int
}

func readShardLines(t *testing.T, path string) []shardLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []shardLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var s shardLine
		if _, err := fmt.Sscanf(l, "%s %s %d %d %s", &s.what, &s.tick, &s.shard, &s.shards, &s.node); err != nil {
			t.Fatalf("oracle line %q: %v", l, err)
		}
		out = append(out, s)
	}
	return out
}

// TestServeShardsNodeKilled: three serve nodes run a job with shards: 8;
// one is SIGKILLed while its shards of a tick run. Every shard-run of the
// tick completes, none twice: the other nodes take the killed node's
// shards over once its lease and shard locks expire.
func TestServeShardsNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three serve processes for about 30s per store")
	}
	stores := map[string]func(t *testing.T) string{
		"redis":  func(t *testing.T) string { return "redis://" + testserver.StartRedis(t).Addr() },
		"sqlite": func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "shards.db") },
	}
	for _, name := range []string{"sqlite", "redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := stores[name](t)
			dir := t.TempDir()
			out := filepath.Join(dir, "runs")
			// One tick, a little after the nodes are up: a cron spec
			// with seconds for that instant (UTC).
			tick := time.Now().UTC().Truncate(time.Second).Add(15 * time.Second)
			spec := fmt.Sprintf("%d %d %d %d %d *", tick.Second(), tick.Minute(), tick.Hour(), tick.Day(), int(tick.Month()))
			script := `echo start $TASKLOCK_TICK $TASKLOCK_SHARD $TASKLOCK_SHARDS $TASKLOCK_NODE >> "$0"; sleep 4; ` +
				`echo end $TASKLOCK_TICK $TASKLOCK_SHARD $TASKLOCK_SHARDS $TASKLOCK_NODE >> "$0"`
			jobs := fmt.Sprintf(`jobs:
  - name: sharded
    schedule: "%s"
    shards: 8
    lock_ttl: 8s
    kill_grace: 500ms
    command: ["sh", "-c", %q, %q]
`, spec, script, out)
			procs := map[string]*proc{}
			for _, node := range []string{"n1", "n2", "n3"} {
				cfg := filepath.Join(dir, node+".yaml")
				if err := os.WriteFile(cfg, []byte("store: "+url+"\nnode: "+node+"\n"+jobs), 0o644); err != nil {
					t.Fatal(err)
				}
				procs[node] = tl.Start(t, nil, "serve", "--config", cfg, "--log-format", "json", "--verbose", "--http", "", "--grace", "1s")
			}
			for _, p := range procs {
				p.WaitStderr(`"msg":"serving"`, 20*time.Second)
			}
			t.Cleanup(func() {
				if t.Failed() {
					for node, p := range procs {
						t.Logf("%s stderr:\n%s", node, p.Stderr())
					}
				}
			})
			if time.Now().After(tick.Add(-time.Second)) {
				t.Fatalf("the nodes took until %v to start, past the job's tick %v", time.Now().UTC(), tick)
			}
			tickText := tick.Format(time.RFC3339)
			lines := func(what string) []shardLine {
				var ls []shardLine
				for _, l := range readShardLines(t, out) {
					if l.what == what && l.tick == tickText {
						ls = append(ls, l)
					}
				}
				return ls
			}
			clitest.WaitFor(t, 40*time.Second, func() bool { return len(lines("start")) == 8 }, "8 shard-runs of the tick to start")
			perNode := map[string][]int{}
			for _, l := range lines("start") {
				perNode[l.node] = append(perNode[l.node], l.shard)
				if l.shards != 8 {
					t.Errorf("TASKLOCK_SHARDS=%d, want 8", l.shards)
				}
			}
			for node, ks := range perNode {
				if len(ks) > 3 {
					t.Errorf("node %s started shards %v, want at most 3", node, ks)
				}
			}
			victim := lines("start")[0].node
			if err := procs[victim].Process().Kill(); err != nil {
				t.Fatal(err)
			}
			killedAt := time.Now()
			procs[victim].Wait(10 * time.Second)
			t.Logf("killed %s (shards %v) at %v", victim, perNode[victim], killedAt.Format(time.StampMilli))

			clitest.WaitFor(t, 90*time.Second, func() bool {
				done := map[int]bool{}
				for _, l := range lines("end") {
					done[l.shard] = true
				}
				return len(done) == 8
			}, "every shard-run of the tick to complete")
			t.Logf("all 8 shards completed %v after the kill", time.Since(killedAt).Round(time.Millisecond))
			// History settles: each shard's latest attempt ok, and the
			// killed node's attempts interrupted.
			var latest map[int]runRecordJSON
			var rows []runRecordJSON
			t.Cleanup(func() {
				if t.Failed() {
					for _, r := range rows {
						t.Logf("record: shard %d attempt %d node %s status %s tick status %s error %s", r.Shard, r.Attempt, r.Node, r.Status, r.TickStatus, r.Error)
					}
				}
			})
			clitest.WaitFor(t, 30*time.Second, func() bool {
				latest = map[int]runRecordJSON{}
				interrupted := 0
				rows = rows[:0]
				for _, r := range historyJSON(t, url, "sharded") {
					if !r.Tick.Equal(tick) {
						continue
					}
					rows = append(rows, r)
					if l, ok := latest[r.Shard]; !ok || r.Attempt > l.Attempt {
						latest[r.Shard] = r
					}
					if r.Node == victim && r.Status == "interrupted" {
						interrupted++
					}
				}
				for k := range 8 {
					if latest[k].Status != "ok" {
						return false
					}
				}
				return interrupted == len(perNode[victim])
			}, "the tick's history: 8 shards ok, the killed node's attempts interrupted")
			for _, k := range perNode[victim] {
				if r := latest[k]; r.Attempt != 2 || r.Node == victim || r.TickStatus != "ok" {
					t.Errorf("shard %d: latest %+v, want attempt 2 on another node, tick status ok", k, r)
				}
			}
			code, text, errText := tl.Run(t, nil, "jobs", "history", "--job", "sharded", "--store", url)
			if code != exitOK || !strings.Contains(text, "SHARD") || !strings.Contains(text, "TICK STATUS") || !strings.Contains(text, "7/8") {
				t.Errorf("jobs history = %d\n%s%s", code, text, errText)
			}
			ends := map[int][]string{}
			for _, l := range lines("end") {
				ends[l.shard] = append(ends[l.shard], l.node)
			}
			for k := range 8 {
				if len(ends[k]) != 1 {
					t.Errorf("shard %d completed %d times (%v), want once", k, len(ends[k]), ends[k])
				}
				for _, n := range ends[k] {
					if n == victim {
						t.Errorf("shard %d completed on the killed node", k)
					}
				}
			}
			for node, p := range procs {
				if node == victim {
					continue
				}
				p.Signal(syscall.SIGTERM)
				if code := p.Wait(30 * time.Second); code != 0 {
					t.Errorf("%s exit %d\n%s", node, code, p.Stderr())
				}
			}
		})
	}
}
