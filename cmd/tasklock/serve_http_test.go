//go:build unix

package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

func TestServeHTTPRefusesOpenAddressWithoutToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "store: mem://\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n")
	code, _, errOut := tl.Run(t, nil, "serve", "--config", cfg, "--http", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "--http") || !strings.Contains(errOut, "--token") {
		t.Errorf("exit %d, want %d naming --http and --token; stderr:\n%s", code, exitUsage, errOut)
	}
	for _, addr := range []string{"nonsense", "127.0.0.1:abc", "127.0.0.1:99999", "localhost:-1"} {
		code, _, errOut = tl.Run(t, nil, "serve", "--config", cfg, "--http", addr)
		if code != exitUsage || !strings.Contains(errOut, "--http") {
			t.Errorf("--http %s: exit %d, want %d naming --http\n%s", addr, code, exitUsage, errOut)
		}
	}
	code, _, errOut = tl.Run(t, []string{"TASKLOCK_TOKEN="}, "serve", "--config", cfg, "--public-read")
	if code != exitUsage || !strings.Contains(errOut, "--public-read") || !strings.Contains(errOut, "--token") {
		t.Errorf("--public-read without a token: exit %d, want %d naming --public-read and --token; stderr:\n%s", code, exitUsage, errOut)
	}
}

// httpGet GETs url with the Authorization header auth (none when empty)
// and returns the status and body.
func httpGet(t *testing.T, client *http.Client, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeHTTPPublicRead: with --token and --public-read anyone reads,
// only the token acts.
func TestServeHTTPPublicRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "store: mem://\njobs:\n  - name: a\n    schedule: '@every 1h'\n    command: [true]\n")
	p := tl.Start(t, []string{"TASKLOCK_TOKEN=s3cret"}, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--public-read", "--log-format", "json")
	p.WaitStderr(`"msg":"dashboard"`, 20*time.Second)
	base := strings.TrimSuffix(regexp.MustCompile(`"url":"([^"]+)"`).FindStringSubmatch(p.Stderr())[1], "/")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/", "/api/jobs", "/api/nodes", "/api/locks", "/api/runs", "/metrics", "/healthz"} {
		if code, body := httpGet(t, client, base+path, ""); code != http.StatusOK {
			t.Errorf("anonymous GET %s with --public-read: %d %.200s", path, code, body)
		}
	}
	resp, err := client.Post(base+"/api/jobs/a/pause", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous pause with --public-read: %d, want 401", resp.StatusCode)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
}

func TestServeHTTPDashboard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := writeConfig(t, dir, "store: sqlite://"+filepath.Join(dir, "tl.db")+"\nnode: web-1\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n")
	p := tl.Start(t, []string{"TASKLOCK_TOKEN=s3cret"}, "serve", "--config", cfg, "--http", addr)
	p.WaitStderr(regexp.QuoteMeta("http://"+addr+"/"), 20*time.Second)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) string {
		_, body := httpGet(t, client, "http://"+addr+path, "bearer s3cret")
		return body
	}
	// With a token, reading needs it too, but for /healthz and /metrics.
	for _, path := range []string{"/api/jobs", "/api/runs", "/api/locks", "/api/nodes", "/api/info", "/"} {
		if code, body := httpGet(t, client, "http://"+addr+path, ""); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s with a token: %d %.200s, want 401", path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if code, body := httpGet(t, client, "http://"+addr+path, ""); code != http.StatusOK {
			t.Errorf("anonymous GET %s: %d %.200s, want 200", path, code, body)
		}
	}
	// The job's last run: a run of `true` can take a third of its 1s
	// period on a busy machine, and /api/jobs reads the recent runs at most
	// once a second, so it may show every one as running; /api/runs shows
	// the ok ones.
	clitest.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(get("/api/jobs"), `"last_run":{"job":"a"`) && strings.Contains(get("/api/runs?job=a&status=ok"), `"status":"ok"`)
	}, "a run of a on /api/jobs, and an ok one on /api/runs")
	if n := get("/api/nodes"); !strings.Contains(n, `"node":"web-1","alive":true`) || !strings.Contains(n, `"version":"`) {
		t.Errorf("nodes: %s", n)
	}
	if info := get("/api/info"); !regexp.MustCompile(`"build":\{"version":"[^"]+".*"go_version":"go`).MatchString(info) {
		t.Errorf("/api/info has no build: %s", info)
	}
	pause := func(auth string) int {
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/jobs/a/pause", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := pause(""); code != http.StatusUnauthorized {
		t.Errorf("pause without the token: %d", code)
	}
	if code := pause("Bearer s3cret"); code != http.StatusOK {
		t.Errorf("pause with the token: %d", code)
	}
	clitest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(get("/api/jobs"), `"paused":true`) }, "a paused")
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.Stderr())
	}
}
