package main

import (
	"flag"
	"io"
	"testing"
	"time"
)

// The flag package says `invalid value "10" for flag -ttl: parse error`
// for a duration without its unit, which names neither the flag as the
// help spells it nor what is wanted.
func TestFlagErrorSaysWhatIsWanted(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--ttl", "10"}, `--ttl "10": want a duration such as 300ms, 10s or 1h30m (a number needs its unit)`},
		{[]string{"--permits", "many"}, `--permits "many": want a whole number`},
		{[]string{"--shared=maybe"}, `--shared "maybe": want true or false`},
		{[]string{"--bogus"}, `unknown flag --bogus`},
		{[]string{"--ttl"}, `--ttl needs a value`},
		{[]string{"--store", "redis://u:pw-secret@h:1", "--ttl", "redis://u:pw-secret@h:1"}, `--ttl "redis://u:xxxxx@h:1": want a duration such as 300ms, 10s or 1h30m (a number needs its unit)`},
	} {
		fs := flag.NewFlagSet("exec", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Duration("ttl", time.Second, "")
		fs.Int("permits", 0, "")
		fs.Bool("shared", false, "")
		fs.String("store", "", "")
		err := fs.Parse(tt.args)
		if err == nil {
			t.Fatalf("%q: no error", tt.args)
		}
		if got := flagError(fs, err).Error(); got != tt.want {
			t.Errorf("%q:\n got  %s\n want %s", tt.args, got, tt.want)
		}
	}
}
