package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
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
