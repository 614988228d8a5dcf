package schedule

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestParseAccepts(t *testing.T) {
	from := "2025-06-10T10:00:00Z" // a Tuesday
	cases := []struct{ spec, want string }{
		{"*/5 * * * *", "2025-06-10T10:05:00Z"},
		{"0 30 9 * * MON-FRI", "2025-06-11T09:30:00Z"},
		{"15 10 * * *", "2025-06-10T10:15:00Z"},
		{"30 * * * * *", "2025-06-10T10:00:30Z"},
		{"0 0 1 JAN *", "2026-01-01T00:00:00Z"},
		{"0 12 ? * SUN", "2025-06-15T12:00:00Z"},
		{"0 0 13 * FRI", "2025-06-13T00:00:00Z"}, // day-of-month OR day-of-week, as in cron
		{"0 0 29 2 *", "2028-02-29T00:00:00Z"},
		{"  0 11 * * *  ", "2025-06-10T11:00:00Z"},
		{"@hourly", "2025-06-10T11:00:00Z"},
		{"@daily", "2025-06-11T00:00:00Z"},
		{"@midnight", "2025-06-11T00:00:00Z"},
		{"@weekly", "2025-06-15T00:00:00Z"},
		{"@monthly", "2025-07-01T00:00:00Z"},
		{"@yearly", "2026-01-01T00:00:00Z"},
		{"@annually", "2026-01-01T00:00:00Z"},
		{"@every 1s", "2025-06-10T10:00:01Z"},
		{"@every 90m", "2025-06-10T10:30:00Z"}, // multiples of 90 minutes since the epoch
		{"@every 7s", "2025-06-10T10:00:06Z"},  // 1749549600 = 7·249935657 + 1
		{"TZ=America/New_York 0 9 * * *", "2025-06-10T13:00:00Z"},
		{"CRON_TZ=Asia/Kolkata 0 17 * * *", "2025-06-10T11:30:00Z"},
	}
	for _, c := range cases {
		s, err := Parse(c.spec, nil)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.spec, err)
			continue
		}
		if got := s.Next(mustTime(t, from)).Format(time.RFC3339); got != c.want {
			t.Errorf("Parse(%q).Next(%s) = %s, want %s", c.spec, from, got, c.want)
		}
		if s.String() != c.spec {
			t.Errorf("String() = %q, want %q", s.String(), c.spec)
		}
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct{ spec, field, text string }{
		{"", "spec", "empty"},
		{"* * * *", "spec", "4 fields"},
		{"* * * * * * *", "spec", "7 fields"},
		{"61 * * * *", "minute", `invalid minute field "61"`},
		{"60 * * * * *", "second", `invalid second field "60"`},
		{"0 24 * * *", "hour", `invalid hour field "24"`},
		{"0 0 32 * *", "day of month", `invalid day of month field "32"`},
		{"0 0 * 13 *", "month", `invalid month field "13"`},
		{"0 0 * FOO *", "month", "FOO"},
		{"0 0 * * 8", "day of week", `invalid day of week field "8"`},
		{"1,,2 * * * *", "minute", `invalid minute field "1,,2" in "1,,2 * * * *": empty list item`},
		{"0 0 * JAN- *", "month", "missing value"},
		{"0 0 * * MON-FOO", "day of week", `"FOO" is not a number or a name (SUN–SAT)`},
		{"0 1-2-3 * * *", "hour", "not a number"},
		{"0 0 1/2/3 * *", "day of month", "step"},
		{"0 0 0 * * * *", "spec", "7 fields"},
		{"0 0 31 2,4 *", "spec", "never fires"},
		{"0 0 30 2 *,MON", "spec", "never fires"}, // starts with *: a day must match both
		{"CRON_TZ=Europe/Berlin CRON_TZ=Asia/Tokyo 0 * * * *", "time zone", "given twice"},
		{"TZ=Europe/Berlin CRON_TZ=Europe/Berlin 0 * * * *", "time zone", "given twice"},
		{"*/0 * * * *", "minute", "step"},
		{"5-1 * * * *", "minute", "beyond end"},
		{"0 0 30 2 *", "spec", "never fires"},
		{"@often", "descriptor", "unknown"},
		{"@every", "@every", "missing duration"},
		{"@every soon", "@every", "not a duration"},
		{"@every 500ms", "@every", "minimum of 1s"},
		{"@every 1.5s", "@every", "whole number of seconds"},
		{"TZ=Mars/Olympus 0 * * * *", "time zone", "Mars/Olympus"},
		{"TZ=../../etc/passwd 0 * * * *", "time zone", "contains"},
		{"TZ=Local 0 * * * *", "time zone", "name the zone"},
		{"CRON_TZ=Europe/Berlin", "spec", "empty"},
		{strings.Repeat("1", MaxSpecLength+1), "spec", "maximum"},
	}
	for _, c := range cases {
		_, err := Parse(c.spec, nil)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want a *ParseError", c.spec, err)
			continue
		}
		if pe.Field != c.field || !strings.Contains(err.Error(), c.text) || !strings.HasPrefix(err.Error(), "schedule: ") {
			t.Errorf("Parse(%q) = %q (field %q), want field %q and %q in the text", c.spec, err, pe.Field, c.field, c.text)
		}
	}
}

func TestEveryIsAlignedToTheEpoch(t *testing.T) {
	s := MustParse("@every 1h", mustLoc(t, "Asia/Kolkata")) // the zone does not matter
	for _, from := range []string{"2025-06-10T10:00:00Z", "2025-06-10T10:59:59.999Z", "1969-12-31T23:30:00Z"} {
		n := s.Next(mustTime(t, from))
		if n.Minute() != 0 || n.Second() != 0 || !n.After(mustTime(t, from)) || n.Sub(mustTime(t, from)) > time.Hour {
			t.Errorf("@every 1h after %s = %v", from, n)
		}
	}
	// Two nodes whose clocks differ compute the same ticks.
	a, b := mustTime(t, "2025-06-10T10:00:01Z"), mustTime(t, "2025-06-10T10:00:04Z")
	s7 := MustParse("@every 7s", nil)
	if !s7.Next(a).Equal(s7.Next(b)) {
		t.Errorf("@every 7s: %v and %v disagree", s7.Next(a), s7.Next(b))
	}
}

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var knownFields = []string{"spec", "second", "minute", "hour", "day of month", "month", "day of week", "@every", "descriptor", "time zone"}

// FuzzParse: Parse never panics, every error is a *ParseError naming a
// known field, and every schedule yields a next tick — never the zero
// Time — after instants in years whose offsets Go's embedded tzdata
// derives from the zone's rule, as increasing whole-second UTC ticks.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"* * * * *", "*/5 * * * *", "0 30 9 * * MON-FRI", "@every 10s", "@daily", "@every 1h30m",
		"TZ=Europe/Berlin 30 2 * * *", "CRON_TZ=Australia/Lord_Howe */15 * * * *", "0 0 29 2 *",
		"61 * * * *", "1-2-3 * * * *", "*/0 * * * *", "@every -1s", "TZ= * * * * *", "0 0 31 4 *",
		"? ? ? ? ?", "1,2,3/4 * * * *", "0 0 L * *", "@every 9223372036s", "0 0 * * 7",
		"30 9 * * *", "0 0 */28 2 MON", ", * * * * *", "0 0 30 2 MON", "59 23 31 12 *",
	} {
		f.Add(s)
	}
	berlin := zone(f, "Europe/Berlin", "embedded")
	refs := []time.Time{mustTime(f, "2025-10-26T00:30:00Z"), mustTime(f, "2028-12-30T12:00:00Z"), mustTime(f, "2099-12-31T23:59:59Z")}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec, berlin)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %v, not a *ParseError", spec, err)
			}
			if !slices.Contains(knownFields, pe.Field) || !strings.Contains(err.Error(), pe.Field) {
				t.Fatalf("Parse(%q) = %q: field %q not named", spec, err, pe.Field)
			}
			return
		}
		for _, at := range refs {
			for range 3 {
				n := s.Next(at)
				if n.IsZero() || !n.After(at) || n.Nanosecond() != 0 || n.Location() != time.UTC {
					t.Fatalf("%q: Next(%v) = %v", spec, at, n)
				}
				at = n
			}
		}
	})
}

func ExampleParse() {
	s, err := Parse("30 2 * * *", mustLocation("America/New_York"))
	if err != nil {
		panic(err)
	}
	at := time.Date(2025, 3, 8, 0, 0, 0, 0, time.UTC)
	for range 3 {
		at = s.Next(at)
		fmt.Println(at, "=", at.In(mustLocation("America/New_York")).Format("15:04 MST"))
	}
	_, err = Parse("61 * * * *", nil)
	fmt.Println(err)
	// Output:
	// 2025-03-08 07:30:00 +0000 UTC = 02:30 EST
	// 2025-03-09 07:30:00 +0000 UTC = 03:30 EDT
	// 2025-03-10 06:30:00 +0000 UTC = 02:30 EDT
	// schedule: invalid minute field "61" in "61 * * * *": 61 above the maximum 59
}

func mustLocation(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}
