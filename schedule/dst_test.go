package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The golden tables: the UTC instants a schedule fires at around the
// daylight-saving changes of four zones, worked out by hand from the zone
// rules (and checked against an independent rule-by-rule reference in
// TestNextMatchesReference).
//
//	America/New_York     2025-03-09 02:00 EST → 03:00 EDT (07:00Z); 2025-11-02 02:00 EDT → 01:00 EST (06:00Z)
//	Europe/Berlin        2025-03-30 02:00 CET → 03:00 CEST (01:00Z); 2025-10-26 03:00 CEST → 02:00 CET (01:00Z)
//	Australia/Lord_Howe  2025-10-05 02:00 +10:30 → 02:30 +11 (2025-10-04 15:30Z); 2025-04-06 02:00 +11 → 01:30 +10:30 (2025-04-05 15:00Z)
//	America/Sao_Paulo    2018-11-04 00:00 -03 → 01:00 -02 (03:00Z); 2019-02-17 00:00 -02 → 2019-02-16 23:00 -03 (02:00Z); no DST since 2019
var golden = []struct {
	name, zone, spec, from string
	want                   []string
}{
	// New York, spring forward: 02:xx does not exist.
	{"NY gap time runs an hour later", "America/New_York", "30 2 * * *", "2025-03-08T00:00:00-05:00",
		[]string{"2025-03-08T07:30:00Z", "2025-03-09T07:30:00Z", "2025-03-10T06:30:00Z"}},
	{"NY gap start runs at the change", "America/New_York", "0 2 * * *", "2025-03-08T12:00:00-05:00",
		[]string{"2025-03-09T07:00:00Z", "2025-03-10T06:00:00Z"}},
	{"NY hourly through the gap", "America/New_York", "0 * * * *", "2025-03-09T00:30:00-05:00",
		[]string{"2025-03-09T06:00:00Z", "2025-03-09T07:00:00Z", "2025-03-09T08:00:00Z"}},
	{"NY every half hour of 2am", "America/New_York", "*/30 2 * * *", "2025-03-09T00:00:00-05:00",
		[]string{"2025-03-09T07:00:00Z", "2025-03-09T07:30:00Z", "2025-03-10T06:00:00Z", "2025-03-10T06:30:00Z"}},
	{"NY gap tick meeting a real tick runs once", "America/New_York", "30 2,3 * * *", "2025-03-09T00:00:00-05:00",
		[]string{"2025-03-09T07:30:00Z", "2025-03-10T06:30:00Z", "2025-03-10T07:30:00Z"}},
	// New York, fall back: 01:xx happens twice.
	{"NY repeated time runs once", "America/New_York", "30 1 * * *", "2025-11-01T00:00:00-04:00",
		[]string{"2025-11-01T05:30:00Z", "2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"}},
	{"NY hourly runs in both passes", "America/New_York", "0 * * * *", "2025-11-02T00:00:00-04:00",
		[]string{"2025-11-02T05:00:00Z", "2025-11-02T06:00:00Z", "2025-11-02T07:00:00Z"}},
	{"NY fixed hour every half hour runs once", "America/New_York", "*/30 1 * * *", "2025-11-02T00:00:00-04:00",
		[]string{"2025-11-02T05:00:00Z", "2025-11-02T05:30:00Z", "2025-11-03T06:00:00Z", "2025-11-03T06:30:00Z"}},
	{"NY time after the repeat", "America/New_York", "0 2 * * *", "2025-11-01T12:00:00-04:00",
		[]string{"2025-11-02T07:00:00Z", "2025-11-03T07:00:00Z"}},
	{"NY seconds field", "America/New_York", "15 30 1 * * *", "2025-11-02T00:00:00-04:00",
		[]string{"2025-11-02T05:30:15Z", "2025-11-03T06:30:15Z"}},

	// Berlin.
	{"Berlin gap time", "Europe/Berlin", "30 2 * * *", "2025-03-29T00:00:00+01:00",
		[]string{"2025-03-29T01:30:00Z", "2025-03-30T01:30:00Z", "2025-03-31T00:30:00Z"}},
	{"Berlin first time after the gap", "Europe/Berlin", "0 3 * * *", "2025-03-29T12:00:00+01:00",
		[]string{"2025-03-30T01:00:00Z", "2025-03-31T01:00:00Z"}},
	{"Berlin twice hourly through the gap", "Europe/Berlin", "15,45 * * * *", "2025-03-30T01:00:00+01:00",
		[]string{"2025-03-30T00:15:00Z", "2025-03-30T00:45:00Z", "2025-03-30T01:15:00Z", "2025-03-30T01:45:00Z", "2025-03-30T02:15:00Z"}},
	{"Berlin repeated time runs once", "Europe/Berlin", "30 2 * * *", "2025-10-25T12:00:00+02:00",
		[]string{"2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"}},
	{"Berlin hourly runs in both passes", "Europe/Berlin", "30 * * * *", "2025-10-26T00:00:00+02:00",
		[]string{"2025-10-25T22:30:00Z", "2025-10-25T23:30:00Z", "2025-10-26T00:30:00Z", "2025-10-26T01:30:00Z", "2025-10-26T02:30:00Z"}},
	{"Berlin seconds in the repeated hour", "Europe/Berlin", "30 59 2 * * *", "2025-10-26T00:00:00+02:00",
		[]string{"2025-10-26T00:59:30Z", "2025-10-27T01:59:30Z"}},
	{"Berlin midnight", "Europe/Berlin", "@daily", "2025-10-25T12:00:00+02:00",
		[]string{"2025-10-25T22:00:00Z", "2025-10-26T23:00:00Z"}},

	// Lord Howe: the change is 30 minutes.
	{"Lord Howe gap time runs 30 minutes later", "Australia/Lord_Howe", "15 2 * * *", "2025-10-04T00:00:00+10:30",
		[]string{"2025-10-03T15:45:00Z", "2025-10-04T15:45:00Z", "2025-10-05T15:15:00Z"}},
	{"Lord Howe hourly keeps its 02:00 tick", "Australia/Lord_Howe", "0 * * * *", "2025-10-05T00:30:00+10:30",
		[]string{"2025-10-04T14:30:00Z", "2025-10-04T15:30:00Z", "2025-10-04T16:00:00Z", "2025-10-04T17:00:00Z"}},
	{"Lord Howe quarter hours through the gap", "Australia/Lord_Howe", "*/15 * * * *", "2025-10-05T01:45:00+10:30",
		[]string{"2025-10-04T15:30:00Z", "2025-10-04T15:45:00Z", "2025-10-04T16:00:00Z"}},
	{"Lord Howe repeated time runs once", "Australia/Lord_Howe", "45 1 * * *", "2025-04-04T12:00:00+11:00",
		[]string{"2025-04-04T14:45:00Z", "2025-04-05T14:45:00Z", "2025-04-06T15:15:00Z"}},
	{"Lord Howe quarter hours in both passes", "Australia/Lord_Howe", "*/15 * * * *", "2025-04-06T01:15:00+11:00",
		[]string{"2025-04-05T14:30:00Z", "2025-04-05T14:45:00Z", "2025-04-05T15:00:00Z", "2025-04-05T15:15:00Z", "2025-04-05T15:30:00Z"}},
	{"Lord Howe time after the repeat", "Australia/Lord_Howe", "0 2 * * *", "2025-04-05T12:00:00+11:00",
		[]string{"2025-04-05T15:30:00Z", "2025-04-06T15:30:00Z"}},
	{"Lord Howe time before the repeat", "Australia/Lord_Howe", "15 1 * * *", "2025-04-05T12:00:00+11:00",
		[]string{"2025-04-05T14:15:00Z", "2025-04-06T14:45:00Z"}},

	// São Paulo: midnight did not exist on the day DST started.
	{"Sao Paulo missing midnight", "America/Sao_Paulo", "0 0 * * *", "2018-11-02T12:00:00-03:00",
		[]string{"2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"}},
	{"Sao Paulo half past a missing midnight", "America/Sao_Paulo", "30 0 * * *", "2018-11-03T12:00:00-03:00",
		[]string{"2018-11-04T03:30:00Z", "2018-11-05T02:30:00Z"}},
	{"Sao Paulo weekly on the missing midnight", "America/Sao_Paulo", "@weekly", "2018-10-30T00:00:00-03:00",
		[]string{"2018-11-04T03:00:00Z", "2018-11-11T02:00:00Z"}},
	{"Sao Paulo repeated 23:30 runs once", "America/Sao_Paulo", "30 23 * * *", "2019-02-15T12:00:00-02:00",
		[]string{"2019-02-16T01:30:00Z", "2019-02-17T01:30:00Z", "2019-02-18T02:30:00Z"}},
	{"Sao Paulo midnight after the repeat", "America/Sao_Paulo", "@daily", "2019-02-15T12:00:00-02:00",
		[]string{"2019-02-16T02:00:00Z", "2019-02-17T03:00:00Z", "2019-02-18T03:00:00Z"}},
	{"Sao Paulo hourly in both passes", "America/Sao_Paulo", "0 * * * *", "2019-02-16T22:30:00-02:00",
		[]string{"2019-02-17T01:00:00Z", "2019-02-17T02:00:00Z", "2019-02-17T03:00:00Z"}},
	{"Sao Paulo no DST in 2025", "America/Sao_Paulo", "0 0 * * *", "2025-11-01T12:00:00-03:00",
		[]string{"2025-11-02T03:00:00Z", "2025-11-03T03:00:00Z"}},
	{"Sao Paulo no DST in 2026", "America/Sao_Paulo", "0 0 * * *", "2026-02-14T12:00:00-03:00",
		[]string{"2026-02-15T03:00:00Z", "2026-02-16T03:00:00Z"}},

	// The zone given in the spec.
	{"CRON_TZ prefix", "", "CRON_TZ=Europe/Berlin 30 2 * * *", "2025-03-29T00:00:00+01:00",
		[]string{"2025-03-29T01:30:00Z", "2025-03-30T01:30:00Z", "2025-03-31T00:30:00Z"}},
}

func TestDSTGolden(t *testing.T) {
	for _, tc := range golden {
		t.Run(tc.name, func(t *testing.T) {
			var loc *time.Location
			if tc.zone != "" {
				var err error
				if loc, err = time.LoadLocation(tc.zone); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Parse(tc.spec, loc)
			if err != nil {
				t.Fatal(err)
			}
			from, err := time.Parse(time.RFC3339, tc.from)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for at := from; len(got) < len(tc.want); {
				at = s.Next(at)
				if at.IsZero() {
					break
				}
				if at.Location() != time.UTC || at.Nanosecond() != 0 {
					t.Fatalf("Next returned %v: want UTC whole seconds", at)
				}
				got = append(got, at.Format(time.RFC3339))
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("%q in %s from %s:\n got  %v\n want %v", tc.spec, tc.zone, tc.from, got, tc.want)
			}
		})
	}
}

// refIsTick decides whether instant i (a whole second) is a tick of c by the
// documented rules, stated per instant rather than per zone period as Next
// computes them: it checks Next against a second reading of the rules.
func refIsTick(c *cronSchedule, i time.Time) bool {
	match := func(w time.Time) bool {
		return has(c.second, w.Second()) && has(c.minute, w.Minute()) && has(c.hour, w.Hour()) &&
			has(c.month, int(w.Month())) && c.dayMatches(w)
	}
	offsetAt := func(t time.Time) time.Duration {
		_, off := t.In(c.loc).Zone()
		return time.Duration(off) * time.Second
	}
	o := offsetAt(i)
	// The offsets in force near i: transitions are months apart.
	near := []time.Duration{offsetAt(i.Add(-3 * time.Hour)), o, offsetAt(i.Add(3 * time.Hour))}
	shows := func(w time.Time, o time.Duration) bool { return offsetAt(w.Add(-o)) == o }
	w := wall(i, o)
	if match(w) {
		if c.everyHour {
			return true
		}
		shownBefore := false
		for _, p := range near {
			if p != o && shows(w, p) && w.Add(-p).Before(i) {
				shownBefore = true
			}
		}
		if !shownBefore {
			return true
		}
	}
	// A wall time the clock skipped runs at the instant it has under the
	// offset before the change.
	before := near[0]
	if before < o {
		g := wall(i, before)
		exists := false
		for _, p := range near {
			if shows(g, p) {
				exists = true
			}
		}
		if !exists && match(g) {
			return true
		}
	}
	return false
}

// TestNextMatchesReference compares Next with refIsTick, minute by minute,
// over two days around every change in the golden zones, for random specs.
func TestNextMatchesReference(t *testing.T) {
	changes := map[string][]string{
		"America/New_York":    {"2025-03-09T07:00:00Z", "2025-11-02T06:00:00Z"},
		"Europe/Berlin":       {"2025-03-30T01:00:00Z", "2025-10-26T01:00:00Z"},
		"Australia/Lord_Howe": {"2025-10-04T15:30:00Z", "2025-04-05T15:00:00Z"},
		"America/Sao_Paulo":   {"2018-11-04T03:00:00Z", "2019-02-17T02:00:00Z"},
	}
	minutes := []string{"*", "0", "30", "*/15", "0,30", "45", "10-20/5", "59"}
	hours := []string{"*", "0", "1", "2", "3", "23", "0-3", "*/2", "1,2,3", "22-23"}
	doms := []string{"*", "*", "4", "17", "1-7"}
	dows := []string{"*", "*", "0", "1-5", "SAT,SUN"}
	rng := rand.New(rand.NewPCG(1, 2))
	specs := []string{"0 * * * *", "30 2 * * *", "*/15 * * * *", "0 0 * * *"}
	for range 24 {
		specs = append(specs, fmt.Sprintf("%s %s %s * %s", minutes[rng.IntN(len(minutes))], hours[rng.IntN(len(hours))], doms[rng.IntN(len(doms))], dows[rng.IntN(len(dows))]))
	}
	for zone, at := range changes {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range at {
			change, _ := time.Parse(time.RFC3339, a)
			from, to := change.Add(-26*time.Hour), change.Add(26*time.Hour)
			for _, spec := range specs {
				s := MustParse(spec, loc).(*cronSchedule)
				var want, got []time.Time
				for i := from.Add(time.Minute); !i.After(to); i = i.Add(time.Minute) {
					if refIsTick(s, i) {
						want = append(want, i)
					}
				}
				for i := s.Next(from); !i.IsZero() && !i.After(to); i = s.Next(i) {
					got = append(got, i)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%q in %s around %s:\n got  %v\n want %v", spec, zone, a, got, want)
				}
			}
		}
	}
}
