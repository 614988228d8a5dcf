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
)

func TestServeHTTPRefusesOpenAddressWithoutToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "store: mem://\njobs:\n  - name: a\n    schedule: '@every 1s'\n    command: [true]\n")
	code, _, errOut := runTL(t, nil, "serve", "--config", cfg, "--http", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "--http") || !strings.Contains(errOut, "--token") {
		t.Errorf("exit %d, want %d naming --http and --token; stderr:\n%s", code, exitUsage, errOut)
	}
	code, _, errOut = runTL(t, nil, "serve", "--config", cfg, "--http", "nonsense")
	if code != exitUsage {
		t.Errorf("--http nonsense: exit %d\n%s", code, errOut)
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
	p := startTL(t, []string{"TASKLOCK_TOKEN=s3cret"}, "serve", "--config", cfg, "--http", addr)
	p.waitStderr(regexp.QuoteMeta("http://"+addr+"/"), 20*time.Second)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) string {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor(t, 20*time.Second, func() bool { return strings.Contains(get("/api/jobs"), `"status":"ok"`) }, "a run of a on /api/jobs")
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
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(get("/api/jobs"), `"paused":true`) }, "a paused")
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr())
	}
}
