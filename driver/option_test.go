package driver

import (
	"errors"
	"testing"
)

func TestOptionErrorMessage(t *testing.T) {
	inner := errors.New("inner")
	for _, tc := range []struct {
		e    *OptionError
		want string
	}{
		{&OptionError{Pkg: "tasklock", Field: "ObtainOptions.TTL", Reason: "1ms is below the minimum 10ms"},
			"tasklock: invalid ObtainOptions.TTL: 1ms is below the minimum 10ms"},
		{&OptionError{Pkg: "pgstore", Field: "Options.Mode", Value: "x", Reason: `want "lease" or "connection"`},
			`pgstore: invalid Options.Mode "x": want "lease" or "connection"`},
		{&OptionError{Pkg: "schedule", Job: "nightly", Field: "Job.Schedule", Reason: "empty", Err: inner},
			`schedule: job "nightly": invalid Job.Schedule: empty`},
		{&OptionError{Pkg: "zkstore", Field: "Options.Root", Value: "/a\n", Err: inner},
			`zkstore: invalid Options.Root "/a\n": inner`},
		{&OptionError{Field: "key", Reason: "empty"}, "invalid key: empty"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if (tc.e.Err != nil) != errors.Is(tc.e, inner) {
			t.Errorf("errors.Is(%q, Err) = %v", tc.want, !(tc.e.Err != nil))
		}
	}
}
