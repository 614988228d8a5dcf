//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateCommandNotFound: a job whose command is not on this host is
// a warning on stderr naming the job and the command, not a mistake: exit
// 0 with the OK line, since serve may run on another host. A command that
// is found, and an HTTP job, get none.
func TestValidateCommandNotFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, `store: mem://
notify: {command: [tasklock-no-such-pager]}
jobs:
  - name: missing
    schedule: '@daily'
    command: [tasklock-no-such-command, --flag]
  - name: missing-path
    schedule: '@daily'
    command: [`+filepath.Join(dir, "nope.sh")+`]
  - name: found
    schedule: '@daily'
    command: [sh, -c, 'true']
  - name: paged
    schedule: '@daily'
    command: [true]
    notify: {command: [tasklock-no-such-notifier, x]}
  - name: web
    schedule: '@daily'
    http: {url: 'http://localhost:1/'}
`)
	code, out, errOut := tl.Run(t, nil, "validate", "--config", cfg)
	if code != exitOK || out != cfg+": OK: 5 jobs, store mem://, node host:pid\n" {
		t.Errorf("validate = %d, stdout %q, stderr %q; want 0 and OK", code, out, errOut)
	}
	want := `tasklock validate: warning: notify: command "tasklock-no-such-pager" not found in PATH on this host
tasklock validate: warning: job "missing": command "tasklock-no-such-command" not found in PATH on this host
tasklock validate: warning: job "missing-path": command "` + filepath.Join(dir, "nope.sh") + `" not found on this host
tasklock validate: warning: job "paged": notify: command "tasklock-no-such-notifier" not found in PATH on this host
`
	if errOut != want {
		t.Errorf("validate stderr:\n%s\nwant:\n%s", errOut, want)
	}
	for _, job := range []string{`"found"`, `"web"`} {
		if strings.Contains(errOut, job) {
			t.Errorf("validate warns of job %s: %q", job, errOut)
		}
	}
}

// TestValidatePreferredNodesWithoutMarks: preferred_nodes: true on a store
// that keeps no claim marks (here SQL and etcd) does nothing, which
// validate says in a warning (exit 0); on Redis and mem:// it says nothing.
// It used to be accepted without a word, though only those stores honour it.
func TestValidatePreferredNodesWithoutMarks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ store, scheme string }{
		{"postgres://u:s3cr3t@127.0.0.1:1/db", "postgres"},
		{"sqlite:///tmp/x.db", "sqlite"},
		{"etcd://127.0.0.1:1", "etcd"},
		{"redis://127.0.0.1:1", ""},
		{"redis+sentinel://127.0.0.1:1/mymaster", ""},
		{"mem://", ""},
	} {
		cfg := writeConfig(t, t.TempDir(), "store: "+tc.store+"\npreferred_nodes: true\njobs:\n  - {name: a, schedule: '@daily', command: [true]}\n")
		code, _, errOut := tl.Run(t, nil, "validate", "--config", cfg)
		want := ""
		if tc.scheme != "" {
			want = "tasklock validate: warning: preferred_nodes: true does nothing on a " + tc.scheme +
				":// store, which keeps no claim marks (Redis and mem:// stores do): every node claims every tick, as by default\n"
		}
		if code != exitOK || errOut != want {
			t.Errorf("%s: validate = %d, stderr %q; want 0 and %q", tc.store, code, errOut, want)
		}
	}
}
