//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// syncBuffer is a bytes.Buffer safe for a logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runJobsOn runs the jobs command in this process on store.
func runJobsOn(t *testing.T, store *memstore.Store, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runJobs(append(args[1:], "--store", "mem://"), &out, &errOut) // args[0] is "jobs"
	return code, out.String(), errOut.String()
}

// TestJobsDefineCommands: create from flags and from a snippet, update by
// flags, refusals (the file's job, a job defined already, bad snippets),
// delete and audit, on an in-process store. Not parallel: it replaces
// openStore.
func TestJobsDefineCommands(t *testing.T) {
	store := memstore.New(nil)
	openStore = func(context.Context, string, string) (driver.Store, func() error, error) {
		return store, func() error { return nil }, nil
	}
	t.Cleanup(func() { openStore = defaultOpenStore })
	ctx := context.Background()
	// "filejob" runs from a configuration file: a node registered it.
	if _, err := store.SetJobState(ctx, ledger.JobStateParams{Job: "filejob", Op: ledger.JobRegister, Spec: "@hourly", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runJobsOn(t, store, "jobs", "create", "beat", "--schedule", "@every 5s", "--command", "/bin/echo hi", "--retries", "2", "--overlap", "allow")
	if code != exitOK || !strings.Contains(out, `created "beat" (version 1)`) {
		t.Fatalf("create from flags = %d\n%s%s", code, out, errOut)
	}
	// list shows it before any node of serve registered it, as not run.
	if code, out, errOut = runJobsOn(t, store, "jobs", "list"); code != exitOK || !strings.Contains(out, "beat") || !strings.Contains(out, apijson.StateDefined) {
		t.Errorf("list after create = %d, want beat as %q\n%s%s", code, apijson.StateDefined, out, errOut)
	}
	defs, _ := store.JobDefs(ctx)
	if len(defs) != 1 {
		t.Fatalf("defs %+v", defs)
	}
	j, err := config.ParseJob("stored", []byte(defs[0].Def))
	if err != nil || j.Schedule != "@every 5s" || strings.Join(j.Command, " ") != "/bin/echo hi" || j.Retries != 2 || j.Overlap != schedule.OverlapAllow {
		t.Fatalf("stored %s: %+v %v", defs[0].Def, j, err)
	}
	if code, _, errOut = runJobsOn(t, store, "jobs", "create", "beat", "--schedule", "@every 5s", "--command", "true"); code != exitMissing || !strings.Contains(errOut, "defined already") {
		t.Errorf("create of a defined job = %d %s, want 1", code, errOut)
	}
	if code, _, errOut = runJobsOn(t, store, "jobs", "create", "filejob", "--schedule", "@every 5s", "--command", "true"); code != exitMissing || !strings.Contains(errOut, "configuration file") {
		t.Errorf("create of the file's job = %d %s, want 1 naming the configuration file", code, errOut)
	}
	if code, _, errOut = runJobsOn(t, store, "jobs", "create", "bad", "--schedule", "@every 5s", "--command", "true", "--run-timeout", "10x"); code != exitUsage ||
		!strings.Contains(errOut, `--run-timeout: invalid duration "10x"`) {
		t.Errorf("create with a bad flag = %d %s, want 64 naming --run-timeout", code, errOut)
	}
	if code, _, errOut = runJobsOn(t, store, "jobs", "create", "bad"); code != exitUsage || !strings.Contains(errOut, "-f FILE") {
		t.Errorf("create with nothing = %d %s, want 64", code, errOut)
	}
	// Update by a flag keeps the other keys.
	code, out, errOut = runJobsOn(t, store, "jobs", "update", "beat", "--schedule", "@every 10s")
	if code != exitOK || !strings.Contains(out, `updated "beat" (version 2)`) {
		t.Fatalf("update = %d\n%s%s", code, out, errOut)
	}
	defs, _ = store.JobDefs(ctx)
	if j, err := config.ParseJob("stored", []byte(defs[0].Def)); err != nil || j.Schedule != "@every 10s" || j.Retries != 2 {
		t.Fatalf("after update: %s %v", defs[0].Def, err)
	}
	if code, _, errOut = runJobsOn(t, store, "jobs", "update", "ghost", "--schedule", "@every 10s"); code != exitMissing {
		t.Errorf("update of an undefined job = %d %s, want 1", code, errOut)
	}
	if code, out, errOut = runJobsOn(t, store, "jobs", "pause", "beat", "--force"); code != exitOK {
		t.Fatalf("pause = %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = runJobsOn(t, store, "jobs", "delete", "beat", "--cancel"); code != exitOK || !strings.Contains(out, apijson.DeleteCancel) {
		t.Fatalf("delete = %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runJobsOn(t, store, "jobs", "audit", "--json")
	var audit struct{ Audit []apijson.Audit }
	if code != exitOK || json.Unmarshal([]byte(out), &audit) != nil {
		t.Fatalf("audit = %d\n%s%s", code, out, errOut)
	}
	var got []string
	for _, e := range audit.Audit {
		got = append(got, e.Action+" "+e.Job)
		if !strings.HasPrefix(e.Who, "cli:") || !strings.Contains(e.Who, "@") {
			t.Errorf("who %q, want cli:user@host", e.Who)
		}
	}
	if strings.Join(got, ",") != "delete beat,pause beat,update beat,create beat" {
		t.Errorf("audit %v", got)
	}
	if d := audit.Audit[2].Detail; d != `schedule: "@every 5s" -> "@every 10s"` {
		t.Errorf("update detail %q", d)
	}
	code, out, _ = runJobsOn(t, store, "jobs", "audit")
	if code != exitOK || !strings.Contains(out, "SEQ") || !strings.Contains(out, "delete") {
		t.Errorf("audit table = %d\n%s", code, out)
	}
}

var defaultOpenStore = openStore

// startedScheduler returns a started Scheduler on a memstore, shut down at
// the test's end.
func startedScheduler(t *testing.T) (*memstore.Store, *schedule.Scheduler) {
	t.Helper()
	store := memstore.New(nil)
	lk, err := tasklock.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	sch, err := schedule.New(lk, store, &schedule.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sch.Shutdown(context.Background()) })
	return store, sch
}

// TestReconcileFileJobsWin: a node applies the jobs defined at run time,
// ignores one named like a job of its file with one warning, reports an
// invalid one once, and removes a deleted one.
func TestReconcileFileJobsWin(t *testing.T) {
	t.Parallel()
	store, sch := startedScheduler(t)
	ctx := context.Background()
	var logs syncBuffer
	file := &config.File{Jobs: []config.Job{{Job: schedule.Job{Name: "filejob", Schedule: "@hourly"}, Command: []string{"true"}}}}
	s := &server{
		c: &serveConfig{config: "tasklock.yaml"}, file: file, cur: sch, catalog: store,
		log:     slog.New(slog.NewJSONHandler(&logs, nil)),
		runtime: runtimeJobs{applied: map[string]runtimeJob{}, ignored: map[string]int64{}},
		redact:  func(s string) string { return s },
	}
	put := func(job, def string) {
		t.Helper()
		if _, err := store.PutJobDef(ctx, ledger.JobDefParams{Job: job, Def: def, Audit: ledger.AuditEntry{Who: "test", Action: "create"}}); err != nil {
			t.Fatal(err)
		}
	}
	put("filejob", `{"name":"filejob","schedule":"@every 1s","command":["false"]}`)
	put("rt", `{"name":"rt","schedule":"@hourly","command":["true"]}`)
	put("broken", `{"name":"broken","schedule":"@hourly","command":["true"],"timeout":"10x"}`)
	put("nopool", `{"name":"nopool","schedule":"@hourly","command":["true"],"pool":"reports"}`)
	// Stored before jobs create refused lock_ttl without a lock: it still
	// runs, with one warning naming the job and the key.
	put("nolock", `{"name":"nolock","schedule":"@hourly","command":["true"],"overlap":"allow","lock_ttl":"30s"}`)
	s.reconcile()
	s.reconcile()
	if n := strings.Count(logs.String(), `job defined at run time: lock_ttl has no effect`); n != 1 || !strings.Contains(logs.String(), `"job":"nolock"`) {
		t.Errorf("%d warnings about nolock's lock_ttl, want 1:\n%s", n, logs.String())
	}
	// The scheduler's mistake is told with the file's keys, not Go's.
	if want := `job \"nopool\": pool: unknown pool \"reports\" (the file defines no pools:)`; !strings.Contains(logs.String(), want) || strings.Contains(logs.String(), "Job.Pool") {
		t.Errorf("the error about the job naming an unknown pool does not say %s:\n%s", want, logs.String())
	}
	if n := strings.Count(logs.String(), "the configuration file defines a job of this name"); n != 1 {
		t.Errorf("%d warnings about filejob, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `cannot apply a job defined at run time`); n != 2 || !strings.Contains(logs.String(), `timeout: invalid duration \"10x\"`) {
		t.Errorf("%d errors about the broken jobs, want 2, one naming timeout:\n%s", n, logs.String())
	}
	names := func() []string {
		var out []string
		for _, j := range s.dashboardJobs() {
			out = append(out, j.Name)
		}
		return out
	}
	if got := strings.Join(names(), ","); got != "filejob,nolock,rt" {
		t.Errorf("jobs in force %s, want filejob,nolock,rt", got)
	}
	if _, err := store.PutJobDef(ctx, ledger.JobDefParams{Job: "rt", Delete: true, Audit: ledger.AuditEntry{Who: "test", Action: "delete"}}); err != nil {
		t.Fatal(err)
	}
	s.reconcile()
	if got := strings.Join(names(), ","); got != "filejob,nolock" {
		t.Errorf("jobs in force after the delete %s, want filejob,nolock", got)
	}
	if err := sch.Remove("rt", schedule.RemoveOptions{}); err == nil {
		t.Error("the deleted job is still on the Scheduler")
	}
	if err := sch.Remove("filejob", schedule.RemoveOptions{}); err == nil {
		t.Error("the file's name was added from the catalog")
	}
}

// A job defined at run time that would take a lock a job in force takes —
// named like a shard of a sharded job, or sharded so that a shard's lock is
// another job's — is not applied: the two would skip each other's ticks as
// "the previous run is still in progress". The file's check
// (config.Parse) does not see jobs defined at run time.
func TestReconcileRefusesSharedLocks(t *testing.T) {
	t.Parallel()
	store, sch := startedScheduler(t)
	ctx := context.Background()
	var logs syncBuffer
	file := &config.File{Jobs: []config.Job{
		{Job: schedule.Job{Name: "x", Schedule: "@hourly", Shards: 3}, Command: []string{"true"}},
		{Job: schedule.Job{Name: "y/shard/1", Schedule: "@hourly"}, Command: []string{"true"}},
	}}
	s := &server{
		c: &serveConfig{config: "tasklock.yaml"}, file: file, cur: sch, catalog: store,
		log:     slog.New(slog.NewJSONHandler(&logs, nil)),
		runtime: runtimeJobs{applied: map[string]runtimeJob{}, ignored: map[string]int64{}},
		redact:  func(s string) string { return s },
	}
	for job, def := range map[string]string{
		"x/shard/2": `{"name":"x/shard/2","schedule":"@hourly","command":["true"]}`,
		"y":         `{"name":"y","schedule":"@hourly","command":["true"],"shards":2}`,
		"x/shard/3": `{"name":"x/shard/3","schedule":"@hourly","command":["true"]}`,
	} {
		if _, err := store.PutJobDef(ctx, ledger.JobDefParams{Job: job, Def: def, Audit: ledger.AuditEntry{Who: "test", Action: "create"}}); err != nil {
			t.Fatal(err)
		}
	}
	s.reconcile()
	s.reconcile()
	for _, want := range []string{
		`its lock \"schedule/x/shard/2\" is the lock of shard 2 of job \"x\"`,
		`the lock of its shard 1, \"schedule/y/shard/1\", is the lock of job \"y/shard/1\"`,
	} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%d errors saying %s, want 1:\n%s", n, want, logs.String())
		}
	}
	var names []string
	for _, j := range s.dashboardJobs() {
		names = append(names, j.Name)
	}
	if got := strings.Join(names, ","); got != "x,y/shard/1,x/shard/3" {
		t.Errorf("jobs in force %s, want x,y/shard/1,x/shard/3", got)
	}
}

// TestReconcileRuntimeJobsSharingALock: of two jobs defined at run time
// whose runs would take one lock (stored by two creates that raced, which
// each checked before the other was stored), the one whose name sorts
// first runs on every node, whichever a node applied first; the other
// runs once the first is deleted.
func TestReconcileRuntimeJobsSharingALock(t *testing.T) {
	t.Parallel()
	store, _ := startedScheduler(t)
	ctx := context.Background()
	put := func(job, def string) {
		t.Helper()
		if _, err := store.PutJobDef(ctx, ledger.JobDefParams{Job: job, Def: def, Audit: ledger.AuditEntry{Who: "test", Action: "create"}}); err != nil {
			t.Fatal(err)
		}
	}
	node := func() (*server, *syncBuffer) {
		_, sch := startedScheduler(t)
		var logs syncBuffer
		return &server{
			c: &serveConfig{config: "tasklock.yaml"}, file: &config.File{}, cur: sch, catalog: store,
			log:     slog.New(slog.NewJSONHandler(&logs, nil)),
			runtime: runtimeJobs{applied: map[string]runtimeJob{}, ignored: map[string]int64{}},
			redact:  func(s string) string { return s },
		}, &logs
	}
	inForce := func(s *server) string {
		var names []string
		for _, j := range s.dashboardJobs() {
			names = append(names, j.Name)
		}
		return strings.Join(names, ",")
	}
	// Node a applies x/shard/2 before x exists; node b sees both at once.
	a, logsA := node()
	put("x/shard/2", `{"name":"x/shard/2","schedule":"@hourly","command":["true"]}`)
	a.reconcile()
	put("x", `{"name":"x","schedule":"@hourly","command":["true"],"shards":3}`)
	a.reconcile()
	a.reconcile()
	b, logsB := node()
	b.reconcile()
	for name, s := range map[string]*server{"a": a, "b": b} {
		if got := inForce(s); got != "x" {
			t.Errorf("node %s: jobs in force %q, want x", name, got)
		}
	}
	want := `its lock \"schedule/x/shard/2\" is the lock of shard 2 of job \"x\"`
	for name, logs := range map[string]*syncBuffer{"a": logsA, "b": logsB} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("node %s: %d errors saying %s, want 1:\n%s", name, n, want, logs.String())
		}
	}
	if _, err := store.PutJobDef(ctx, ledger.JobDefParams{Job: "x", Delete: true, Audit: ledger.AuditEntry{Who: "test", Action: "delete"}}); err != nil {
		t.Fatal(err)
	}
	a.reconcile()
	if got := inForce(a); got != "x/shard/2" {
		t.Errorf("after x's delete, jobs in force %q, want x/shard/2", got)
	}
}
