//go:build unix

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/redisstore"
)

// TestInputHygiene: names with control characters, durations out of
// range, malformed URLs and huge arguments are usage errors (64) that name
// the flag or bound, found before any network I/O, and quote at most ~200
// bytes of what was given.
func TestInputHygiene(t *testing.T) {
	t.Parallel()
	redisURL, _ := redisFor(t)
	wd := t.TempDir()
	huge := strings.Repeat("k", 10000)
	cfg := writeConfig(t, t.TempDir(), "store: mem://\njobs:\n  - name: a\n    schedule: '@daily'\n    command: [\"true\"]\n")
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"owner with a newline", []string{"exec", "--store", "mem://", "--key", "k", "--owner", "web-1\nk2  forged  7", "--", "true"}, `--owner "web-1\nk2  forged  7": contains control character \n`},
		{"owner with an escape", []string{"exec", "--store", "mem://", "--key", "k", "--owner", "\x1b[31mred", "--", "true"}, `--owner "\x1b[31mred": contains control character \x1b`},
		{"owner with a C1 control", []string{"exec", "--store", "mem://", "--key", "k", "--owner", "a\u009bb", "--", "true"}, `contains control character \u009b`},
		{"ttl beyond the bound on Redis", []string{"exec", "--store", redisURL, "--key", "k", "--ttl", "9223372036854775807ns", "--", "true"}, "--ttl 2562047h47m16.854775807s is above the maximum 8760h0m0s (365 days)"},
		{"min-hold beyond the bound", []string{"exec", "--store", redisURL, "--key", "k", "--min-hold", "9000h", "--", "true"}, "--min-hold 9000h0m0s is above the maximum 8760h0m0s"},
		{"jobs --since beyond the bound", []string{"jobs", "history", "--store", "mem://", "--since", "100000h"}, "--since 100000h0m0s is above the maximum"},
		{"serve --grace beyond the bound", []string{"serve", "--config", "/nonexistent.yaml", "--grace", "9999h"}, "--grace 9999h0m0s is above the maximum"},
		{"malformed host", []string{"exec", "--store", "postgres://%zz", "--key", "k", "--", "true"}, `invalid host name "%zz"`},
		{"port out of range", []string{"exec", "--store", "postgres://db.invalid:70000/app", "--key", "k", "--", "true"}, `invalid port "70000"`},
		{"NUL in a sqlite path", []string{"exec", "--store", "sqlite://x%00y.db", "--key", "k", "--", "true"}, "the path contains a NUL byte"},
		{"missing sqlite directory", []string{"exec", "--store", "sqlite:///missing/dir/x.db", "--key", "k", "--", "true"}, `directory "/missing/dir" does not exist`},
		// A mistyped path used to show an empty store and leave the file.
		{"jobs on a missing sqlite file", []string{"jobs", "list", "--store", "sqlite://./typo.db"}, `database file "./typo.db" does not exist: check the path`},
		{"locks on a missing sqlite file", []string{"locks", "list", "--store", "sqlite://./typo.db?migrate=true"}, `database file "./typo.db" does not exist`},
		{"huge key", []string{"exec", "--store", "mem://", "--key", huge, "--", "true"}, "... (10000 bytes): 10000 bytes long"},
		{"huge subcommand", []string{"locks", huge, "--store", "mem://"}, "... (10000 bytes)"},
		{"huge command", []string{huge}, "... (10000 bytes)"},
		// Were 69, as if the address were taken or the server down.
		{"serve --http port out of range", []string{"serve", "--config", cfg, "--http", "127.0.0.1:99999"}, `--http "127.0.0.1:99999": invalid port "99999"`},
		{"health --http port out of range", []string{"health", "--http", "127.0.0.1:99999"}, `--http "127.0.0.1:99999": invalid port "99999"`},
		// A URL given for HOST:PORT: its password is hidden.
		{"health --http with a password", []string{"health", "--http", "http://u:s3cret@127.0.0.1:1"}, `--http "http://u:xxxxx@127.0.0.1:1": want HOST:PORT`},
		{"serve --http with a password", []string{"serve", "--config", cfg, "--http", "u:s3cret@127.0.0.1:1"}, `--http "u:xxxxx@127.0.0.1:1": want HOST:PORT`},
		{"serve --http with a newline", []string{"serve", "--config", cfg, "--http", "a\nb:80", "--insecure"}, `--http "a\nb:80"`},
		// --force skips the check that serve registered JOB, not JOB's own:
		// these wrote ghost jobs to the ledger, or failed in the store (69).
		{"jobs pause with a newline", []string{"jobs", "pause", "a\nb", "--force", "--store", "mem://"}, `JOB "a\nb": contains control character \n`},
		{"jobs trigger of a huge name", []string{"jobs", "trigger", huge, "--force", "--store", "mem://"}, "... (10000 bytes): 10000 bytes long, the maximum is 200"},
		{"jobs resume of an empty name", []string{"jobs", "resume", "", "--force", "--store", "mem://"}, "JOB is empty"},
		{"jobs forget of an empty name", []string{"jobs", "forget", "", "--force", "--store", "mem://"}, "JOB is empty"},
		{"jobs cancel of an empty name", []string{"jobs", "cancel", "", "2026-11-27", "--store", "mem://"}, "JOB is empty"},
		{"jobs rerun of an empty name", []string{"jobs", "rerun", "", "2026-11-27", "--store", "mem://"}, "JOB is empty"},
	}
	for _, tt := range tests {
		start := time.Now()
		p := tl.StartIn(t, wd, nil, tt.args...)
		code := p.Wait(30 * time.Second)
		errOut := p.Stderr()
		if code != exitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("%s: exit %d, want %d with %q in\n%s", tt.name, code, exitUsage, tt.want, errOut)
		}
		if strings.Contains(errOut, "lookup") || time.Since(start) > 10*time.Second {
			t.Errorf("%s: took %v, stderr %q: a usage error needs no network", tt.name, time.Since(start), errOut)
		}
		if len(errOut) > 1000 || strings.ContainsAny(errOut, "\x1b\u009b") || strings.Count(errOut, "\n") > 2 {
			t.Errorf("%s: stderr is %d bytes, or holds a raw control character:\n%q", tt.name, len(errOut), errOut)
		}
	}
	// x%00y.db used to open x; jobs and locks used to create typo.db.
	if entries, _ := os.ReadDir(wd); len(entries) != 0 {
		t.Errorf("files created in the working directory: %v", entries)
	}
	// A well-formed URL of a store that does not answer stays 69; its
	// one-letter password is hidden, and nothing else ("connection").
	code, _, errOut := tl.Run(t, nil, "exec", "--store", "redis://app:o@"+testserver.ClosedAddr(t), "--key", "k", "--", "true")
	if code != exitUnavailable || !strings.Contains(errOut, "redis://app:xxxxx@") || !strings.Contains(errOut, "connection refused") {
		t.Errorf("unreachable store: exit %d, want %d naming the redacted URL and the refused connection\n%s", code, exitUnavailable, errOut)
	}
}

// TestListingsEscapeStoredNames: names written to the store before they
// were checked (or by another program) cannot forge rows of locks list or
// send escape sequences to a terminal.
func TestListingsEscapeStoredNames(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	store, err := redisstore.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Through the driver, which trusts the Locker to have checked names.
	const owner = "evil\nforged/key  root  1  10s\x1b[2J"
	if _, err := store.Acquire(context.Background(), driver.AcquireParams{Key: "real", Token: "t1", Owner: owner, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := tl.Run(t, nil, "locks", "list", "--store", url)
	if code != exitOK {
		t.Fatalf("locks list: exit %d\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Contains(out, "\x1b") || !strings.Contains(out, `"evil\nforged/key  root  1  10s\x1b[2J"`) {
		t.Errorf("locks list printed %d lines, want the header and one escaped row:\n%s", len(lines), out)
	}
	// The exec that finds the lock held names the holder escaped too.
	code, _, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "real", "--", "true")
	if code != exitTempFail || strings.Contains(errOut, "\x1b") || !strings.Contains(errOut, `"evil\nforged`) {
		t.Errorf("exec on a held lock: exit %d, stderr %q", code, errOut)
	}
}

// TestVersion: tasklock version, --version and version --json print the
// build; serve's /metrics and the dashboard's /api/info carry it.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errOut := tl.Run(t, nil, args...)
		if code != exitOK || !regexp.MustCompile(`^tasklock \S+ \(.*`+regexp.QuoteMeta(runtime.Version())+`\)\n$`).MatchString(out) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	code, out, errOut := tl.Run(t, nil, "version", "--json")
	var in struct {
		Version   string `json:"version"`
		Revision  string `json:"revision"`
		GoVersion string `json:"go_version"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &in) != nil || in.Version == "" || in.GoVersion != runtime.Version() {
		t.Errorf("version --json: exit %d, %q %q", code, out, errOut)
	}
	if in.Revision != "" && !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(in.Revision) {
		t.Errorf("revision %q", in.Revision)
	}
	for _, args := range [][]string{{"version", "extra"}, {"version", "--json", "extra"}, {"version", "extra", "--json"}} {
		if code, _, errOut := tl.Run(t, nil, args...); code != exitUsage || !strings.Contains(errOut, `unexpected argument "extra"`) {
			t.Errorf("%q: exit %d, %q; want 64 naming extra", args, code, errOut)
		}
	}
	if code, out, _ := tl.Run(t, nil, "help"); code != exitOK || !strings.Contains(out, "tasklock version [--json]") {
		t.Errorf("help does not list version:\n%s", out)
	}
}

// TestServeStoreAndNodeSources: serve takes the store and the node name
// from the flag, else the environment, else the file, else the default,
// as "help serve" says — and so reads the store that jobs and locks read
// from $TASKLOCK_STORE.
func TestServeStoreAndNodeSources(t *testing.T) {
	t.Parallel()
	if code, out, _ := tl.Run(t, nil, "help", "serve"); code != exitOK ||
		!strings.Contains(out, "--store URL     the store; default $TASKLOCK_STORE, then the file's") ||
		!strings.Contains(out, "--node NAME     this scheduler's node name; default $TASKLOCK_NODE") {
		t.Errorf("help serve does not document --store, --node and their order:\n%s", out)
	}
	dir := t.TempDir()
	envDB, flagDB, fileDB := filepath.Join(dir, "env.db"), filepath.Join(dir, "flag.db"), filepath.Join(dir, "file.db")
	job := "jobs:\n  - name: tick\n    schedule: '@every 1s'\n    command: [true]\n"
	noStore := writeConfig(t, t.TempDir(), job)
	withStore := writeConfig(t, t.TempDir(), "store: sqlite://"+fileDB+"\nnode: file-node\n"+job)
	tests := []struct {
		name           string
		config         string
		env, args      []string
		store, node    string // in the "serving" log line
		from, notStore string
	}{
		{"env, no store in the file", noStore, []string{"TASKLOCK_STORE=sqlite://" + envDB, "TASKLOCK_NODE=env-node"}, nil, "sqlite://" + envDB, "env-node", "$TASKLOCK_STORE", "./tasklock.db"},
		{"env over the file", withStore, []string{"TASKLOCK_STORE=sqlite://" + envDB, "TASKLOCK_NODE=env-node"}, nil, "sqlite://" + envDB, "env-node", "$TASKLOCK_STORE", fileDB},
		{"flags over env", withStore, []string{"TASKLOCK_STORE=sqlite://" + envDB, "TASKLOCK_NODE=env-node"}, []string{"--store", "sqlite://" + flagDB, "--node", "flag-node"}, "sqlite://" + flagDB, "flag-node", "--store", envDB},
		{"the file", withStore, []string{"TASKLOCK_STORE="}, nil, "sqlite://" + fileDB, "file-node", "file", envDB},
		{"the default", noStore, nil, nil, "sqlite://./tasklock.db", "", "default", envDB},
	}
	for _, tt := range tests {
		wd := t.TempDir()
		p := tl.StartIn(t, wd, tt.env, append([]string{"serve", "--config", tt.config, "--http", ""}, tt.args...)...)
		p.WaitStderr(`msg=serving `, 30*time.Second)
		line := regexp.MustCompile(`(?m)^.*msg=serving .*$`).FindString(p.Stderr())
		node := tt.node
		if node == "" {
			host, _ := os.Hostname()
			node = host + ":"
		}
		if !strings.Contains(line, " node="+node) || !strings.Contains(line, " store="+tt.store+" ") || !strings.Contains(line, " store_from="+tt.from+" ") {
			t.Errorf("%s: serving line %q, want node=%s store=%s store_from=%s", tt.name, line, node, tt.store, tt.from)
		}
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(30 * time.Second); code != exitOK {
			t.Errorf("%s: exit %d\n%s", tt.name, code, p.Stderr())
		}
		if tt.notStore == "./tasklock.db" && fileExists(filepath.Join(wd, "tasklock.db")) {
			t.Errorf("%s: serve created ./tasklock.db instead of using $TASKLOCK_STORE", tt.name)
		}
	}
	// jobs list, reading $TASKLOCK_STORE, sees what serve ran.
	code, out, errOut := tl.Run(t, []string{"TASKLOCK_STORE=sqlite://" + envDB}, "jobs", "list")
	if code != exitOK || !strings.Contains(out, "tick") {
		t.Errorf("jobs list on $TASKLOCK_STORE: exit %d\n%s%s", code, out, errOut)
	}
	for _, bad := range []struct {
		env, args []string
		want      string
	}{
		{nil, []string{"--node", ""}, "--node is empty"},
		{nil, []string{"--node", "a\nb"}, `--node "a\nb": contains control character \n`},
		{[]string{"TASKLOCK_NODE=a\x1bb"}, nil, `$TASKLOCK_NODE "a\x1bb": contains control character \x1b`},
		{[]string{"TASKLOCK_STORE=postgres://%zz"}, nil, `invalid host name "%zz"`},
	} {
		code, _, errOut := tl.Run(t, bad.env, append([]string{"serve", "--config", noStore, "--http", ""}, bad.args...)...)
		if code != exitUsage || !strings.Contains(errOut, bad.want) {
			t.Errorf("serve %q %q: exit %d, want 64 with %q:\n%s", bad.env, bad.args, code, bad.want, errOut)
		}
	}
}

// TestServeHTTPJobSecretsRedacted: the query of an HTTP job's URL (an
// api_key, a signature) reaches neither the log nor the run history, on a
// non-2xx answer or a failed connection.
func TestServeHTTPJobSecretsRedacted(t *testing.T) {
	t.Parallel()
	const key, sig = "k3y-Zq81", "s1g-Wb77"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "tl.db")
	cfg := writeConfig(t, dir, "store: "+db+"\nnode: n1\njobs:\n"+
		"  - name: answered\n    schedule: '@every 1s'\n    http: {url: '"+srv.URL+"/hook?api_key="+key+"&X-Amz-Signature="+sig+"'}\n"+
		"  - name: refused\n    schedule: '@every 1s'\n    http: {url: 'http://bot:"+key+"@"+testserver.ClosedAddr(t)+"/hook?v="+sig+"'}\n")
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "")
	p.WaitStderr(`job=answered.*status=failed`, 20*time.Second)
	p.WaitStderr(`job=refused.*status=failed`, 20*time.Second)
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
	code, hist, errOut := tl.Run(t, nil, "jobs", "history", "--store", db, "--json")
	if code != exitOK || !strings.Contains(hist, "HTTP 500") || !strings.Contains(hist, "connection refused") {
		t.Fatalf("jobs history: exit %d\n%s%s", code, hist, errOut)
	}
	for what, text := range map[string]string{"serve's log": p.Stderr() + p.Stdout(), "the run history": hist} {
		if strings.Contains(text, key) || strings.Contains(text, sig) {
			t.Errorf("%s holds a secret of a job's URL:\n%s", what, text)
		}
	}
}
