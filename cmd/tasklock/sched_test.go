//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonLines parses serve's --log-format json stderr.
func jsonLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil && strings.HasSuffix(stderr, "\n") {
			t.Fatalf("stderr line %q is not JSON: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// Failed, timed-out runs log at WARN; ok runs stay at INFO. Before: every
// run line was INFO.
func TestLogLevels(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), memConfig(`  - name: good
    schedule: "@every 1s"
    command: ["true"]
  - name: bad
    schedule: "@every 1s"
    command: ["false"]
  - name: slow
    schedule: "@every 1s"
    command: ["sleep", "5"]
    timeout: 300ms
    kill_grace: 100ms
`))
	p := startTL(t, nil, "serve", "--config", cfg, "--log-format", "json", "--http", "")
	want := map[string]string{"ok": "INFO", "failed": "WARN", "timeout": "WARN"}
	levels := map[string]map[string]bool{}
	waitFor(t, 20*time.Second, func() bool {
		clear(levels)
		for _, rec := range jsonLines(t, p.stderr()) {
			if rec["msg"] != "run ended" {
				continue
			}
			st, _ := rec["status"].(string)
			lv, _ := rec["level"].(string)
			if levels[st] == nil {
				levels[st] = map[string]bool{}
			}
			levels[st][lv] = true
		}
		return len(levels["ok"]) > 0 && len(levels["failed"]) > 0 && len(levels["timeout"]) > 0
	}, "an ok, a failed and a timed-out run")
	for st, lv := range want {
		if len(levels[st]) != 1 || !levels[st][lv] {
			t.Errorf("runs ending %s logged at %v, want only %s", st, levels[st], lv)
		}
	}
	for _, rec := range jsonLines(t, p.stderr()) {
		if rec["msg"] == "run started" && rec["level"] != "INFO" {
			t.Errorf("run started at %v", rec["level"])
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", code, p.stderr())
	}
}
