//go:build unix

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
)

// tl is the tasklock binary TestMain builds.
var tl *clitest.Binary

// proc is a tasklock process under test.
type proc = clitest.Proc

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == superviseCmd {
		// The supervisor of a command that a test started in this
		// process (runCommand): startCommand runs /proc/self/exe, this
		// test binary, which would otherwise run every test again.
		os.Exit(runSupervise(os.Args[2:], os.Stderr))
	}
	if testserver.HelperRole() != "" {
		os.Exit(testserver.Main(m)) // a helper process (TestFleetProcess) needs no binary
	}
	var err error
	tl, err = clitest.Build(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testserver.Main(m)
	tl.Remove()
	os.Exit(code)
}

// redisFor starts a Redis server and returns its URL and a client for it.
func redisFor(t *testing.T) (string, *redis.Client) {
	t.Helper()
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return "redis://" + srv.Addr(), c
}

// lockKey is the Redis key of a lock (redisstore's default layout).
func lockKey(key string) string { return "tasklock:{" + key + "}" }

func exists(t *testing.T, c *redis.Client, key string) bool {
	t.Helper()
	n, err := c.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// waitSubscribed waits until p waits for a lock: its Locker has subscribed
// to redisstore's release channel (the only subscriber in these tests).
func waitSubscribed(t *testing.T, c *redis.Client, p *proc) {
	t.Helper()
	clitest.WaitFor(t, 10*time.Second, func() bool {
		select {
		case <-p.Done():
			t.Fatalf("tasklock exited (%v) instead of waiting\nstdout:\n%s\nstderr:\n%s", p.State(), p.Stdout(), p.Stderr())
		default:
		}
		n, err := c.PubSubNumSub(context.Background(), "tasklock:released").Result()
		return err == nil && n["tasklock:released"] > 0
	}, "the waiter to subscribe to release notifications")
}

// waitingChild is a shell COMMAND that prints "started" and runs until
// the file $STOP exists.
const waitingChild = `echo started; while [ ! -e "$STOP" ]; do sleep 0.02; done; echo stopping`

func TestExecRunsCommand(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	var fences []uint64
	for i := range 2 {
		code, out, errOut := tl.Run(t, []string{"EXTRA=kept"}, "exec", "--store", url, "--key", "job-1", "--owner", "test-owner", "--",
			"sh", "-c", `echo "key=$TASKLOCK_KEY fence=$TASKLOCK_FENCE owner=$TASKLOCK_OWNER extra=$EXTRA"; exit 7`)
		if code != 7 {
			t.Fatalf("run %d: exit %d, want 7 (COMMAND's)\nstderr:\n%s", i, code, errOut)
		}
		m := regexp.MustCompile(`^key=job-1 fence=(\d+) owner=test-owner extra=kept\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("run %d: stdout %q", i, out)
		}
		f, _ := strconv.ParseUint(m[1], 10, 64)
		fences = append(fences, f)
		if errOut != "" {
			t.Errorf("run %d: stderr %q, want nothing without --verbose", i, errOut)
		}
		if exists(t, c, lockKey("job-1")) {
			t.Errorf("run %d: lock still in Redis after exit", i)
		}
	}
	if fences[0] == 0 || fences[1] <= fences[0] {
		t.Errorf("fences %v, want positive and increasing", fences)
	}

	// Exit statuses pass through, signals as 128+N.
	for _, tt := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 42", 42},
		{"kill -KILL $$", 128 + 9},
		{"kill -TERM $$", 128 + 15},
	} {
		if code, _, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "job-1", "--", "sh", "-c", tt.script); code != tt.want {
			t.Errorf("%q: exit %d, want %d\nstderr:\n%s", tt.script, code, tt.want, errOut)
		}
	}
}

func TestExecStoreFromEnvAndVerbose(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	code, out, errOut := tl.Run(t, []string{"TASKLOCK_STORE=" + url}, "exec", "--key", "env-job", "--verbose", "--", "echo", "ran")
	if code != 0 || out != "ran\n" {
		t.Fatalf("exit %d, stdout %q\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"lock obtained", "command exited", "lock released"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("--verbose stderr lacks %q:\n%s", want, errOut)
		}
	}
	// mem:// needs no server.
	if code, out, errOut := tl.Run(t, []string{"TASKLOCK_STORE=mem://"}, "exec", "--key", "k", "--", "echo", "mem"); code != 0 || out != "mem\n" {
		t.Fatalf("mem://: exit %d, stdout %q\nstderr:\n%s", code, out, errOut)
	}
}

func TestExecCommandNotRunnable(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	code, _, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "nr", "--", "no-such-command-tasklock-test")
	if code != exitNotFound || !strings.Contains(errOut, "no-such-command-tasklock-test") {
		t.Errorf("missing command: exit %d, stderr %q; want %d", code, errOut, exitNotFound)
	}
	// The name is quoted: a control character in it reaches no terminal.
	code, _, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "nr", "--", "no-such\x1b[2Jcommand")
	if code != exitNotFound || !strings.Contains(errOut, `cannot run "no-such\x1b[2Jcommand"`) {
		t.Errorf("missing command with an escape: exit %d, stderr %q; want %d, the name quoted", code, errOut, exitNotFound)
	}
	code, _, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "nr", "--", t.TempDir())
	if code != exitCannotRun {
		t.Errorf("directory as command: exit %d, stderr %q; want %d", code, errOut, exitCannotRun)
	}
	if exists(t, c, lockKey("nr")) {
		t.Error("lock not released after COMMAND failed to start")
	}
}

func TestExecHeldElsewhere(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	stop := filepath.Join(t.TempDir(), "stop")
	holder := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "held", "--owner", "holder-A", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	holder.WaitOutput("started", 20*time.Second)

	start := time.Now()
	code, out, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "held", "--", "echo", "must-not-run")
	if code != exitTempFail {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitTempFail, errOut)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("--wait 0 took %v", d)
	}
	if out != "" {
		t.Errorf("COMMAND ran: stdout %q", out)
	}
	m := regexp.MustCompile(`held by holder-A \(its lease ends in ([0-9.]+)s\)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("stderr does not name the holder and its TTL:\n%s", errOut)
	}
	if ttl, _ := strconv.ParseFloat(m[1], 64); ttl <= 0 || ttl > 30 {
		t.Errorf("holder's TTL %vs, want in (0, 30]", ttl)
	}

	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.Wait(20 * time.Second); code != 0 {
		t.Errorf("holder exit %d\nstderr:\n%s", code, holder.Stderr())
	}
}

func TestExecWaitObtainsAfterRelease(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	dir := t.TempDir()
	stop, marker := filepath.Join(dir, "stop"), filepath.Join(dir, "first-done")
	holder := tl.Start(t, []string{"STOP=" + stop, "MARKER=" + marker}, "exec", "--store", url, "--key", "w", "--ttl", "30s",
		"--", "sh", "-c", waitingChild+`; echo done > "$MARKER"; echo "fence=$TASKLOCK_FENCE"`)
	holder.WaitOutput("started", 20*time.Second)

	waiter := tl.Start(t, []string{"MARKER=" + marker}, "exec", "--store", url, "--key", "w", "--wait", "20s",
		"--", "sh", "-c", `cat "$MARKER"; echo "fence=$TASKLOCK_FENCE"`)
	// The waiter must not get the lock while the holder runs: it waits,
	// subscribed to release notifications.
	waitSubscribed(t, c, waiter)
	released := time.Now()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.Wait(20 * time.Second); code != 0 {
		t.Fatalf("holder exit %d\nstderr:\n%s", code, holder.Stderr())
	}
	if code := waiter.Wait(20 * time.Second); code != 0 {
		t.Fatalf("waiter exit %d\nstderr:\n%s", code, waiter.Stderr())
	}
	t.Logf("waiter finished %v after the holder was told to stop", time.Since(released).Round(time.Millisecond))
	if out := waiter.Stdout(); !strings.HasPrefix(out, "done\n") {
		t.Errorf("waiter ran before the holder finished: stdout %q", out)
	}
	f1 := regexp.MustCompile(`fence=(\d+)`).FindStringSubmatch(holder.Stdout())
	f2 := regexp.MustCompile(`fence=(\d+)`).FindStringSubmatch(waiter.Stdout())
	if f1 == nil || f2 == nil {
		t.Fatalf("no fences: %q, %q", holder.Stdout(), waiter.Stdout())
	}
	if a, _ := strconv.Atoi(f1[1]); func() bool { b, _ := strconv.Atoi(f2[1]); return b <= a }() {
		t.Errorf("waiter's fence %s is not above the holder's %s", f2[1], f1[1])
	}
}

func TestExecWaitTimesOut(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	stop := filepath.Join(t.TempDir(), "stop")
	holder := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "wt", "--owner", "holder-B", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	holder.WaitOutput("started", 20*time.Second)
	start := time.Now()
	code, _, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "wt", "--wait", "500ms", "--", "true")
	d := time.Since(start)
	if code != exitTempFail || !strings.Contains(errOut, "holder-B") || !strings.Contains(errOut, "--wait 500ms") {
		t.Errorf("exit %d, stderr %q; want %d naming holder-B and --wait", code, errOut, exitTempFail)
	}
	if d < 500*time.Millisecond || d > 10*time.Second {
		t.Errorf("--wait 500ms gave up after %v", d)
	}
	os.WriteFile(stop, nil, 0o644)
	holder.Wait(20 * time.Second)
}

// A store that goes down while exec waits for the lock ends the wait with
// exit 69, store unreachable: it was 75, "held by" the holder seen before
// the store went down, which a cron wrapper takes for "another host ran".
func TestExecWaitStoreGoesDown(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	url := "redis://" + srv.Addr()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	stop := filepath.Join(t.TempDir(), "stop")
	holder := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "down", "--owner", "holder-D", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	holder.WaitOutput("started", 20*time.Second)
	waiter := tl.Start(t, nil, "exec", "--store", url, "--key", "down", "--wait", "6s", "--", "echo", "must-not-run")
	waitSubscribed(t, c, waiter)
	srv.Kill(t)
	code := waiter.Wait(20 * time.Second)
	if code != exitUnavailable || strings.Contains(waiter.Stderr(), "holder-D") || !strings.Contains(waiter.Stderr(), "store failed while waiting") ||
		!strings.Contains(waiter.Stderr(), "store "+url+"): ") || waiter.Stdout() != "" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant %d, store unreachable and named, not the holder seen before", code, waiter.Stdout(), waiter.Stderr(), exitUnavailable)
	}
	os.WriteFile(stop, nil, 0o644)
	holder.Wait(20 * time.Second)
}

func TestExecUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	code, out, errOut := tl.Run(t, nil, "exec", "--store", "redis://"+addr, "--key", "k", "--", "echo", "must-not-run")
	if code != exitUnavailable {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitUnavailable, errOut)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to report an unreachable store", d)
	}
	if out != "" || !strings.Contains(errOut, "unreachable") || !strings.Contains(errOut, addr) {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
}

func TestExecBadUsage(t *testing.T) {
	t.Parallel()
	store := []string{"TASKLOCK_STORE=mem://"}
	tests := []struct {
		env  []string
		args []string
		want string // in stderr
	}{
		{nil, []string{"--key", "k", "--", "true"}, "--store is required"},
		{store, []string{"--store", "", "--key", "k", "--", "true"}, "--store"},
		{store, []string{"--", "true"}, "--key is required"},
		{store, []string{"--key", "", "--", "true"}, "--key"},
		{store, []string{"--key", "a\tb", "--", "true"}, "--key"},
		{store, []string{"--key", strings.Repeat("k", 600), "--", "true"}, "--key"},
		{store, []string{"--key", "k"}, "missing COMMAND"},
		// The key forgotten: the flag package took the next argument,
		// and COMMAND ran under the lock "--".
		{store, []string{"--key", "--", "true"}, `--key needs a value: it took "--"`},
		{store, []string{"--key", "--wait", "5s", "--", "true"}, `--key needs a value: it took "--wait"`},
		{store, []string{"--key", "k", "--owner", "--ttl=5s", "--", "true"}, `--owner needs a value: it took "--ttl=5s"`},
		{nil, []string{"--store", "--key", "k", "--", "true"}, `--store needs a value: it took "--key"`},
		{store, []string{"--key", "k", "--", ""}, "COMMAND is empty"}, // was 126, after obtaining the lock
		{store, []string{"--key", "k", "--ttl", "0", "--", "true"}, "--ttl"},
		{store, []string{"--key", "k", "--ttl", "-1s", "--", "true"}, "--ttl"},
		{store, []string{"--key", "k", "--ttl", "1ms", "--", "true"}, "--ttl"},
		{store, []string{"--key", "k", "--ttl", "abc", "--", "true"}, "-ttl"},
		{store, []string{"--key", "k", "--wait", "-1s", "--", "true"}, "--wait"},
		{store, []string{"--key", "k", "--max-hold", "-1s", "--", "true"}, "--max-hold"},
		{store, []string{"--key", "k", "--min-hold", "-1s", "--", "true"}, "--min-hold"},
		{store, []string{"--key", "k", "--min-hold", "2s", "--max-hold", "1s", "--", "true"}, "--min-hold"},
		{store, []string{"--key", "k", "--kill-grace", "-1s", "--", "true"}, "--kill-grace"},
		{store, []string{"--key", "k", "--kill-grace", "10s", "--", "true"}, "--kill-grace 10s must be less than half of --ttl 10s"},
		{store, []string{"--key", "k", "--ttl", "1s", "--", "true"}, "--kill-grace"},
		// --kill-grace not given: its default is named as such.
		{store, []string{"--key", "k", "--ttl", "3s", "--", "true"}, "--kill-grace 2s (the default) must be less than half of --ttl 3s: lower --kill-grace or raise --ttl"},
		{store, []string{"--key", "k", "--owner", strings.Repeat("o", 300), "--", "true"}, "--owner"},
		// Was taken as "not given": the command ran as host:pid.
		{store, []string{"--key", "k", "--owner", "", "--", "true"}, "--owner is empty"},
		{store, []string{"--key", "k", "--bogus", "--", "true"}, "-bogus"},
		{store, []string{"--key", "k", "--permits", "0", "--", "true"}, "--permits must be between 1 and 10000, got 0"},
		{store, []string{"--key", "k", "--permits", "10001", "--", "true"}, "--permits must be between 1 and 10000"},
		{store, []string{"--key", "k", "--permits", "two", "--", "true"}, "-permits"},
		{store, []string{"--key", "k", "--permits", "0x10", "--", "true"}, `--permits "0x10": not a whole number`},
		{store, []string{"--key", "k", "--permits", "99999999999999999999", "--", "true"}, `--permits "99999999999999999999": not a whole number`},
		{store, []string{"--key", "k", "--shared", "--permits", "2", "--", "true"}, "--shared, --exclusive and --permits exclude each other"},
		{store, []string{"--key", "k", "--shared", "--exclusive", "--", "true"}, "--shared, --exclusive and --permits exclude each other"},
		{nil, []string{"--store", "foo://x", "--key", "k", "--", "true"}, `unknown scheme "foo"`},
		{nil, []string{"--store", "redis://h:1?nope=1", "--key", "k", "--", "true"}, `unknown query parameter "nope"`},
		{nil, []string{"--store", "localhost:6379", "--key", "k", "--", "true"}, "missing scheme"},
		// A URL from the environment says so: the user gave no --store.
		{[]string{"TASKLOCK_STORE=localhost:6379"}, []string{"--key", "k", "--", "true"}, "missing scheme, want one of etcd, etcds, mem, mysql, postgres, postgresql, redis, redis+cluster, redis+sentinel, rediss, redlock, sqlite, zk followed by :// (the store of $TASKLOCK_STORE)"},
		{nil, []string{"--store", "etcd://h:1?session_ttl=1500ms", "--key", "k", "--", "true"}, "session_ttl"},
		{nil, []string{"--store", "zk://h:1?session_ttl=10s", "--key", "k", "--", "true"}, `unknown query parameter "session_ttl"`},
		{nil, []string{"--store", "redlock://h:1,h:2", "--key", "k", "--", "true"}, "at least 3; got 2"},
		// Kinds the store cannot keep, found without connecting (were 69
		// when the store did not answer).
		{nil, []string{"--store", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--key", "k", "--shared", "--", "true"}, "--shared"},
		{nil, []string{"--store", "postgres://127.0.0.1:1/db?mode=connection", "--key", "k", "--permits", "2", "--", "true"}, "--permits"},
		{nil, []string{"--store", "mysql://127.0.0.1:1/db?mode=connection", "--key", "k", "--exclusive", "--", "true"}, "--exclusive"},
	}
	for _, tt := range tests {
		args := append([]string{"exec"}, tt.args...)
		code, out, errOut := tl.Run(t, tt.env, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d\nstderr:\n%s", tt.args, code, exitUsage, errOut)
			continue
		}
		if !strings.Contains(errOut, tt.want) {
			t.Errorf("%q: stderr does not contain %q:\n%s", tt.args, tt.want, errOut)
		}
		if out != "" {
			t.Errorf("%q: stdout %q", tt.args, out)
		}
	}
}

func TestExecInvalidKeyForRedis(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	code, _, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "}k", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "--key") {
		t.Errorf("exit %d, stderr %q; want %d naming --key", code, errOut, exitUsage)
	}
}

func TestHelpAndUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args      []string
		code      int
		inStdout  string
		inStderr  string
		stdoutNil bool
	}{
		{[]string{"help"}, 0, "tasklock exec --store URL", "", false},
		{[]string{"-h"}, 0, "Exit status of exec", "", false},
		{[]string{"--help"}, 0, "Store URLs", "", false},
		{[]string{"help", "exec"}, 0, "--kill-grace D", "", false},
		{[]string{"help", "demo"}, 0, "--nodes N", "", false},
		{[]string{"help", "migrate"}, 0, "tasklock migrate status --store URL", "", false},
		{[]string{"migrate", "--help"}, 0, "nothing to migrate", "", false},
		{[]string{"help"}, 0, "exec creates it when it is missing\n(migrate=true is the default)", "", false},
		{[]string{"help"}, 0, "mysql://[user:pass@]tcp(host:port)/DB", "", false},
		{[]string{"help"}, 0, "zk://h1:p1,h2:p2[/ROOT]", "", false},
		{[]string{"help"}, 0, "redlock://[user:pass@]h1:p1,h2:p2,h3:p3[/db]", "", false},
		{[]string{"help"}, 0, "etcd query parameters: session_ttl", "", false},
		{[]string{"help", "exec"}, 0, "session_ttl or\n       session_timeout", "", false},
		{[]string{"exec", "-h"}, 0, "TASKLOCK_FENCE", "", false},
		{[]string{"demo", "--help"}, 0, "demo-job", "", false},
		{nil, exitUsage, "", "Usage:", true},
		{[]string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`, true},
		{[]string{"help", "frobnicate"}, exitUsage, "", `unknown command "frobnicate"`, true},
		{[]string{"help", "exec", "extra"}, exitUsage, "", `tasklock help: unexpected argument "extra"`, true},
		{[]string{"--help", "jobs", "history", "--json"}, exitUsage, "", `unexpected argument "history"`, true},
		{[]string{"demo", "--lock", "--workers", "0"}, exitUsage, "", "--workers", true},
		{[]string{"demo", "--workers", "2"}, exitUsage, "", "--workers goes with --lock only", true},
		{[]string{"demo", "--nodes", "1"}, exitUsage, "", "--nodes", true},
		{[]string{"demo", "--duration", "2s"}, exitUsage, "", "at least", true},
		{[]string{"demo", "--duration", "0s"}, exitUsage, "", "--duration", true},
		{[]string{"demo", "extra"}, exitUsage, "", `unexpected argument "extra"`, true},
		{[]string{"demo", "--lock", "--duration", "9000h"}, exitUsage, "", "--duration 9000h0m0s is above the maximum 8760h0m0s", true},
		{[]string{"demo", "--lock", "--duration", "1ns"}, exitSoftware, "FAIL: nothing ran", "", false}, // exited 0
		// Every subcommand is named, and a missing argument too.
		{[]string{"jobs", "frob", "--store", "mem://"}, exitUsage, "", "list, history, trigger, cancel, pause, resume, forget, backfill, rerun, create, update, delete, audit or notifications", true},
		{[]string{"jobs", "--store", "mem://"}, exitUsage, "", "backfill, rerun", true},
		{[]string{"help"}, 0, "tasklock jobs list|history|trigger|cancel|pause|resume|forget|backfill|rerun|\n                create|update|delete|audit|notifications --store URL", "", false},
		{[]string{"jobs", "cancel", "j", "--store", "mem://"}, exitUsage, "", "cancel: missing TICK (tasklock jobs cancel JOB TICK)", true},
		{[]string{"jobs", "rerun", "--store", "mem://"}, exitUsage, "", "rerun: missing JOB", true},
		{[]string{"locks", "show", "--store", "mem://"}, exitUsage, "", "show: missing KEY", true},
	}
	for _, tt := range tests {
		code, out, errOut := tl.Run(t, nil, tt.args...)
		if code != tt.code || !strings.Contains(out, tt.inStdout) || !strings.Contains(errOut, tt.inStderr) || tt.stdoutNil && out != "" {
			t.Errorf("%q: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", tt.args, code, tt.code, out, errOut)
		}
	}
}

func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const pw = "pw-S3cr3t"
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "ACL", "SETUSER", "app", "on", ">"+pw, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	good := "redis://app:" + pw + "@" + srv.Addr()
	stop := filepath.Join(t.TempDir(), "stop")
	holder := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", good, "--key", "pw", "--verbose", "--", "sh", "-c", waitingChild)
	holder.WaitOutput("started", 20*time.Second)

	tests := []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"wrong password", nil, []string{"--store", "redis://app:wrong-" + pw + "@" + srv.Addr(), "--key", "k"}, exitUnavailable},
		{"closed port", nil, []string{"--store", "redis://app:" + pw + "@" + closed, "--key", "k", "--verbose"}, exitUnavailable},
		{"sentinel closed port", nil, []string{"--store", "redis+sentinel://app:" + pw + "@" + closed + "/m?sentinel_password=" + pw, "--key", "k", "--verbose"}, exitUnavailable},
		{"unknown param", nil, []string{"--store", good + "?bogus=" + pw, "--key", "k"}, exitUsage},
		{"password param", nil, []string{"--store", "redis://" + srv.Addr() + "?password=" + pw, "--key", "k"}, exitUsage},
		{"unknown scheme", nil, []string{"--store", "fancy://app:" + pw + "@" + srv.Addr(), "--key", "k"}, exitUsage},
		// redis-cli reads redis://SECRET@host as a password; go-redis sent
		// no AUTH, and NOAUTH came back with the URL, SECRET in it.
		{"password in the user's place", nil, []string{"--store", "redis://" + pw + "@" + srv.Addr(), "--key", "k"}, exitUsage},
		{"redlock password in the user's place", nil, []string{"--store", "redlock://" + pw + "@" + srv.Addr() + "," + closed + ",127.0.0.1:1", "--key", "k"}, exitUsage},
		{"raw special characters", nil, []string{"--store", "redis://app:" + pw + "/?#@" + closed, "--key", "k"}, exitUnavailable},
		{"etcd closed port", nil, []string{"--store", "etcd://app:" + pw + "@" + closed + "?dial_timeout=300ms", "--key", "k", "--verbose"}, exitUnavailable},
		{"zk with a password", nil, []string{"--store", "zk://app:" + pw + "@" + closed, "--key", "k"}, exitUsage},
		{"redlock wrong password", nil, []string{"--store", "redlock://app:wrong-" + pw + "@" + srv.Addr() + "," + closed + ",127.0.0.1:1", "--key", "k", "--verbose"}, exitUnavailable},
		{"bad percent-encoding", nil, []string{"--store", "redis://app:%zz" + pw + "@" + srv.Addr(), "--key", "k"}, exitUsage},
		{"URL in the wrong flag", nil, []string{"--store", good, "--ttl", good, "--key", "k"}, exitUsage},
		{"from the environment", []string{"TASKLOCK_STORE=redis://app:wrong-" + pw + "@" + srv.Addr()}, []string{"--key", "k"}, exitUnavailable},
		{"held elsewhere", nil, []string{"--store", good, "--key", "pw", "--verbose"}, exitTempFail},
		{"held elsewhere, waiting", nil, []string{"--store", good, "--key", "pw", "--wait", "200ms", "--verbose"}, exitTempFail},
		{"success", nil, []string{"--store", good, "--key", "other", "--verbose"}, 0},
	}
	for _, tt := range tests {
		args := append(append([]string{"exec"}, tt.args...), "--", "true")
		code, out, errOut := tl.Run(t, tt.env, args...)
		if code != tt.code {
			t.Errorf("%s: exit %d, want %d\nstderr:\n%s", tt.name, code, tt.code, errOut)
		}
		if strings.Contains(out+errOut, "S3cr3t") {
			t.Errorf("%s: the password was printed:\nstdout:\n%s\nstderr:\n%s", tt.name, out, errOut)
		}
		if strings.Contains(tt.name, "wrong password") && !strings.Contains(errOut, "store refused the credentials") {
			t.Errorf("%s: stderr does not say the store refused the credentials:\n%s", tt.name, errOut)
		}
		if tt.code != 0 && errOut == "" {
			t.Errorf("%s: no message on stderr", tt.name)
		}
	}
	os.WriteFile(stop, nil, 0o644)
	holder.Wait(20 * time.Second)
	if strings.Contains(holder.Stdout()+holder.Stderr(), "S3cr3t") {
		t.Errorf("holder printed the password:\n%s", holder.Stderr())
	}
}

func TestExecLockLostTerminatesCommand(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	p := tl.Start(t, nil, "exec", "--store", url, "--key", "lost", "--ttl", "3s", "--kill-grace", "1s",
		"--", "sh", "-c", `trap "echo got-term; exit 0" TERM; echo started; while :; do sleep 0.05; done`)
	p.WaitOutput("started", 20*time.Second)
	if !exists(t, c, lockKey("lost")) {
		t.Fatal("lock not in Redis while COMMAND runs")
	}
	deleted := time.Now()
	if err := c.Del(context.Background(), lockKey("lost")).Err(); err != nil {
		t.Fatal(err)
	}
	code := p.Wait(20 * time.Second)
	elapsed := time.Since(deleted)
	if code != exitSoftware {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitSoftware, p.Stdout(), p.Stderr())
	}
	if !strings.Contains(p.Stdout(), "got-term") {
		t.Errorf("COMMAND did not get SIGTERM: stdout %q", p.Stdout())
	}
	if errOut := p.Stderr(); !strings.Contains(errOut, `lock "lost" lost`) || !strings.Contains(errOut, "no longer has this lease") {
		t.Errorf("stderr does not give the cause:\n%s", errOut)
	}
	// Renewal runs every TTL/3; the loss is seen at the next one.
	if elapsed > 2*time.Second {
		t.Errorf("COMMAND stopped %v after the lease was deleted, want within the TTL", elapsed)
	}
	t.Logf("stopped %v after the lease was deleted", elapsed.Round(time.Millisecond))
}

func TestExecKillGrace(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	const grace = 700 * time.Millisecond
	p := tl.Start(t, []string{"PIDFILE=" + pidFile}, "exec", "--store", url, "--key", "stubborn", "--ttl", "2s", "--kill-grace", grace.String(),
		"--", "sh", "-c", `trap "" TERM; echo $$ > "$PIDFILE"; echo started; while :; do sleep 0.05; done`)
	p.WaitOutput("started", 20*time.Second)
	pid := clitest.ReadPid(t, pidFile)
	if err := c.Del(context.Background(), lockKey("stubborn")).Err(); err != nil {
		t.Fatal(err)
	}
	// The loss is seen at the next renewal, so measure from the SIGTERM
	// line.
	var termAt time.Time
	clitest.WaitFor(t, 10*time.Second, func() bool {
		if strings.Contains(p.Stderr(), "SIGTERM now") {
			termAt = time.Now()
			return true
		}
		return false
	}, "the SIGTERM line")
	code := p.Wait(20 * time.Second)
	killedAfter := time.Since(termAt)
	if code != exitSoftware {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitSoftware, p.Stderr())
	}
	if !strings.Contains(p.Stderr(), "sending SIGKILL") {
		t.Errorf("stderr does not report the SIGKILL:\n%s", p.Stderr())
	}
	// The SIGTERM line is seen by polling stderr, up to a few hundred ms
	// late on a loaded machine, which shortens killedAfter; a SIGKILL sent
	// with the SIGTERM, or without any grace, still fails this.
	if killedAfter < grace/2 {
		t.Errorf("SIGKILL came %v after SIGTERM, want about --kill-grace %v", killedAfter, grace)
	}
	clitest.WaitFor(t, 5*time.Second, func() bool { return !clitest.Alive(pid) }, "COMMAND to be gone")
	t.Logf("exited %v after the SIGTERM line (kill-grace %v)", killedAfter.Round(time.Millisecond), grace)
}

func TestExecSigkillKillsCommand(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := tl.Start(t, []string{"PIDFILE=" + pidFile}, "exec", "--store", url, "--key", "orphan", "--ttl", "1s", "--kill-grace", "400ms",
		"--", "sh", "-c", `echo $$ > "$PIDFILE"; echo started; while :; do sleep 0.05; done`)
	p.WaitOutput("started", 20*time.Second)
	pid := clitest.ReadPid(t, pidFile)
	if !clitest.Alive(pid) {
		t.Fatalf("COMMAND pid %d not alive", pid)
	}
	// The next holder waits already: its own start (seconds for a -race
	// binary on a loaded machine) is not part of the takeover.
	waiter := tl.Start(t, nil, "exec", "--store", url, "--key", "orphan", "--wait", "60s", "--verbose", "--", "echo", "took-over")
	waitSubscribed(t, c, waiter)
	killed := time.Now()
	if err := p.Process().Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(10 * time.Second); code != -1 {
		t.Fatalf("tasklock exit %d after SIGKILL", code)
	}
	clitest.WaitFor(t, 5*time.Second, func() bool { return !clitest.Alive(pid) }, fmt.Sprintf("COMMAND pid %d to die with tasklock", pid))
	t.Logf("COMMAND gone %v after tasklock was killed", time.Since(killed).Round(time.Millisecond))

	// Nobody released the lease: the next holder gets it once it expires,
	// within the TTL. When it got it is its own log's time, not when this
	// test saw the line.
	if code := waiter.Wait(30 * time.Second); code != 0 || waiter.Stdout() != "took-over\n" {
		t.Fatalf("takeover: exit %d, stdout %q\nstderr:\n%s", code, waiter.Stdout(), waiter.Stderr())
	}
	got := logTime(t, waiter.Stderr(), "lock obtained")
	if got.Before(killed) {
		t.Fatalf("the waiter got the lock at %v, before its holder was killed at %v\nstderr:\n%s", got, killed, waiter.Stderr())
	}
	if d := got.Sub(killed); d > 2*time.Second {
		t.Errorf("takeover %v after SIGKILL, want at most TTL + 1s\nstderr:\n%s", d, waiter.Stderr())
	}
	t.Logf("took over %v after SIGKILL", got.Sub(killed).Round(time.Millisecond))
}

// logTime is the time of the first line of a text log that holds msg.
func logTime(t *testing.T, log, msg string) time.Time {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "msg="+strconv.Quote(msg)) && !strings.Contains(l, "msg="+msg+" ") {
			continue
		}
		ts, ok := strings.CutPrefix(strings.Fields(l)[0], "time=")
		if !ok {
			break
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		return at
	}
	t.Fatalf("no %q line in the log:\n%s", msg, log)
	return time.Time{}
}

func TestExecForwardsSignals(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	for _, tt := range []struct {
		sig    syscall.Signal
		script string
		want   int
	}{
		{syscall.SIGTERM, `trap "echo got-term; exit 5" TERM; echo started; while :; do sleep 0.05; done`, 5},
		{syscall.SIGINT, `echo started; while :; do sleep 0.05; done`, 128 + 2},
		{syscall.SIGHUP, `trap "echo got-hup; exit 0" HUP; echo started; while :; do sleep 0.05; done`, 0},
		// Ctrl-\ at a terminal, which flock(1)'s COMMAND gets: it used to
		// kill tasklock with Go's goroutine dump (exit 2), leaving the
		// lock held at the store until its TTL.
		{syscall.SIGQUIT, `trap "echo got-quit; exit 6" QUIT; echo started; while :; do sleep 0.05; done`, 6},
	} {
		p := tl.Start(t, nil, "exec", "--store", url, "--key", "sig", "--", "sh", "-c", tt.script)
		p.WaitOutput("started", 20*time.Second)
		if err := p.Process().Signal(tt.sig); err != nil {
			t.Fatal(err)
		}
		if code := p.Wait(10 * time.Second); code != tt.want {
			t.Errorf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tt.sig, code, tt.want, p.Stdout(), p.Stderr())
		}
		if exists(t, c, lockKey("sig")) {
			t.Errorf("%v: lock not released", tt.sig)
		}
	}
}

func TestExecSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	stop := filepath.Join(t.TempDir(), "stop")
	holder := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "sw", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	holder.WaitOutput("started", 20*time.Second)
	waiter := tl.Start(t, nil, "exec", "--store", url, "--key", "sw", "--wait", "60s", "--verbose", "--", "echo", "must-not-run")
	// Signal it once it waits (its handler is installed before it
	// connects).
	waitSubscribed(t, c, waiter)
	if err := waiter.Process().Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waiter.Wait(10 * time.Second); code != 128+15 {
		t.Errorf("waiter exit %d, want %d\nstderr:\n%s", code, 128+15, waiter.Stderr())
	}
	if waiter.Stdout() != "" || !strings.Contains(waiter.Stderr(), "interrupted") {
		t.Errorf("stdout %q, stderr %q", waiter.Stdout(), waiter.Stderr())
	}
	os.WriteFile(stop, nil, 0o644)
	holder.Wait(20 * time.Second)
}

func TestExecMaxHold(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	start := time.Now()
	// --max-hold leaves sh time to set its trap on a busy machine (it
	// printed nothing at 800ms under load): "got-term" shows the SIGTERM
	// reached the command.
	p := tl.Start(t, nil, "exec", "--store", url, "--key", "mh", "--ttl", "3s", "--max-hold", "2500ms", "--kill-grace", "1s",
		"--", "sh", "-c", `trap "echo got-term; exit 0" TERM; echo started; while :; do sleep 0.05; done`)
	code := p.Wait(20 * time.Second)
	if code != exitSoftware {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitSoftware, p.Stderr())
	}
	if d := time.Since(start); d < 2500*time.Millisecond {
		t.Errorf("stopped after %v, before --max-hold", d)
	}
	if !strings.Contains(p.Stdout(), "got-term") || !strings.Contains(p.Stderr(), "--max-hold 2.5s reached") {
		t.Errorf("stdout %q\nstderr:\n%s", p.Stdout(), p.Stderr())
	}
	if exists(t, c, lockKey("mh")) {
		t.Error("lock not released after --max-hold")
	}
}

func TestExecMinHold(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	code, _, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "minh", "--min-hold", "5s", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
	}
	ttl, err := c.PTTL(context.Background(), lockKey("minh")).Result()
	if err != nil || ttl <= 0 || ttl > 5*time.Second {
		t.Fatalf("after an early exit with --min-hold 5s the lease has PTTL %v (%v), want in (0, 5s]", ttl, err)
	}
	code, _, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "minh", "--", "true")
	if code != exitTempFail {
		t.Errorf("second run during --min-hold: exit %d, want %d\nstderr:\n%s", code, exitTempFail, errOut)
	}
}

// --permits is read in base 10: 010 is ten permits, as every other holder
// writing 10 means, not eight (flag.IntVar's octal).
func TestExecPermitsDecimal(t *testing.T) {
	t.Parallel()
	c, err := parseExec([]string{"--store", "mem://", "--key", "k", "--permits", "010", "--", "true"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.permits != 10 {
		t.Errorf("--permits 010 is %d permits, want 10", c.permits)
	}
}

// A lease deleted while COMMAND ran (locks release --force), when COMMAND
// ends before a renewal notices, was reported as "release failed; the
// lease expires after its TTL": there was no lease left to expire. exec
// says the lock was no longer held and that another holder may have run.
func TestExecLeaseGoneAtRelease(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	stop := filepath.Join(t.TempDir(), "stop")
	// --ttl 30s: the first renewal is 10s away, long after COMMAND ends.
	p := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "gone", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	p.WaitOutput("started", 20*time.Second)
	if code, out, errOut := tl.Run(t, nil, "locks", "release", "--force", "gone", "--store", url); code != exitOK {
		t.Fatalf("locks release --force = %d\n%s%s", code, out, errOut)
	}
	if exists(t, c, lockKey("gone")) {
		t.Fatal("lease still in Redis after locks release --force")
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code := p.Wait(20 * time.Second)
	errOut := p.Stderr()
	if code != exitSoftware || !strings.Contains(errOut, `lock "gone" was no longer held when COMMAND ended`) || strings.Contains(errOut, "expires after its TTL") {
		t.Errorf("exit %d, stderr:\n%s\nwant 70 (the lock was lost while COMMAND ran) and that the lock was no longer held", code, errOut)
	}
}
