package schedule

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/zonetest"
)

func zone(t testing.TB, name, source string) *time.Location {
	t.Helper()
	loc, err := zonetest.Load(name, source)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// Go's embedded tzdata lists Berlin's transitions up to 2027 only and
// derives the rest from the zone's rule; near the end of 2028 the old tick
// arithmetic found no next tick.
func TestNextBerlinLastDayOfLeapYearEmbeddedTzdata(t *testing.T) {
	for _, source := range []string{"embedded", "system"} {
		s := MustParse("30 9 * * *", zone(t, "Europe/Berlin", source))
		at := mustTime(t, "2028-12-30T12:00:00Z")
		var got []string
		for range 3 {
			at = s.Next(at)
			got = append(got, at.Format(time.RFC3339))
		}
		want := "2028-12-31T08:30:00Z 2029-01-01T08:30:00Z 2029-01-02T08:30:00Z"
		if strings.Join(got, " ") != want {
			t.Errorf("%s tzdata: ticks %v, want %s", source, got, want)
		}
	}
}

// randomSpec returns a five-field spec that fires, from pieces chosen to
// meet daylight saving time (hours 0–3, every hour, steps) and rare days.
func randomSpec(rng *rand.Rand) string {
	pick := func(opts ...string) string { return opts[rng.IntN(len(opts))] }
	for {
		s := randomFields(pick)
		if !strings.Contains(s, " 31 2 ") && !strings.Contains(s, " 31 2-3 ") || !strings.HasSuffix(s, " *") {
			return s
		}
	}
}

func randomFields(pick func(...string) string) string {
	return strings.Join([]string{
		pick("*", "0", "30", "*/15", "0,30", "59", "10-20/5", "7", "*/7"),
		pick("*", "0", "1", "2", "3", "23", "0-3", "*/2", "1,2,3", "22-23", "9-17"),
		pick("*", "*", "1", "15", "29", "31", "1-7", "*/10", "28-31", "13"),
		pick("*", "*", "*", "2", "JAN,JUL", "*/3", "12", "2-3"),
		pick("*", "*", "0", "7", "1-5", "SAT,SUN", "MON", "5-7"),
	}, " ")
}

// TestNextProperties: in every zone of both tz data sources, from instants
// over 2020–2200 (many near offset changes and year ends), Next is never
// zero, strictly increasing, a whole second in UTC, a tick by the rules
// (refIsTick), and when it is less than three hours on, no whole minute in
// between is a tick.
func TestNextProperties(t *testing.T) {
	zones, err := zonetest.All()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	var calls, failures, parseFailures int
	started := time.Now()
	for _, z := range zones {
		for range 3 {
			spec := randomSpec(rng)
			s, err := Parse(spec, z.Loc)
			if err != nil {
				if parseFailures++; parseFailures <= 5 {
					t.Errorf("Parse(%q): %v", spec, err)
				}
				continue
			}
			c := s.(*cronSchedule)
			for _, from := range zonetest.Instants(rng, z.Loc, 6) {
				at := from
				for range 3 {
					n := s.Next(at)
					calls++
					bad := ""
					switch {
					case n.IsZero():
						bad = "zero"
					case !n.After(at):
						bad = "not after"
					case n.Nanosecond() != 0 || n.Location() != time.UTC:
						bad = "not a whole second in UTC"
					case !refIsTick(c, n):
						bad = "not a tick by the rules"
					}
					if bad == "" && n.Sub(at) < 3*time.Hour {
						for m := at.Truncate(time.Minute).Add(time.Minute); m.Before(n); m = m.Add(time.Minute) {
							if refIsTick(c, m) {
								bad = fmt.Sprintf("skips the tick at %v", m)
								break
							}
						}
					}
					if bad != "" {
						failures++
						if failures <= 20 {
							t.Errorf("%s %q: Next(%v) = %v: %s", z, spec, at, n, bad)
						}
						break
					}
					at = n
				}
			}
		}
	}
	t.Logf("%d zones, %d Next calls, %d failures, %d specs not parsed, %v", len(zones), calls, failures, parseFailures, time.Since(started))
}

// TestParsePathologicalInputsAreCheap: inputs up to 1 KB parse or fail
// within milliseconds (all of them within a second on a busy machine), and
// every error names a field.
func TestParsePathologicalInputsAreCheap(t *testing.T) {
	fill := func(item string, n int) string {
		return strings.TrimSuffix(strings.Repeat(item, n), ",")
	}
	field := func(f string) string { return f + " * * * *" }
	inputs := []string{
		field(strings.Repeat(",", MaxSpecLength-8)),
		"0 " + strings.Repeat(",", MaxSpecLength-10) + " * * *",
		"0 0 0 " + strings.Repeat(",", MaxSpecLength-12) + " * *",
		"* * * * " + strings.Repeat(",", MaxSpecLength-8),
		strings.Repeat(",", 200) + " " + strings.Repeat(",", 200) + " " + strings.Repeat(",", 200) + " " + strings.Repeat(",", 200) + " " + strings.Repeat(",", 200),
		field(fill("1,", (MaxSpecLength-8)/2)),
		field(fill("0-59,", (MaxSpecLength-8)/5)),
		field(fill("*/1,", (MaxSpecLength-8)/4)),
		field(strings.Repeat("0", MaxSpecLength-9) + "1"),
		field(strings.Repeat("9", MaxSpecLength-8)),
		field("*/" + strings.Repeat("9", MaxSpecLength-10)),
		field(strings.Repeat("-", MaxSpecLength-8)),
		field(strings.Repeat("/", MaxSpecLength-8)),
		"0 0 31 " + fill("2,4,6,9,11,", 90) + " *",
		"0 0 30,31 " + fill("2,", 400) + " *",
		"0 0 " + fill("30,", 300) + " 2 *",
		strings.Repeat("* ", MaxSpecLength/2),
		strings.Repeat(" ", MaxSpecLength-9) + "* * * * *",
		"CRON_TZ=" + strings.Repeat("A", MaxSpecLength-18) + " * * * * *",
		strings.Repeat("CRON_TZ=UTC ", 80) + "* * * * *",
		"@every " + strings.Repeat("9", MaxSpecLength-8) + "s",
		"@every " + strings.Repeat("1h", (MaxSpecLength-7)/2),
		"0 0 0 29 2 " + fill("1,", 300),
		", * * * * *", "* , * * * *", ",,, * * * *", ", * * * *",
	}
	// Fields made only of commas: each error names its field.
	commaFields := map[string]string{
		", * * * * *": "second", "* , * * * *": "minute", "* * , * * *": "hour",
		"* * * , * *": "day of month", "* * * * , *": "month", "* * * * * ,": "day of week",
		",,, * * * *": "minute", ", , , , ,": "minute", "0 0 ,, * *": "day of month",
	}
	for in, field := range commaFields {
		_, err := Parse(in, nil)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Field != field {
			t.Errorf("Parse(%q) = %v, want an error naming the %s field", in, err, field)
		}
	}
	started := time.Now()
	var slowest time.Duration
	for _, in := range inputs {
		if len(in) > MaxSpecLength {
			t.Fatalf("input of %d bytes", len(in))
		}
		t0 := time.Now()
		s, err := Parse(in, nil)
		if err == nil {
			s.Next(mustTime(t, "2025-01-01T00:00:00Z"))
		}
		d := time.Since(t0)
		slowest = max(slowest, d)
		var pe *ParseError
		if err != nil && (!errors.As(err, &pe) || pe.Field == "" || !strings.Contains(err.Error(), pe.Field)) {
			t.Errorf("Parse(%.40q…) = %v: names no field", in, err)
		}
		if d > 200*time.Millisecond {
			t.Errorf("Parse(%.40q…) took %v", in, d)
		}
	}
	total := time.Since(started)
	t.Logf("%d inputs in %v, the slowest %v", len(inputs), total, slowest)
	if total > time.Second {
		t.Errorf("%d inputs took %v, want under 1s", len(inputs), total)
	}
}

// TestDayFieldsAsInVixieCron: when both day fields are restricted a day
// matches either; a field starting with * counts as unrestricted, and then
// a day must match both; day-of-week 7 is Sunday.
func TestDayFieldsAsInVixieCron(t *testing.T) {
	cases := []struct {
		spec string
		want string // days of June 2025 (June 1st is a Sunday)
	}{
		{"0 0 13 * FRI", "6 13 20 27"},
		{"0 0 1-3 * MON", "1 2 3 9 16 23 30"},
		{"0 0 */2 * FRI", "13 27"},     // dom starts with *: AND
		{"0 0 */10 * SUN,WED", "1 11"}, // {1,11,21,31} and Sunday or Wednesday
		{"0 0 1-10 * */3", "1 4 7 8"},  // dow starts with *: {0,3,6}, AND
		{"0 0 15 * *,MON", "15"},       // starts with *: AND with every weekday
		{"0 0 * * 7", "1 8 15 22 29"},  // 7 is Sunday
		{"0 0 * * 5-7", "1 6 7 8 13 14 15 20 21 22 27 28 29"},
		{"0 0 * * SAT-7", "1 7 8 14 15 21 22 28 29"},
		{"0 0 ? * MON", "2 9 16 23 30"}, // ? is *
		{"0 0 30 * ?", "30"},
		{"0 0 0 1,30 * 0", "1 8 15 22 29 30"},
	}
	for _, c := range cases {
		s, err := Parse(c.spec, nil)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.spec, err)
			continue
		}
		var days []string
		for at := mustTime(t, "2025-05-31T23:59:59Z"); ; {
			at = s.Next(at)
			if at.IsZero() || at.Month() != time.June {
				break
			}
			days = append(days, fmt.Sprint(at.Day()))
		}
		if got := strings.Join(days, " "); got != c.want {
			t.Errorf("%q in June 2025: days %s, want %s", c.spec, got, c.want)
		}
	}
}

// TestNextFindsRareDays: ticks that are years apart are found, in zones
// whose offsets come from the rule in those years too.
func TestNextFindsRareDays(t *testing.T) {
	cases := []struct{ zone, spec, from, want string }{
		{"UTC", "0 0 29 2 *", "2096-03-01T00:00:00Z", "2104-02-29T00:00:00Z"},     // 2100 is no leap year
		{"UTC", "0 0 */28 2 MON", "2027-02-02T00:00:00Z", "2038-02-01T00:00:00Z"}, // Feb 1 or 29, a Monday
		{"Europe/Berlin", "0 0 */28 2 MON", "2083-02-02T00:00:00Z", "2094-02-01T00:00:00+01:00"},
		{"Europe/Berlin", "30 2 29 2 *", "2028-12-31T23:30:00Z", "2032-02-29T02:30:00+01:00"},
		{"America/New_York", "0 0 29 2 *", "2099-12-31T12:00:00Z", "2104-02-29T00:00:00-05:00"},
		{"Australia/Lord_Howe", "59 23 31 12 *", "2150-12-31T13:00:00Z", "2151-12-31T23:59:00+11:00"},
	}
	for _, c := range cases {
		for _, source := range []string{"embedded", "system"} {
			s := MustParse(c.spec, zone(t, c.zone, source))
			if got := s.Next(mustTime(t, c.from)); !got.Equal(mustTime(t, c.want)) {
				t.Errorf("%q in %s (%s) after %s = %v, want %s", c.spec, c.zone, source, c.from, got, c.want)
			}
		}
	}
}

// wall returns the wall-clock reading of instant t at offset, as a UTC
// time (refIsTick's civil time).
func wall(t time.Time, offset time.Duration) time.Time { return t.UTC().Add(offset) }
