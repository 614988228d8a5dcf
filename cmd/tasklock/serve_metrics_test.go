//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve --log-format json logs one JSON object a line, with a line per run
// start and end, and serves /metrics on the --http listener.
func TestServeMetricsAndJSONLogs(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), memConfig(`  - name: tick
    schedule: "@every 1s"
    command: ["true"]
`))
	p := tl.Start(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "127.0.0.1:0")
	p.WaitStderr(`"msg":"run ended".*"status":"ok"`, 10*time.Second)

	var started, ended map[string]any
	var url string
	for _, line := range strings.Split(strings.TrimSpace(p.Stderr()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		switch rec["msg"] {
		case "run started":
			if started == nil {
				started = rec
			}
		case "run ended":
			if ended == nil {
				ended = rec
			}
		case "dashboard":
			url, _ = rec["url"].(string)
		}
	}
	if started == nil || started["job"] != "tick" || started["node"] != "test-node" || started["fence"] == float64(0) || started["tick"] == nil || started["level"] != "INFO" {
		t.Errorf("run started: %v", started)
	}
	if ended["job"] != "tick" || ended["status"] != "ok" || ended["fence"] != started["fence"] || ended["tick"] != started["tick"] || ended["duration"] == nil {
		t.Errorf("run ended: %v after %v", ended, started)
	}
	if n := strings.Count(p.Stderr(), `"msg":"schedule: run ended"`); n != 0 {
		t.Errorf("the scheduler's own run lines repeat serve's: %d", n)
	}

	if url == "" {
		t.Fatalf("no dashboard line in stderr:\n%s", p.Stderr())
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // no idle connection left for goleak
	resp, err := client.Get(url + "metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, re := range []string{
		`(?m)^tasklock_job_runs_total\{job="tick",status="ok"\} [1-9]`,
		`(?m)^tasklock_obtain_attempts_total\{kind="mutex",result="obtained"\} [1-9]`,
		`(?m)^tasklock_tick_lateness_seconds_count [1-9]`,
		`(?m)^tasklock_locks_held\{kind="mutex"\} [0-9]`,
		`(?m)^go_goroutines `,
		`(?m)^tasklock_job_broken\{job="tick"\} 0$`,
		`(?m)^tasklock_build_info\{goversion="go[^"]+",revision="[0-9a-f]*",version="[^"]+"\} 1$`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("GET /metrics: %s, no line matching %s in\n%s", resp.Status, re, body)
		}
	}

	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.Stderr())
	}
}

func TestServeLogFormatFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for valid
	}{
		{[]string{"--config", "x"}, ""},
		{[]string{"--config", "x", "--log-format", "json"}, ""},
		{[]string{"--config", "x", "--log-format", "logfmt"}, `--log-format must be text or json, got "logfmt"`},
	} {
		c, err := parseServe(tc.args, func(string) string { return "" })
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want == "" && c.logFormat != tc.args[len(tc.args)-1] && len(tc.args) > 2:
			t.Errorf("%v: log format %q", tc.args, c.logFormat)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// An empty --token (--token "$TOKEN" with TOKEN unset) was taken as no
// token: serve ran with a read-only dashboard, or with $TASKLOCK_TOKEN's,
// and said nothing. It is refused, naming --token.
func TestServeEmptyTokenRefused(t *testing.T) {
	for _, env := range []string{"", "from-env-token"} {
		t.Setenv("TASKLOCK_TOKEN", env) // read by the http flags' check
		_, err := parseServe([]string{"--config", "x", "--token", ""}, func(string) string { return "" })
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--token") || !strings.Contains(err.Error(), "empty") {
			t.Errorf("--token '' with $TASKLOCK_TOKEN %q: %v, want a usage error naming --token as empty", env, err)
		}
	}
	c, err := parseServe([]string{"--config", "x", "--token", "t0ken"}, func(string) string { return "" })
	if err != nil || c.http.token != "t0ken" {
		t.Errorf("--token t0ken: %+v, %v", c, err)
	}
}
