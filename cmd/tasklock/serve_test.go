//go:build unix

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// writeConfig writes a configuration file and returns its path.
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "tasklock.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeConfig(t, dir, "store: redis://u:hunter2@localhost:1\nnode: n1\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n")
	code, out, errOut := tl.Run(t, nil, "validate", "--config", good)
	if code != exitOK || out != good+": OK: 1 job, store redis://u:xxxxx@localhost:1, node n1\n" || errOut != "" {
		t.Errorf("valid: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// With the environment serve reads, validate names what serve would use.
	code, out, errOut = tl.Run(t, []string{"TASKLOCK_STORE=redis://v:pw2@localhost:2", "TASKLOCK_NODE=n2"}, "validate", "--config", good)
	if want := good + ": OK: 1 job, store redis://v:xxxxx@localhost:2 (from $TASKLOCK_STORE), node n2 (from $TASKLOCK_NODE)\n"; code != exitOK || out != want || errOut != "" {
		t.Fatalf("validate with $TASKLOCK_STORE and $TASKLOCK_NODE = %d\n%s%s\nwant %s", code, out, errOut, want)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("store: redis://u:hunter2@h:1/?x=1\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n    timeout: 10x\n  - name: a\n    schedule: '@daily'\n    http: {url: 'http://h/'}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = tl.Run(t, nil, "validate", "--config", bad)
	want := []string{
		bad + `:1: store: bad store URL redis://u:xxxxx@h:1/?x=1: unknown query parameter "x"`,
		bad + `:6: job "a": timeout: invalid duration "10x"`,
		bad + `:7: job "a": name: a job of this name is on line 3 already`,
		"tasklock validate: 3 mistakes in the configuration",
	}
	if code != exitUsage || out != "" {
		t.Errorf("invalid: exit %d, stdout %q; want %d", code, out, exitUsage)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != len(want) {
		t.Fatalf("invalid: stderr\n%s\nwant %d lines", errOut, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i, lines[i], w)
		}
	}
	if strings.Contains(errOut, "hunter2") {
		t.Errorf("password printed:\n%s", errOut)
	}

	for _, args := range [][]string{{"validate"}, {"validate", "--config"}, {"validate", "--config", good, "extra"}, {"validate", "--config", filepath.Join(dir, "missing.yaml")}, {"serve"}, {"serve", "--config", bad}} {
		if code, _, errOut := tl.Run(t, nil, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d\nstderr:\n%s", args, code, exitUsage, errOut)
		}
	}
}

// TestValidateUnreadable: a file that cannot be read is said so on one
// line that names the command, as every other error of validate and serve.
func TestValidateUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.yaml"), "open " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
		{dir, "read " + dir + ": is a directory"},
		{filepath.Join(dir, "a\nb"), `"open ` + filepath.Join(dir, `a\nb`) + `: no such file or directory"`},
	} {
		for _, args := range [][]string{{"validate", "--config", tt.path}, {"serve", "--config", tt.path, "--http", ""}} {
			want := "tasklock " + args[0] + ": " + tt.want + "\n"
			if code, out, errOut := tl.Run(t, nil, args...); code != exitUsage || out != "" || errOut != want {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", args, code, out, errOut, exitUsage, want)
			}
		}
	}
}

// serveConfig is a configuration on mem:// with the given jobs.
func memConfig(jobs string) string {
	return "store: mem://\nnode: test-node\njobs:\n" + jobs
}

func TestServeCommandJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, memConfig(`  - name: env-job
    schedule: "@every 1s"
    command: ["sh", "-c", "env | grep ^TASKLOCK_ | sort > \"$OUT.tmp\" && mv \"$OUT.tmp\" \"$OUT\"; echo ran"]
`))
	envFile := filepath.Join(dir, "env")
	p := tl.Start(t, []string{"OUT=" + envFile, "TASKLOCK_FENCE=inherited"}, "serve", "--config", cfg, "--http", "")
	clitest.WaitFor(t, 10*time.Second, func() bool { return fileExists(envFile) }, "the job to write its environment")
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	if env["TASKLOCK_JOB"] != "env-job" || env["TASKLOCK_NODE"] != "test-node" || env["TASKLOCK_ATTEMPT"] != "1" ||
		env["TASKLOCK_SHARD"] != "0" || env["TASKLOCK_SHARDS"] != "1" {
		t.Errorf("environment %v", env)
	}
	if f, err := strconv.ParseUint(env["TASKLOCK_FENCE"], 10, 64); err != nil || f == 0 {
		t.Errorf("TASKLOCK_FENCE=%q, want a positive fence", env["TASKLOCK_FENCE"])
	}
	tick, err := time.Parse(time.RFC3339, env["TASKLOCK_TICK"])
	if err != nil || !strings.HasSuffix(env["TASKLOCK_TICK"], "Z") || tick.Nanosecond() != 0 || time.Since(tick) > time.Minute {
		t.Errorf("TASKLOCK_TICK=%q, want a recent RFC 3339 UTC instant", env["TASKLOCK_TICK"])
	}
	p.WaitOutput("[env-job] ran\n", 10*time.Second)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\nstderr:\n%s", code, p.Stderr())
	}
}

func TestServeTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The shell and the child it leaves behind ignore SIGTERM: only the
	// SIGKILL kill_grace after it stops them, and both must go. The timeout
	// counts from the run's start, the supervisor's included: on a loaded
	// machine the SIGTERM can come before the shell has set its trap, and
	// ends that run. The pid file is written once the trap is set, and only
	// by the first run that gets there: the runs after it exit at once.
	cfg := writeConfig(t, dir, memConfig(`  - name: stuck
    schedule: "@every 1s"
    timeout: 2s
    kill_grace: 300ms
    command: ["sh", "-c", "[ -e \"$DIR/pid\" ] && exit 0; trap '' TERM; sleep 1000 & echo $! > \"$DIR/child\"; echo $$ > \"$DIR/pid\"; wait"]
`))
	p := tl.Start(t, []string{"DIR=" + dir}, "serve", "--config", cfg, "--http", "")
	// Each tick is a new try at a run that set its trap in time.
	p.WaitUntil(60*time.Second, func() bool { return fileExists(filepath.Join(dir, "pid")) }, "a run to set its trap and write its pid")
	pid := clitest.ReadPid(t, filepath.Join(dir, "pid"))
	child := clitest.ReadPid(t, filepath.Join(dir, "child"))
	clitest.WaitFor(t, 10*time.Second, func() bool { return !clitest.Alive(pid) && !clitest.Alive(child) }, "the command and its child to be killed")
	p.WaitStderr(`SIGKILL.*job=stuck`, 10*time.Second)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.Stderr())
	}
}

func TestServeReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobA := `  - name: a
    schedule: "@every 1s"
    command: ["sh", "-c", "touch \"$DIR/a.$TASKLOCK_TICK\""]
`
	cfg := writeConfig(t, dir, memConfig(jobA))
	p := tl.Start(t, []string{"DIR=" + dir}, "serve", "--config", cfg, "--http", "")
	count := func(prefix string) int {
		m, _ := filepath.Glob(filepath.Join(dir, prefix+".*"))
		return len(m)
	}
	clitest.WaitFor(t, 10*time.Second, func() bool { return count("a") > 0 }, "job a to run")

	// An invalid file is logged, with its line, and changes nothing.
	writeConfig(t, dir, memConfig(jobA+"  - name: b\n    schedule: '@every 1s'\n    timeout: 10x\n    command: [true]\n"))
	p.Signal(syscall.SIGHUP)
	p.WaitStderr(`reload: invalid configuration.*tasklock.yaml:9: job \\"b\\": timeout: invalid duration`, 10*time.Second)
	n := count("a")
	clitest.WaitFor(t, 10*time.Second, func() bool { return count("a") > n }, "job a to run on after a bad reload")

	// A valid one adds job b.
	writeConfig(t, dir, memConfig(jobA+`  - name: b
    schedule: "@every 1s"
    command: ["sh", "-c", "touch \"$DIR/b.$TASKLOCK_TICK\""]
`))
	p.Signal(syscall.SIGHUP)
	p.WaitStderr(`msg=reloaded jobs=2 added=\[b\]`, 10*time.Second)
	clitest.WaitFor(t, 10*time.Second, func() bool { return count("b") > 0 }, "job b to run after the reload")
	n = count("a")
	clitest.WaitFor(t, 10*time.Second, func() bool { return count("a") > n }, "job a to run on after the reload")

	// A node-wide key alone: the log names it, and the jobs run on.
	writeConfig(t, dir, "claim_ahead: 300ms\n"+memConfig(jobA+`  - name: b
    schedule: "@every 1s"
    command: ["sh", "-c", "touch \"$DIR/b.$TASKLOCK_TICK\""]
`))
	p.Signal(syscall.SIGHUP)
	p.WaitStderr(`msg=reloaded jobs=2 added=\[\] removed=\[\] changed=\[\] settings_changed=\[claim_ahead\]`, 10*time.Second)
	n = count("a")
	clitest.WaitFor(t, 10*time.Second, func() bool { return count("a") > n }, "job a to run on after the reload")

	p.Signal(syscall.SIGINT)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.Stderr())
	}
}

func TestServeSIGTERMWaitsForRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, memConfig(`  - name: slow
    schedule: "@every 1s"
    command: ["sh", "-c", "[ -e \"$DIR/started\" ] && exit 0; touch \"$DIR/started\"; while [ ! -e \"$DIR/stop\" ]; do sleep 0.02; done; touch \"$DIR/finished\""]
`))
	p := tl.Start(t, []string{"DIR=" + dir}, "serve", "--config", cfg, "--http", "")
	clitest.WaitFor(t, 10*time.Second, func() bool { return fileExists(filepath.Join(dir, "started")) }, "the job to start")
	p.Signal(syscall.SIGTERM)
	p.WaitStderr(`shutting down`, 10*time.Second)
	select {
	case <-p.Done():
		t.Fatalf("exited (%v) while the job ran\nstderr:\n%s", p.State(), p.Stderr())
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.Stderr())
	}
	if !fileExists(filepath.Join(dir, "finished")) {
		t.Error("serve exited before the job finished")
	}
}

func TestServeSameNodeRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "store: sqlite://"+filepath.Join(dir, "tl.db")+"\nnode: same\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n")
	first := tl.Start(t, nil, "serve", "--config", cfg, "--http", "")
	clitest.WaitFor(t, 20*time.Second, func() bool {
		select {
		case <-first.Done():
			return true
		default:
		}
		return strings.Contains(first.Stderr(), "msg=serving")
	}, "the first serve to start")
	select {
	case <-first.Done():
		if strings.Contains(first.Stderr(), "keeps no schedule ledger") {
			t.Skipf("sqlitestore keeps no ledger yet: %s", first.Stderr())
		}
		t.Fatalf("first serve exited (%v)\nstderr:\n%s", first.State(), first.Stderr())
	default:
	}
	code, _, errOut := tl.Run(t, nil, "serve", "--config", cfg, "--http", "")
	if code != exitTempFail || !strings.Contains(errOut, `node name "same" is in use`) {
		t.Errorf("second serve: exit %d, want %d\nstderr:\n%s", code, exitTempFail, errOut)
	}
	first.Signal(syscall.SIGTERM)
	if code := first.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, first.Stderr())
	}
}

// A serve restarted under the name of one that was SIGKILLed takes the
// name once the dead one's lease ends, rather than exit 75 as if a live
// serve had it (a unit restarted by systemd 5 s after a crash did). It
// used to be refused until the lease had ended.
func TestServeRestartAfterKillTakesItsName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "store: sqlite://"+filepath.Join(dir, "tl.db")+"\nnode: same\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n")
	serving := func(p *clitest.Proc) bool { return strings.Contains(p.Stderr(), "msg=serving") }
	first := tl.Start(t, nil, "serve", "--config", cfg, "--http", "")
	first.WaitUntil(20*time.Second, func() bool { return serving(first) }, "the first serve to start")
	first.Signal(syscall.SIGKILL)
	first.Wait(10 * time.Second)
	killed := time.Now()
	second := tl.Start(t, nil, "serve", "--config", cfg, "--http", "")
	// Its lease (10 s) ends, then a second at most.
	second.WaitUntil(20*time.Second, func() bool { return serving(second) }, "the restarted serve to start")
	t.Logf("restarted serve serving %v after the kill", time.Since(killed).Round(time.Millisecond))
	if !strings.Contains(second.Stderr(), "waiting for it") {
		t.Errorf("the restarted serve did not say it waited for the dead one's lease:\n%s", second.Stderr())
	}
	second.Signal(syscall.SIGTERM)
	if code := second.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, second.Stderr())
	}
}

func TestServeHTTPJob(t *testing.T) {
	t.Parallel()
	type hit struct {
		method, body string
		header       http.Header
	}
	var (
		mu   sync.Mutex
		hits []hit
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hits = append(hits, hit{r.Method, string(b), r.Header.Clone()})
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot) // not 2xx: the run fails
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, memConfig(`  - name: hook
    schedule: "@every 1s"
    http:
      method: POST
      url: `+srv.URL+`/hook
      headers: {content-type: application/json}
      body: '{"ping": true}'
`))
	p := tl.Start(t, nil, "serve", "--config", cfg, "--verbose", "--http", "")
	clitest.WaitFor(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(hits) > 0 }, "the request")
	mu.Lock()
	h := hits[0]
	mu.Unlock()
	if h.method != "POST" || h.body != `{"ping": true}` || h.header.Get("Content-Type") != "application/json" {
		t.Errorf("request %+v", h)
	}
	if h.header.Get("X-Tasklock-Job") != "hook" || h.header.Get("X-Tasklock-Node") != "test-node" ||
		h.header.Get("X-Tasklock-Attempt") != "1" || h.header.Get("X-Tasklock-Fence") == "" || !strings.HasSuffix(h.header.Get("X-Tasklock-Tick"), "Z") ||
		h.header.Get("X-Tasklock-Shard") != "0" || h.header.Get("X-Tasklock-Shards") != "1" {
		t.Errorf("headers %v", h.header)
	}
	p.WaitStderr(`status=failed.*418 I'm a teapot`, 10*time.Second)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.Stderr())
	}
}
