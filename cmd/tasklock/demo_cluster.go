//go:build unix

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/ledger"
)

// Cluster demo settings.
const (
	clusterWork      = 200 * time.Millisecond  // how long each run's command works
	clusterLockTTL   = 2 * time.Second         // the jobs' lock_ttl
	clusterGrace     = 3 * time.Second         // serve --grace when the demo ends
	clusterSettle    = 1500 * time.Millisecond // how long a tick's line waits for late news
	clusterRestartIn = time.Second             // from the kill to the restart
	clusterReadyIn   = 30 * time.Second        // how long the nodes may take to start
	clusterPoll      = 25 * time.Millisecond   // how often the file of runs is read
	clusterLedgerGap = 250 * time.Millisecond  // how often the ledger is read
	clusterCell      = 19                      // width of a job's column
	clusterWithin    = 2 * time.Second         // how long the dependent job's tick waits for its parent
	clusterShards    = 3                       // the sharded job's shards
	// clusterRetakeIn is how long after the kill the demo waits, past its
	// end, for the killed node's unfinished shard-runs to be retaken: its
	// node lease (tasklock.DefaultTTL, renewed every third of it) ends, then
	// its shard lock (lock_ttl) has long expired, and a free node retakes
	// the shard at its next poll.
	clusterRetakeIn = tasklock.DefaultTTL + clusterLockTTL + 2*time.Second
	// clusterLeftoverIn is how long the demo waits, past its end, for a
	// shard-run of the last ticks that no node claimed at the tick (its
	// node was not yet in the others' list of live nodes: the restarted
	// one) to be claimed by a free node, a poll interval after the tick.
	clusterLeftoverIn = 2 * time.Second
)

// demoShardedJob names the cluster demo's sharded job, run beside the
// --jobs jobs with shards: clusterShards.
const demoShardedJob = "sharded"

// demoNode is one serve process of the cluster demo.
type demoNode struct {
	name    string
	log     string // its stdout and stderr
	ch      *child
	killed  bool // by the demo, with SIGKILL
	stopped bool // sent SIGTERM at the end
	ready   bool // has logged that it serves
	exited  bool // seen gone (ch.done closed)
}

// tickKey names one tick of one job, or one shard-run of a tick of the
// sharded job (shard is 0 for the others).
type tickKey struct {
	job   string
	tick  int64 // Unix seconds
	shard int
}

// demoExec is one line of the file of runs: a command that ran.
type demoExec struct {
	node  string
	fence uint64
	pid   int
}

// clusterDemo is one run of the cluster demo.
type clusterDemo struct {
	out      io.Writer
	o        clusterOptions
	exe      string
	dir      string
	runsPath string
	storeURL string
	jobs     []string
	ledger   ledger.Ledger
	sigs     chan os.Signal

	start  time.Time // of the demo
	t0, t1 int64     // the first and the last tick counted, Unix seconds
	next   int64     // the next tick to print a line for

	nodes   []*demoNode
	execs   map[tickKey][]demoExec
	recs    map[tickKey]ledger.RunRecord // the latest attempt of each tick
	okOn    map[tickKey]map[string]bool  // the nodes that recorded a run of the tick ok
	begun   map[tickKey]string           // the node of the tick's lowest attempt recorded running or interrupted
	runsOff int64
	partial []byte

	killAt      time.Time // when the kill is armed
	victim      *demoNode
	killedAt    time.Time
	restarted   *demoNode
	failed      []string // what went wrong with the demo itself
	interrupted bool
	waiting     bool // past the end, for a retake (pendingRetake)
	lastLedger  time.Time
}

// runClusterDemo is the demo command without --lock.
func runClusterDemo(o clusterOptions, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "tasklock demo: cannot find this program to start the nodes: %v\n", err)
		return exitUnavailable
	}
	dir, err := os.MkdirTemp("", "tasklock-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "tasklock demo: %v\n", err)
		return exitUnavailable
	}
	if o.keep {
		// The nodes' configurations name the program their jobs run; a
		// copy in the kept directory outlives this one (which "go run"
		// deletes on exit), so the kept configurations start nodes again.
		if exe, err = copyProgram(exe, filepath.Join(dir, "tasklock")); err != nil {
			fmt.Fprintf(stderr, "tasklock demo: --keep: %v\n", err)
			_ = os.RemoveAll(dir)
			return exitUnavailable
		}
	}
	d := &clusterDemo{
		out: stdout, o: o, exe: exe, dir: dir, sigs: sigs,
		runsPath: filepath.Join(dir, "runs.log"),
		storeURL: "sqlite://" + (&url.URL{Path: filepath.Join(dir, "demo.db")}).EscapedPath(),
		jobs:     append(demoJobNames[:o.jobs:o.jobs], demoShardedJob),
		execs:    map[tickKey][]demoExec{},
		recs:     map[tickKey]ledger.RunRecord{},
		okOn:     map[tickKey]map[string]bool{},
		begun:    map[tickKey]string{},
	}
	code := d.run(stderr)
	if o.keep {
		fmt.Fprintf(stdout, "\nkept %s: demo.db (the store), runs.log (what ran), node-*.yaml and node-*.log, and tasklock (the program they name)\n", dir)
	} else if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(stderr, "tasklock demo: removing %s: %v\n", dir, err)
	}
	return code
}

func (d *clusterDemo) printf(format string, args ...any) {
	fmt.Fprintf(d.out, format, args...)
}

// event prints a line about something the demo did, between the tick lines.
// Its time is the one of the tick lines: the first tick counted is at 1s.
func (d *clusterDemo) event(format string, args ...any) {
	at := "       "
	if d.t0 != 0 {
		at = fmt.Sprintf("%6.1fs", time.Since(time.Unix(d.t0-1, 0)).Seconds())
	}
	d.printf("%s  ** %s\n", at, fmt.Sprintf(format, args...))
}

func (d *clusterDemo) run(stderr io.Writer) int {
	d.start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	store, closeStore, err := storeurl.Open(ctx, d.storeURL) // creates the tables before any node starts
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "tasklock demo: opening the store: %v\n", err)
		return exitUnavailable
	}
	defer func() { _ = closeStore() }()
	l, ok := store.(ledger.Ledger)
	if !ok {
		fmt.Fprintf(stderr, "tasklock demo: the SQLite store keeps no ledger (%T)\n", store)
		return exitSoftware
	}
	d.ledger = l

	d.printf("A cluster of %d tasklock serve processes on one SQLite store (in %s),\n", d.o.nodes, d.dir)
	d.printf("running %d jobs every second (%s) for %v. Each run is this program, which\n", len(d.jobs), strings.Join(d.jobs, ", "), d.o.duration)
	d.printf("records its tick, shard, fence and node in a file, then works for %v. Halfway through,\n", clusterWork)
	d.printf("the node that has just started a run is killed with SIGKILL, and later restarted.\n")
	d.printf("%s has shards: %d: each tick is %d shard-runs, spread over the live nodes, each claimed\n", demoShardedJob, clusterShards, clusterShards)
	d.printf("once and holding its own lock; a shard no node claimed at the tick is taken by a free node\n")
	d.printf("a poll later, and one the killed node left unfinished is retaken once its node lease ends.\n")
	if last := d.jobs[d.o.jobs-1]; d.parent(last) != "" {
		d.printf("%s depends on %s (after: [%s]): each tick of %s runs once %s's run of it\n", last, d.parent(last), d.parent(last), last, d.parent(last))
		d.printf("ended ok, on whichever node claimed it; if that does not happen within %v, it is skipped.\n", clusterWithin)
	}
	d.printf("\n")

	for i := range d.o.nodes {
		if _, err := d.startNode(fmt.Sprintf("node-%d", i+1)); err != nil {
			fmt.Fprintf(stderr, "tasklock demo: %v\n", err)
			d.stopNodes()
			return exitUnavailable
		}
	}
	if code, ok := d.waitReady(stderr); !ok {
		d.stopNodes()
		return code
	}
	now := time.Now()
	d.t0 = now.Unix() + 2 // a second for the nodes' first passes to settle
	seconds := int64((d.o.duration + time.Second - 1) / time.Second)
	d.t1 = d.t0 + seconds - 1
	d.next = d.t0
	stopAt := time.Unix(d.t1, 0).Add(500 * time.Millisecond)
	// The kill is armed halfway, but early enough that its latest moment
	// (armed + 2s, see maybeKill), the restart a second later and a second
	// of the restarted node's life all fit before the end: on a loaded
	// machine runs outlast their tick and the kill comes late.
	d.killAt = time.Unix(d.t0, 0).Add(d.o.duration / 2)
	if latest := stopAt.Add(-4500 * time.Millisecond); d.killAt.After(latest) {
		d.killAt = latest
	}

	d.printf("\nEach line is one tick (UTC); each column a job: the node that ran the tick and the\n")
	d.printf("fence of the job's lock (it grows with every grant of that lock); for %s, how many\n", demoShardedJob)
	d.printf("of its shards ran and the node that ran each (n1 is node-1), \"-\" for a shard that did not.\n\n")
	d.printf("%7s  %-8s", "", "tick")
	for _, j := range d.jobs {
		d.printf("  %-*s", clusterCell, j)
	}
	d.printf("\n")

	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
loop:
	for {
		select {
		case <-d.sigs:
			d.interrupted = true
			break loop
		case <-tick.C:
		}
		now := time.Now()
		d.poll(now, false)
		d.watchNodes()
		d.maybeKill(now)
		d.maybeRestart(now, stopAt)
		d.printRows(now, false)
		if !now.Before(stopAt) {
			if !d.waiting {
				// The polls so far read the ticks from d.next on: read
				// the earlier ones again, whose records (the killed
				// node's last ones) may have come since.
				d.poll(now, true)
			}
			pending, unstarted := d.pendingRetake(now)
			if !pending && !d.unclaimedShard(now, stopAt) {
				break
			}
			if !d.waiting && d.next > d.t1 && unstarted {
				d.waiting = true
				d.event("waiting, up to %v after the kill, for the shard-run %s left unfinished to be retaken", clusterRetakeIn, d.victim.name)
			}
		}
	}
	if d.interrupted {
		last := time.Now().Add(-500*time.Millisecond).Unix() - 1
		d.t1 = min(d.t1, last)
		d.printf("\ninterrupted: stopping the nodes (Ctrl-C again kills them at once)\n")
	}
	d.stopNodes()
	d.poll(time.Now(), true)
	d.printRows(time.Now(), true)
	return d.summary()
}

// startNode writes the node's configuration and starts it.
func (d *clusterDemo) startNode(name string) (*demoNode, error) {
	cfg := filepath.Join(d.dir, name+".yaml")
	if err := os.WriteFile(cfg, d.config(name), 0o644); err != nil {
		return nil, err
	}
	n := &demoNode{name: name, log: filepath.Join(d.dir, name+".log")}
	logf, err := os.OpenFile(n.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// The flags, not the file, since serve takes $TASKLOCK_STORE and
	// $TASKLOCK_NODE over the file's store and node.
	cmd := exec.Command(d.exe, "serve", "--config", cfg, "--store", d.storeURL, "--node", name,
		"--grace", clusterGrace.String(), "--http", "")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a Ctrl-C at the terminal reaches the
	// demo only, which then stops the nodes in order; on Linux the kernel
	// kills the node when the demo dies.
	cmd.SysProcAttr = childAttr()
	ch, err := startChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	n.ch = ch
	d.nodes = append(d.nodes, n)
	d.event("%s started, pid %d", name, ch.pid)
	return n, nil
}

// config is a node's configuration file. Strings are written as JSON,
// which YAML reads as they are.
func (d *clusterDemo) config(node string) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var b strings.Builder
	fmt.Fprintf(&b, "store: %s\nnode: %s\njobs:\n", q(d.storeURL), q(node))
	for _, j := range d.jobs {
		fmt.Fprintf(&b, "  - name: %s\n", j)
		b.WriteString("    schedule: \"@every 1s\"\n")
		fmt.Fprintf(&b, "    command: [%s, \"demo\", %s, %s, %s]\n", q(d.exe), q(demoJobCmd), q(d.runsPath), q(clusterWork.String()))
		fmt.Fprintf(&b, "    lock_ttl: %v\n    kill_grace: 500ms\n", clusterLockTTL)
		// A tick handled more than a second late is missed and not run;
		// a node looks back 10s when it starts.
		b.WriteString("    misfire: {policy: skip, grace: 1s, window: 10s}\n")
		if p := d.parent(j); p != "" {
			fmt.Fprintf(&b, "    after: [%s]\n    within: %v\n", q(p), clusterWithin)
		}
		if n := d.shardsOf(j); n > 1 {
			fmt.Fprintf(&b, "    shards: %d\n", n)
		}
	}
	return []byte(b.String())
}

// parent is the job that job waits for (after:): the last of three or more
// --jobs jobs waits for the first; "" for the others.
func (d *clusterDemo) parent(job string) string {
	if plain := d.jobs[:d.o.jobs]; len(plain) >= 3 && job == plain[len(plain)-1] {
		return plain[0]
	}
	return ""
}

// shardsOf is job's shard count: clusterShards for the sharded job, 1 for
// the others.
func (d *clusterDemo) shardsOf(job string) int {
	if job == demoShardedJob {
		return clusterShards
	}
	return 1
}

// waitReady waits until every node has logged that it serves.
func (d *clusterDemo) waitReady(stderr io.Writer) (int, bool) {
	deadline := time.Now().Add(clusterReadyIn)
	tick := time.NewTicker(clusterPoll)
	defer tick.Stop()
	for {
		all := true
		for _, n := range d.nodes {
			select {
			case <-n.ch.done:
				fmt.Fprintf(stderr, "tasklock demo: %s exited while starting (%s); its log:\n%s", n.name, describeExit(n.ch.state), tailOf(n.log))
				return exitUnavailable, false
			default:
			}
			if !n.ready {
				b, _ := os.ReadFile(n.log)
				n.ready = bytes.Contains(b, []byte("msg=serving"))
			}
			all = all && n.ready
		}
		if all {
			return exitOK, true
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "tasklock demo: the nodes did not start within %v\n", clusterReadyIn)
			return exitUnavailable, false
		}
		select {
		case <-d.sigs:
			fmt.Fprintln(stderr, "tasklock demo: interrupted")
			return 128 + int(syscall.SIGINT), false
		case <-tick.C:
		}
	}
}

// poll reads what is new in the file of runs and, now and then or when
// all is true, the ledger.
func (d *clusterDemo) poll(now time.Time, all bool) {
	d.readRuns()
	if !all && now.Sub(d.lastLedger) < clusterLedgerGap {
		return
	}
	d.lastLedger = now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q := ledger.RunQuery{From: time.Unix(d.t0, 0).UTC()}
	if !all && !d.waiting {
		q.From = time.Unix(d.next, 0).UTC()
	}
	recs, err := d.ledger.Runs(ctx, q)
	if err != nil {
		if all {
			d.failed = append(d.failed, "reading the ledger: "+err.Error())
		}
		return
	}
	for _, r := range recs {
		if r.Trigger != "" {
			continue
		}
		k := tickKey{r.Job, r.Tick.Unix(), r.Shard}
		if old, ok := d.recs[k]; !ok || r.Attempt >= old.Attempt {
			d.recs[k] = r
		}
		if r.Status == ledger.RunRunning || r.Status == ledger.RunInterrupted {
			if _, ok := d.begun[k]; !ok || r.Attempt == 1 {
				d.begun[k] = r.Node
			}
		}
		if r.Status == ledger.RunOK {
			if d.okOn[k] == nil {
				d.okOn[k] = map[string]bool{}
			}
			d.okOn[k][r.Node] = true
		}
	}
}

// readRuns reads the lines appended to the file of runs since the last call.
func (d *clusterDemo) readRuns() {
	f, err := os.Open(d.runsPath)
	if err != nil {
		return // no run yet
	}
	defer f.Close()
	if _, err := f.Seek(d.runsOff, io.SeekStart); err != nil {
		return
	}
	b, _ := io.ReadAll(f)
	d.runsOff += int64(len(b))
	d.partial = append(d.partial, b...)
	for {
		i := bytes.IndexByte(d.partial, '\n')
		if i < 0 {
			return
		}
		line := string(d.partial[:i])
		d.partial = d.partial[i+1:]
		d.addExec(line)
	}
}

// addExec takes one line of the file of runs: job, tick, shard, fence,
// node, pid.
func (d *clusterDemo) addExec(line string) {
	f := strings.Split(line, "\t")
	if len(f) != 6 {
		return
	}
	tick, err1 := strconv.ParseInt(f[1], 10, 64)
	shard, err2 := strconv.Atoi(f[2])
	fence, err3 := strconv.ParseUint(f[3], 10, 64)
	pid, err4 := strconv.Atoi(f[5])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return
	}
	k := tickKey{f[0], tick, shard}
	e := demoExec{node: f[4], fence: fence, pid: pid}
	prev := d.execs[k]
	d.execs[k] = append(prev, e)
	if n := len(d.execs[k]); n > 1 && tick >= d.t0 {
		switch {
		case d.shardsOf(k.job) > 1 && n == 2 && d.victim != nil && prev[0].node == d.victim.name && e.node != d.victim.name:
			d.event("%s retaken: started on %s, cut short by the kill; now run by %s", d.name(k), prev[0].node, e.node)
		default:
			d.event("DUPLICATE: %s ran again, on %s with fence %d (run %d of it)", d.name(k), e.node, e.fence, n)
		}
	}
	if d.cutAtStart(k) && len(d.execs[k]) == 1 && tick >= d.t0 {
		d.event("%s retaken: started by %s, which was killed before its command ran; now run by %s", d.name(k), d.victim.name, e.node)
	}
	if d.victim == nil && !d.killAt.IsZero() && !time.Now().Before(d.killAt) && tick >= d.t0 {
		if n := d.node(e.node); n != nil && !n.killed && !n.exited {
			d.kill(n, k, e)
		}
	}
}

// name names k in a sentence: "alpha's tick 12:00:03", "sharded's tick
// 12:00:03 shard 2/3". A shard is named by its index from 0, as jobs
// history, the dashboard and its lock key (…/shard/2) name it.
func (d *clusterDemo) name(k tickKey) string {
	s := fmt.Sprintf("%s's tick %s", k.job, clock(k.tick))
	if n := d.shardsOf(k.job); n > 1 {
		s += fmt.Sprintf(" shard %d/%d", k.shard, n)
	}
	return s
}

func (d *clusterDemo) node(name string) *demoNode {
	for _, n := range d.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// kill SIGKILLs n, which has just started the run e of k.
func (d *clusterDemo) kill(n *demoNode, k tickKey, e demoExec) {
	_ = syscall.Kill(n.ch.pid, syscall.SIGKILL)
	n.killed = true
	d.victim, d.killedAt = n, time.Now()
	what := "while idle"
	if e.node == n.name {
		what = fmt.Sprintf("while running %s (fence %d)", d.name(k), e.fence)
	}
	d.event("%s (pid %d) killed with SIGKILL %s: no release, no record;", n.name, n.ch.pid, what)
	d.printf("%7s     its leases run out on their own (the job's lock after lock_ttl %v)\n", "", clusterLockTTL)
}

// maybeKill kills a node if no run started after the kill was armed: the
// kill comes at the latest two seconds later, whatever it interrupts.
func (d *clusterDemo) maybeKill(now time.Time) {
	if d.victim != nil || now.Before(d.killAt.Add(2*time.Second)) {
		return
	}
	for _, n := range d.nodes {
		if !n.killed && !n.exited {
			d.kill(n, tickKey{}, demoExec{})
			return
		}
	}
}

// maybeRestart starts the killed node again, under a new name: the old
// one stays taken until the dead process's lease on it expires.
func (d *clusterDemo) maybeRestart(now, stopAt time.Time) {
	if d.victim == nil || d.restarted != nil || now.Before(d.killedAt.Add(clusterRestartIn)) || !d.victim.exited {
		return
	}
	if stopAt.Sub(now) < time.Second {
		d.restarted = d.victim // too late to be of use: no restart
		return
	}
	n, err := d.startNode(d.victim.name + "b")
	if err != nil {
		d.failed = append(d.failed, "restarting "+d.victim.name+": "+err.Error())
		d.restarted = d.victim
		return
	}
	d.restarted = n
	d.printf("%7s     = %s restarted; a new name, as %s's name lock is held by the dead process\n", "", d.victim.name, d.victim.name)
	d.printf("%7s       until its lease expires (%v), and serve refuses a name in use\n", "", tasklock.DefaultTTL)
}

// watchNodes notes the nodes that have exited, and complains about those
// that exited by themselves.
func (d *clusterDemo) watchNodes() {
	for _, n := range d.nodes {
		if n.exited {
			continue
		}
		select {
		case <-n.ch.done:
		default:
			continue
		}
		n.exited = true
		if !n.killed && !n.stopped {
			msg := fmt.Sprintf("%s exited by itself (%s)", n.name, describeExit(n.ch.state))
			d.event("%s; its log:\n%s", msg, tailOf(n.log))
			d.failed = append(d.failed, msg)
		}
	}
}

// stopNodes sends SIGTERM to every node still running and waits for them
// to finish their runs and exit; a signal to the demo, or the grace period
// and a few seconds more, end the wait with SIGKILL.
func (d *clusterDemo) stopNodes() {
	for _, n := range d.nodes {
		select {
		case <-n.ch.done:
		default:
			n.stopped = true
			_ = syscall.Kill(n.ch.pid, syscall.SIGTERM)
		}
	}
	timer := time.NewTimer(clusterGrace + 5*time.Second)
	defer timer.Stop()
	for _, n := range d.nodes {
		select {
		case <-n.ch.done:
			continue
		case <-d.sigs:
		case <-timer.C:
		}
		for _, m := range d.nodes {
			_ = syscall.Kill(m.ch.pid, syscall.SIGKILL)
		}
		<-n.ch.done
	}
	for _, n := range d.nodes {
		<-n.ch.done
		if !n.exited && n.stopped && exitStatus(n.ch.state) != 0 {
			d.failed = append(d.failed, fmt.Sprintf("%s %s after SIGTERM; see its log", n.name, describeExit(n.ch.state)))
		}
		n.exited = true
	}
}

// printRows prints the line of every tick that is complete (every job ran
// it or has a record for it), or settled (clusterSettle has passed), or,
// with final, every tick left.
func (d *clusterDemo) printRows(now time.Time, final bool) {
	for ; d.next <= d.t1; d.next++ {
		if !final {
			at := time.Unix(d.next, 0)
			if now.Before(at) {
				return
			}
			complete := true
			for _, j := range d.jobs {
				for shard := range d.shardsOf(j) {
					k := tickKey{j, d.next, shard}
					// A running record alone is news to wait for: the run's
					// line (a dependent job's starts after its parent's).
					r, rec := d.recs[k]
					complete = complete && (len(d.execs[k]) > 0 || rec && r.Status != ledger.RunRunning)
				}
			}
			if !complete && now.Before(at.Add(clusterSettle)) {
				return
			}
		}
		d.printf("%6ds  %-8s", d.next-d.t0+1, clock(d.next))
		for _, j := range d.jobs {
			d.printf("  %-*s", clusterCell, d.cell(tickKey{job: j, tick: d.next}))
		}
		d.printf("\n")
	}
}

// cell is what a tick's line shows for one job.
func (d *clusterDemo) cell(k tickKey) string {
	if n := d.shardsOf(k.job); n > 1 {
		return d.shardCell(k, n)
	}
	es := d.execs[k]
	if len(es) > 0 {
		s := fmt.Sprintf("%s f=%d", es[0].node, es[0].fence)
		switch {
		case len(es) > 1:
			s += fmt.Sprintf(" x%d!", len(es))
		case d.victim != nil && es[0].node == d.victim.name && !d.hasRec(k):
			s += " KILLED"
		}
		return s
	}
	if r, ok := d.recs[k]; ok {
		return string(r.Status) + " (" + r.Node + ")"
	}
	return "-"
}

// shardCell is what a tick's line shows for the sharded job: how many of
// its n shards ran, then for each the short name of the node that ran it
// ("n1" for node-1) with "(k)" when the kill cut it short and "x2!" when it
// ran twice, or "-" when it did not run (yet).
func (d *clusterDemo) shardCell(k tickKey, n int) string {
	ran, parts := 0, make([]string, n)
	for shard := range n {
		sk := tickKey{k.job, k.tick, shard}
		es := d.execs[sk]
		if len(es) == 0 {
			parts[shard] = "-"
			continue
		}
		ran++
		p := shortNode(es[0].node)
		if d.victim != nil && es[0].node == d.victim.name && !d.okOn[sk][es[0].node] {
			p += "(k)"
		}
		for _, e := range es[1:] {
			p += "," + shortNode(e.node)
		}
		parts[shard] = p
	}
	return fmt.Sprintf("%d/%d %s", ran, n, strings.Join(parts, " "))
}

// shortNode shortens "node-1b" to "n1b".
func shortNode(name string) string {
	if rest, ok := strings.CutPrefix(name, "node-"); ok {
		return "n" + rest
	}
	return name
}

func (d *clusterDemo) hasRec(k tickKey) bool {
	_, ok := d.recs[k]
	return ok
}

// tally is the summary's count, of the ticks of the --jobs jobs or of the
// sharded job's shard-runs.
type tally struct {
	due         int
	runs        int // ticks whose command ran
	duplicates  int // runs beyond a tick's first (for a shard-run: runs that were not cut short by the kill, beyond the first)
	missed      int
	skipped     int
	depSkipped  int // skipped, among them, because the parent's run of the tick did not end ok
	lost        int // claimed by the killed node, never started
	interrupted int // runs the kill cut short, among runs
	retaken     int // shard-runs the kill cut short that another node ran again, among interrupted
	pending     int // shard-runs the kill cut short or left unstarted, not retaken before the end
	failed      int // runs that ended other than ok, among runs
	notRun      int // ticks not run for another reason (taking the job's lock failed)
	cutAtStart  int // started by the killed node (a running record), killed before its command ran
	other       int // ticks the demo cannot account for
	notes       []string
}

// summary accounts for every tick counted, prints the summary and returns
// the exit status.
func (d *clusterDemo) summary() int {
	var t, st tally // st: the sharded job's shard-runs
	for tick := d.t0; tick <= d.t1; tick++ {
		for _, j := range d.jobs {
			for shard := range d.shardsOf(j) {
				k := tickKey{j, tick, shard}
				if d.shardsOf(j) > 1 {
					d.account(&st, k)
				} else {
					d.account(&t, k)
				}
			}
		}
	}

	if len(t.notes)+len(st.notes) > 0 {
		d.printf("\nticks that did not simply run:\n")
		for _, n := range append(t.notes, st.notes...) {
			d.printf("  %s\n", n)
		}
	}
	for _, f := range d.failed {
		d.printf("demo problem: %s\n", f)
	}
	d.printf("\nsummary: %d ticks due, %d runs, %d duplicates, %d missed, %d skipped, %d lost, %d interrupted, %d failed",
		t.due, t.runs, t.duplicates, t.missed, t.skipped, t.lost, t.interrupted, t.failed)
	if t.other > 0 {
		d.printf(", %d unexplained", t.other)
	}
	d.printf("\n")
	if d.victim != nil {
		restart := "not restarted: too little time was left"
		if d.restarted != nil && d.restarted != d.victim {
			restart = "restarted as " + d.restarted.name
		}
		d.printf("         %s was killed and %s; ", d.victim.name, restart)
	} else {
		d.printf("         no node was killed; ")
	}
	d.printf("%d ticks due = %d runs + %d skipped + %d lost + %d missed", t.due, t.runs, t.skipped, t.lost, t.missed)
	if t.cutAtStart > 0 {
		d.printf(" + %d killed before the command ran", t.cutAtStart)
	}
	if t.notRun > 0 {
		d.printf(" + %d not run (failed)", t.notRun)
	}
	if t.other > 0 {
		d.printf(" + %d unexplained", t.other)
	}
	d.printf("\n")
	d.printf("%s: %d shard-runs due, %d ran, %d duplicates, %d missed, %d skipped, %d lost, %d interrupted, %d retaken, %d failed",
		demoShardedJob, st.due, st.runs, st.duplicates, st.missed, st.skipped, st.lost, st.interrupted, st.retaken, st.failed)
	if st.other > 0 {
		d.printf(", %d unexplained", st.other)
	}
	d.printf("\n         (%d ticks x %d shards) = %d ran + %d skipped + %d lost + %d missed", d.t1-d.t0+1, clusterShards, st.runs, st.skipped, st.lost, st.missed)
	if st.cutAtStart > 0 {
		d.printf(" + %d killed before the command ran", st.cutAtStart)
	}
	if st.notRun > 0 {
		d.printf(" + %d not run (failed)", st.notRun)
	}
	if st.other > 0 {
		d.printf(" + %d unexplained", st.other)
	}
	d.printf("\n")
	if t.depSkipped > 0 {
		d.printf("skipped (parents not done): the parent's run of the tick did not end ok within %v (around\n", clusterWithin)
		d.printf("  the kill it was cut short or skipped): a dependent job runs only after its parent succeeded.\n")
	}
	if t.skipped+st.skipped > t.depSkipped {
		d.printf("skipped: the job's (or the shard's) lock was still held by an earlier run: after the kill,\n")
		d.printf("  by the killed node's run until its lease ran out (lock_ttl %v), or by another node's retake\n", clusterLockTTL)
		d.printf("  of a shard-run the kill cut short. With overlap: skip no run of a job (or of one shard of\n")
		d.printf("  it) starts while another may still be going.\n")
	}
	if t.lost > 0 {
		d.printf("lost: the killed node had claimed the tick and died before starting it; the ledger keeps\n")
		d.printf("  the claim, so no other node runs it. A crash can cost a tick, never a second run of one.\n")
	}
	if d.victim != nil {
		switch {
		case st.retaken > 0 && st.pending == 0:
			d.printf("retaken: the shard-runs %s left unfinished were run again, to the end, by other nodes once\n", d.victim.name)
			d.printf("  its node lease (%v) had ended; no shard-run ended ok twice.\n", tasklock.DefaultTTL)
		case st.pending > 0:
			d.printf("not retaken: %d shard-runs %s left unfinished (counted interrupted or lost) were not retaken\n", st.pending, d.victim.name)
			d.printf("  before the demo stopped its nodes (%v after the kill): a free node retakes such a shard-run\n", time.Since(d.killedAt).Round(100*time.Millisecond))
			d.printf("  once the killed node's node lease (%v, renewed every third of it) has ended.\n", tasklock.DefaultTTL)
			if st.retaken > 0 {
				d.printf("  %d others were retaken in time.\n", st.retaken)
			}
		}
		d.printf("%s's shards of the ticks after the kill were run by the live nodes (%s is gone from the table).\n", demoShardedJob, shortNode(d.victim.name))
	}
	switch {
	case t.duplicates > 0 || st.duplicates > 0:
		d.printf("FAIL: %d ticks ran more than once, %d shard-runs ran to the end more than once\n", t.duplicates, st.duplicates)
		return exitSoftware
	case d.interrupted:
		return 128 + int(syscall.SIGINT)
	case t.runs+st.runs == 0:
		d.printf("FAIL: nothing ran\n")
		return exitSoftware
	case len(d.failed) > 0:
		return exitSoftware
	}
	d.printf("OK: no tick ran twice, no shard-run ran to the end twice\n")
	return exitOK
}

// killedRecord says where r, the record of a run the kill cut short
// (running or interrupted), stands.
func killedRecord(r ledger.RunRecord) string {
	if r.Status == ledger.RunInterrupted {
		return "another node recorded it interrupted"
	}
	return "still \"running\" in the ledger until its node lease ends, then another node records it interrupted"
}

// account counts the tick (or the shard-run) k in t.
func (d *clusterDemo) account(t *tally, k tickKey) {
	note := func(format string, args ...any) {
		t.notes = append(t.notes, fmt.Sprintf("%s %s%s: %s", k.job, clock(k.tick), d.shardSuffix(k), fmt.Sprintf(format, args...)))
	}
	sharded := d.shardsOf(k.job) > 1
	t.due++
	es, r := d.execs[k], d.recs[k]
	_, hasRec := d.recs[k]
	killed := d.victim != nil && len(es) > 0 && es[0].node == d.victim.name && !d.okOn[k][d.victim.name]
	retake := "" // what a shard-run the kill cut short still lacks
	if sharded {
		retake = "; not retaken before the end"
	}
	switch {
	case sharded && d.cutAtStart(k) && len(es) > 0:
		// The killed node began the shard-run (its running record) but
		// died before its command ran; another node retook the shard.
		t.runs++
		t.interrupted++
		t.retaken++
		t.duplicates += len(es) - 1
		status := "no record yet"
		if hasRec {
			status = fmt.Sprintf("attempt %d, %s", r.Attempt, r.Status)
		}
		note("started by %s, which was killed before the command ran; retaken by %s (%s)", d.victim.name, es[0].node, status)
		if hasRec && r.Status != ledger.RunOK && r.Status != ledger.RunRunning {
			t.failed++
		}
	case sharded && killed && len(es) > 1:
		// The killed node's run was cut short and another node retook
		// the shard: one run to the end, unless more were.
		t.runs++
		t.interrupted++
		t.retaken++
		cut := 0
		for _, e := range es {
			if e.node == d.victim.name {
				cut++
			}
		}
		t.duplicates += max(len(es)-cut-1, 0) + max(cut-1, 0)
		status := "no record yet"
		if hasRec {
			status = fmt.Sprintf("attempt %d, %s", r.Attempt, r.Status)
		}
		note("started on %s, which was killed during the run; retaken by %s (%s)", es[0].node, es[len(es)-1].node, status)
		if hasRec && r.Status != ledger.RunOK && r.Status != ledger.RunRunning {
			t.failed++
		}
	case len(es) > 0:
		t.runs++
		t.duplicates += len(es) - 1
		switch {
		case !hasRec && d.victim != nil && es[0].node == d.victim.name:
			t.interrupted++
			t.pending += btoi(sharded)
			note("started on %s, which was killed during the run: it ran, its end was never recorded%s", es[0].node, retake)
		case !hasRec:
			t.other++
			note("ran on %s, but no record of it is in the ledger", es[0].node)
		case r.Status == ledger.RunInterrupted || (r.Status == ledger.RunRunning && d.victim != nil && r.Node == d.victim.name):
			t.interrupted++
			t.pending += btoi(sharded)
			note("started on %s, which was killed during the run: %s%s", r.Node, killedRecord(r), retake)
		case r.Status != ledger.RunOK:
			t.failed++
			note("ran on %s and ended %s: %s", r.Node, r.Status, r.Error)
		}
	case hasRec && d.victim != nil && r.Node == d.victim.name && (r.Status == ledger.RunRunning || r.Status == ledger.RunInterrupted):
		// Its running record was written as the attempt began; the kill
		// came before the command logged its start.
		t.cutAtStart++
		t.pending += btoi(sharded)
		note("started by %s, which was killed before the command ran: %s%s", r.Node, killedRecord(r), retake)
	case hasRec && r.Status == ledger.RunSkipped:
		t.skipped++
		if strings.Contains(r.Error, "parents not done") {
			t.depSkipped++
		}
		why := r.Error
		if i := strings.LastIndex(why, "not obtained: "); i >= 0 && strings.Contains(why, "still in progress") {
			why = "the lock was still held: " + why[i+len("not obtained: "):]
		}
		note("skipped by %s, %s", r.Node, why)
	case hasRec && r.Status == ledger.RunMissed:
		t.missed++
		note("missed (%s): %s", r.Node, r.Error)
	case hasRec:
		t.notRun++
		note("not run by %s: %s %s", r.Node, r.Status, r.Error)
	default:
		by, err := d.claimant(k)
		switch {
		case err != nil:
			t.other++
			note("no run, no record, and asking the ledger who claimed it failed: %v", err)
		case by == "":
			t.missed++
			note("missed: no node claimed it")
		case d.victim != nil && by == d.victim.name && sharded:
			t.lost++
			t.pending++
			note("claimed by %s, which was killed before it started the run; not retaken before the end", by)
		case d.victim != nil && by == d.victim.name:
			t.lost++
			note("lost: claimed by %s, which was killed before it started the run", by)
		default:
			t.other++
			note("claimed by %s, which has no record of it", by)
		}
	}
}

// cutAtStart reports whether the killed node began the shard-run k (a
// running record) and died before its command ran: the file of runs has
// no line of it from that node.
func (d *clusterDemo) cutAtStart(k tickKey) bool {
	if d.victim == nil || d.shardsOf(k.job) < 2 || d.begun[k] != d.victim.name {
		return false
	}
	for _, e := range d.execs[k] {
		if e.node == d.victim.name {
			return false
		}
	}
	return true
}

// shardSuffix is " shard i/n" for a shard-run of the sharded job (i from
// 0, as in name), "" for the others.
func (d *clusterDemo) shardSuffix(k tickKey) string {
	if n := d.shardsOf(k.job); n > 1 {
		return fmt.Sprintf(" shard %d/%d", k.shard, n)
	}
	return ""
}

// pendingRetake reports whether a shard-run the killed node started has no
// outcome recorded by another node yet, while one may still come: the demo
// then waits past its end, until clusterRetakeIn after the kill; and
// whether one of them is not even retaken yet (no other node's run of it
// is in the file).
func (d *clusterDemo) pendingRetake(now time.Time) (pending, unstarted bool) {
	if d.victim == nil || !now.Before(d.killedAt.Add(clusterRetakeIn)) {
		return false, false
	}
	for k, es := range d.execs {
		if d.shardsOf(k.job) < 2 || k.tick < d.t0 || k.tick > d.t1 || es[0].node != d.victim.name || d.okOn[k][d.victim.name] {
			continue
		}
		// No record yet, a running one, or the killed node's own
		// settled interrupted: another node's run is still to come. The
		// killed node's ok record (it ended the run just before the
		// kill) is no such.
		if r, ok := d.recs[k]; !ok || r.Status == ledger.RunRunning || (r.Node == d.victim.name && r.Status == ledger.RunInterrupted) {
			pending = true
			unstarted = unstarted || len(es) == 1
		}
	}
	// The shard-runs it began but died before their commands ran: no
	// line of them yet, and to come from another node.
	for k := range d.begun {
		if k.tick < d.t0 || k.tick > d.t1 || !d.cutAtStart(k) {
			continue
		}
		if r := d.recs[k]; r.Node == d.victim.name || r.Status == ledger.RunRunning {
			pending = true
			unstarted = unstarted || len(d.execs[k]) == 0
		}
	}
	return pending, unstarted
}

// unclaimedShard reports whether a shard-run of a counted tick has no
// record yet while a free node may still claim it: up to
// clusterLeftoverIn past the demo's end (stopAt).
func (d *clusterDemo) unclaimedShard(now, stopAt time.Time) bool {
	if !now.Before(stopAt.Add(clusterLeftoverIn)) {
		return false
	}
	for tick := d.t0; tick <= d.t1; tick++ {
		for shard := range d.shardsOf(demoShardedJob) {
			if _, ok := d.recs[tickKey{demoShardedJob, tick, shard}]; !ok {
				return true
			}
		}
	}
	return false
}

// claimant asks the ledger who claimed k, by claiming it: a claim that
// succeeds means nobody had. The nodes are stopped by now.
func (d *clusterDemo) claimant(k tickKey) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := d.ledger.Claim(ctx, []ledger.ClaimParams{{
		Job: k.job, Tick: time.Unix(k.tick, 0).UTC(), Shard: k.shard, Node: "demo-audit", Token: "demo-audit", Retain: time.Hour,
	}})
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("%d results for 1 claim", len(res))
	}
	if err != nil {
		return "", err
	}
	var ce *ledger.ClaimedError
	switch {
	case res[0] == nil:
		return "", nil
	case errors.As(res[0], &ce) && ce.Node != "":
		return ce.Node, nil
	case errors.As(res[0], &ce):
		return "an unknown node", nil
	}
	return "", res[0]
}

// clock formats a tick as hh:mm:ss UTC.
func clock(tick int64) string {
	return time.Unix(tick, 0).UTC().Format(time.TimeOnly)
}

// tailOf returns the last lines of a node's log.
func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error() + "\n"
	}
	lines := strings.SplitAfter(string(b), "\n")
	return strings.Join(lines[max(len(lines)-15, 0):], "")
}

// runDemoJob is the demo's job command, "tasklock demo __job RUNS WORK": it
// appends "job tick shard fence node pid" to the file RUNS in one write,
// prints what it runs, and works for WORK.
func runDemoJob(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "tasklock demo __job: want RUNS-FILE WORK-DURATION")
		return exitUsage
	}
	work, err := time.ParseDuration(args[1])
	tick, terr := time.Parse(time.RFC3339, os.Getenv("TASKLOCK_TICK"))
	if err != nil || terr != nil || os.Getenv("TASKLOCK_JOB") == "" {
		fmt.Fprintln(stderr, "tasklock demo __job: run by tasklock serve only (TASKLOCK_JOB, TASKLOCK_TICK)")
		return exitUsage
	}
	shard := os.Getenv("TASKLOCK_SHARD")
	if shard == "" {
		shard = "0"
	}
	line := fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%d\n", os.Getenv("TASKLOCK_JOB"), tick.Unix(), shard,
		os.Getenv("TASKLOCK_FENCE"), os.Getenv("TASKLOCK_NODE"), os.Getpid())
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "tasklock demo __job: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "tick %s, shard %s of %s, fence %s, attempt %s\n", tick.Format(time.TimeOnly), shard,
		cmp.Or(os.Getenv("TASKLOCK_SHARDS"), "1"), os.Getenv("TASKLOCK_FENCE"), os.Getenv("TASKLOCK_ATTEMPT"))
	time.Sleep(work) // the work itself
	return exitOK
}

// copyProgram copies the executable at src to dst and returns dst.
func copyProgram(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copying this program: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", fmt.Errorf("copying this program: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return "", fmt.Errorf("copying this program to %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("copying this program to %s: %w", dst, err)
	}
	return dst, nil
}
