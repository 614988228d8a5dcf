package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/tasklock/tasklock/dashboard/jobdefs"
)

// jobs create --command splits at blanks and interprets no quotes, so
// --command 'sh -c "echo a b"' made the job run sh with the arguments -c,
// "echo, a and b" — a job that fails at every tick. A value with quotes or
// a backslash is refused (exit 64) with the way to give such arguments.
func TestDefineCommandRefusesQuotes(t *testing.T) {
	for _, v := range []string{`sh -c "echo a b"`, `sh -c 'echo a b'`, `echo a\ b`} {
		fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var d defineFlags
		d.register(fs)
		if err := fs.Parse([]string{"--command", v}); err != nil {
			t.Fatal(err)
		}
		_, _, err := d.snippet("", strings.NewReader(""))
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--command") || !strings.Contains(err.Error(), "-f") {
			t.Errorf("--command %s: %v, want a usage error naming --command and -f", v, err)
		}
	}
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	var d defineFlags
	d.register(fs)
	if err := fs.Parse([]string{"--command", "/usr/local/bin/beat --quick"}); err != nil {
		t.Fatal(err)
	}
	data, _, err := d.snippet("", strings.NewReader(""))
	if err != nil || string(data) != `{"command":["/usr/local/bin/beat","--quick"]}` {
		t.Errorf("plain --command: %s, %v", data, err)
	}
}

// A -f snippet that leaves to the flags and JOB keys it does not have
// (jobs create x -f shards.yaml --schedule ... --command ...) is whole once
// they are added: its check alone must not call those keys missing. Its
// own mistakes are still told at its lines.
func TestDefineSnippetCompletedByFlags(t *testing.T) {
	define := func(snippet string) (jobdefs.Change, error) {
		fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var d defineFlags
		d.register(fs)
		if err := fs.Parse([]string{"-f", "-", "--schedule", "@every 1h", "--command", "true"}); err != nil {
			t.Fatal(err)
		}
		c := jobdefs.Change{Op: jobdefs.Create, Job: "x"}
		return c, d.define(&c, "", strings.NewReader(snippet))
	}
	c, err := define("shards: 3\n")
	if err != nil || c.Job != "x" || !strings.Contains(c.Def, `"shards":3`) || !strings.Contains(c.Def, `"schedule":"@every 1h"`) {
		t.Errorf("snippet completed by the flags and JOB: %+v, %v", c, err)
	}
	if _, err := define("shards: 3\ntimeout: 10x\n"); err == nil || !strings.Contains(err.Error(), "stdin:2") || strings.Contains(err.Error(), "missing") {
		t.Errorf("snippet with a mistake of its own: %v, want it at stdin:2 and nothing missing", err)
	}
}

// jobs create -f x.yaml --command true, where neither the snippet nor JOB
// names the job, said "flags:1: name: missing": a line of the flags, which
// have no lines and no name flag. It says the job needs a name and where
// to give it; a key missing too is told with where it can be given.
func TestDefineMissingNameSaysWhereToGiveIt(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/x.yaml"
	if err := os.WriteFile(file, []byte("shards: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run([]string{"jobs", "create", "-f", file, "--command", "true", "--store", "sqlite://" + dir + "/db"}, strings.NewReader(""), &stdout, &stderr)
	msg := stderr.String()
	if code != 64 || strings.Contains(msg, "flags:") || !strings.Contains(msg, "the job has no name: give it as the JOB argument") ||
		!strings.Contains(msg, "name: in "+file) || !strings.Contains(msg, "schedule: missing") || !strings.Contains(msg, "in "+file+" or with --schedule") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 64 saying the job needs a name (JOB or name: in the file), schedule missing with where to give it, no flags:", code, msg)
	}
	// -f alone, without a name: the same hint, not "x.yaml:1: name: missing".
	if err := os.WriteFile(file, []byte("schedule: \"@every 1m\"\ncommand: [\"true\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	code = run([]string{"jobs", "create", "-f", file, "--store", "sqlite://" + dir + "/db"}, strings.NewReader(""), &stdout, &stderr)
	if msg := stderr.String(); code != 64 || !strings.Contains(msg, "the job has no name: give it as the JOB argument") || !strings.Contains(msg, "name: in "+file) {
		t.Errorf("-f alone: exit %d, stderr:\n%s\nwant exit 64 saying to give the name as JOB or name: in the file", code, msg)
	}
}
