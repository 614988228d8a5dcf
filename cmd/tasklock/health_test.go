//go:build unix

package main

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
)

// TestHealthProbesServe: "tasklock health" asks a serve on a real Redis
// for /healthz and, with --ready, /readyz, without the token; once Redis
// is killed the readiness probe fails (69) and the liveness probe does
// not; once serve is gone both fail.
func TestHealthProbesServe(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	cfg := writeConfig(t, t.TempDir(), "store: redis://"+srv.Addr()+"\njobs:\n  - name: a\n    schedule: '@every 1h'\n    command: [true]\n")
	p := tl.Start(t, []string{"TASKLOCK_TOKEN=s3cret"}, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--log-format", "json")
	p.WaitStderr(`"msg":"dashboard"`, 20*time.Second)
	addr := regexp.MustCompile(`"url":"http://([^/"]+)/"`).FindStringSubmatch(p.Stderr())[1]
	port := addr[strings.LastIndex(addr, ":")+1:]

	probe := func(args ...string) (int, string, string) {
		t.Helper()
		return tl.Run(t, nil, append([]string{"health", "--timeout", "10s"}, args...)...)
	}
	if code, out, errOut := probe("--http", addr); code != exitOK || out != "ok\n" {
		t.Errorf("health: exit %d, stdout %q, stderr %q; want 0 and ok", code, out, errOut)
	}
	// serve's own --http value for a wildcard address is asked on loopback.
	if code, out, errOut := probe("--http", "0.0.0.0:"+port, "--ready"); code != exitOK || !strings.Contains(out, `"ready":true`) {
		t.Errorf("health --ready on 0.0.0.0: exit %d, stdout %q, stderr %q; want 0 and ready", code, out, errOut)
	}

	srv.Kill(t)
	var code int
	var out, errOut string
	clitest.WaitFor(t, 20*time.Second, func() bool {
		code, out, errOut = probe("--http", addr, "--ready")
		return code != exitOK
	}, "health --ready to fail with Redis killed")
	if code != exitUnavailable || !strings.Contains(out, `"ready":false`) || !strings.Contains(out, "store call failed") || !strings.Contains(errOut, "503") {
		t.Errorf("health --ready with Redis killed: exit %d, stdout %q, stderr %q; want %d, a reason and 503", code, out, errOut, exitUnavailable)
	}
	if code, out, errOut := probe("--http", addr); code != exitOK || out != "ok\n" {
		t.Errorf("health with Redis killed: exit %d, stdout %q, stderr %q; want 0 and ok", code, out, errOut)
	}

	p.Signal(syscall.SIGTERM)
	p.Wait(30 * time.Second)
	if code, _, errOut := probe("--http", addr); code != exitUnavailable || !strings.Contains(errOut, "tasklock health:") {
		t.Errorf("health with serve stopped: exit %d, stderr %q; want %d and the error", code, errOut, exitUnavailable)
	}
}

// TestHealthUsage: bad flags are usage errors naming the flag.
func TestHealthUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", "nonsense"}, "--http"},
		{[]string{"--http", "127.0.0.1:"}, "--http"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"--timeout", "9000h"}, "--timeout"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		if code, _, errOut := tl.Run(t, nil, append([]string{"health"}, tt.args...)...); code != exitUsage || !strings.Contains(errOut, tt.want) {
			t.Errorf("health %q: exit %d, stderr %q; want %d naming %s", tt.args, code, errOut, exitUsage, tt.want)
		}
	}
	if code, out, _ := tl.Run(t, nil, "help", "health"); code != exitOK || !strings.Contains(out, "--ready") {
		t.Errorf("help health: exit %d, %q", code, out)
	}
}
