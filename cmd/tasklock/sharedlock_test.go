//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateRefusesSharedLock: jobs create refuses a job whose lock is
// another job's — named like a shard of a sharded job, or sharded so that
// a shard's lock is another job's — among the jobs defined at run time
// and, with --config, the file's: exit 64 naming both jobs and the lock,
// nothing stored. serve would otherwise run both, each skipping the
// other's ticks.
func TestCreateRefusesSharedLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "ledger.db")
	requireCatalog(t, url)
	c := &cliClient{store: url, dir: dir}
	c.create(t, "name: x\nschedule: '@hourly'\ncommand: [true]\nshards: 3\n")
	c.create(t, "name: y/shard/1\nschedule: '@hourly'\ncommand: [true]\n")
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n  - name: f\n    schedule: '@hourly'\n    command: [true]\n    shards: 2\n")
	for _, tt := range []struct {
		job  string
		args []string
		want string
	}{
		{"x/shard/2", []string{"x/shard/2", "--schedule", "@daily", "--command", "true"},
			`job "x/shard/2" cannot run beside job "x", defined at run time (version 1): its lock "schedule/x/shard/2" is the lock of shard 2 of job "x"`},
		{"y", []string{"-f", c.file(t, "name: y\nschedule: '@daily'\ncommand: [true]\nshards: 2\n")},
			`job "y" cannot run beside job "y/shard/1", defined at run time (version 1): the lock of its shard 1, "schedule/y/shard/1", is the lock of job "y/shard/1"`},
		{"f/shard/0", []string{"f/shard/0", "--schedule", "@daily", "--command", "true", "--config", cfg},
			`job "f/shard/0" cannot run beside a job of the configuration file ` + cfg + `: its lock "schedule/f/shard/0" is the lock of shard 0 of job "f"`},
	} {
		args := append(append([]string{"jobs", "create"}, tt.args...), "--store", url)
		code, out, errOut := tl.Run(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("%q = %d, stdout %q, stderr %q; want 64 saying %s", args, code, out, errOut, tt.want)
		}
		if a := c.audit(t, tt.job); len(a) != 0 {
			t.Errorf("%q stored the job: audit %+v", args, a)
		}
	}
	// Names that only look alike are no conflict.
	c.create(t, "name: x/shard/3\nschedule: '@hourly'\ncommand: [true]\n")
	c.create(t, "name: x/shard/02\nschedule: '@hourly'\ncommand: [true]\n")
}
