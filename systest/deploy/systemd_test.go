package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unitPath is the shipped unit, and the binary path its ExecStart names.
const (
	unitPath    = "deploy/systemd/tasklock.service"
	unitBinPath = "/usr/local/bin/tasklock"
)

// TestSystemdUnit: systemd-analyze verify accepts the unit, with its
// ExecStart pointed at the static binary (verify needs it to exist) and
// without a warning (an unknown or misspelt key is only a warning);
// systemd-analyze security rates its exposure 2.0 or less, offline; it has the
// hardening the README lists; and the configuration and environment files
// beside it are what the binary accepts.
func TestSystemdUnit(t *testing.T) {
	analyze := require(t, "systemd-analyze")
	unit := readFile(t, unitPath)
	if !strings.Contains(unit, "ExecStart="+unitBinPath+" ") {
		t.Fatalf("%s: ExecStart does not run %s", unitPath, unitBinPath)
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "tasklock.service")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(unit, unitBinPath, tasklockBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", local).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
	// A misspelt key must show: the check above would catch it.
	bad := filepath.Join(dir, "bad.service")
	if err := os.WriteFile(bad, []byte(strings.ReplaceAll(strings.ReplaceAll(unit, unitBinPath, tasklockBin), "NoNewPrivileges=", "NoNewPrivilege=")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(analyze, "verify", bad).CombinedOutput(); !strings.Contains(string(out), "NoNewPrivilege") {
		t.Errorf("systemd-analyze verify did not report a misspelt key: %s", out)
	}
	// --threshold is in tenths of the level printed: 20 is 2.0.
	out, err = exec.Command(analyze, "security", "--offline=true", "--threshold=20", local).CombinedOutput()
	if score := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out); err != nil || score == nil {
		t.Errorf("systemd-analyze security --offline=true --threshold=20: %v, want an exposure level of 2.0 or less\n%s", err, out)
	} else {
		t.Logf("systemd-analyze security: exposure %s", score[1])
	}

	for _, want := range []string{
		"DynamicUser=yes", "StateDirectory=tasklock", "NoNewPrivileges=yes", "ProtectSystem=strict",
		"ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes", "CapabilityBoundingSet=\n",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "SystemCallFilter=@system-service",
		"KillMode=mixed", "EnvironmentFile=-/etc/tasklock/tasklock.env",
	} {
		if !strings.Contains(unit, "\n"+want) {
			t.Errorf("%s lacks %q", unitPath, strings.TrimSpace(want))
		}
	}
	// serve's grace (30s) fits in the stop timeout.
	if !strings.Contains(unit, "TimeoutStopSec=45s") {
		t.Errorf("%s: TimeoutStopSec is not 45s (serve's --grace 30s and a margin)", unitPath)
	}

	// The example configuration is valid, and its store is in the
	// StateDirectory.
	cfg := readFile(t, "deploy/systemd/tasklock.yaml")
	if !strings.Contains(cfg, "store: sqlite:///var/lib/tasklock/") {
		t.Errorf("deploy/systemd/tasklock.yaml: the store is not in /var/lib/tasklock, the only place the unit can write")
	}
	if out, err := exec.Command(tasklockBin, "validate", "--config", filepath.Join(repoRoot, "deploy/systemd/tasklock.yaml")).CombinedOutput(); err != nil {
		t.Errorf("tasklock validate deploy/systemd/tasklock.yaml: %v\n%s", err, out)
	}
	// The environment file names only variables serve reads.
	env := readFile(t, "deploy/systemd/tasklock.env.example")
	for _, m := range regexp.MustCompile(`(?m)^#? ?([A-Z_]+)=`).FindAllStringSubmatch(env, -1) {
		switch m[1] {
		case "TASKLOCK_TOKEN", "TASKLOCK_STORE", "TASKLOCK_NODE":
		default:
			t.Errorf("tasklock.env.example sets %s, which serve does not read", m[1])
		}
	}
}
