package crosscheck

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/tasklock/tasklock/internal/zonetest"
	"github.com/tasklock/tasklock/schedule"
)

// randomSpec returns a spec in the part of cron syntax where schedule and
// robfig/cron mean the same: day-of-week 0–6, and the day fields combined
// the same way (robfig counts a day field as unrestricted when an item is
// * or ?, Vixie cron when the field starts with *, so "*/2" goes with a
// "*" in the other day field only).
func randomSpec(rng *rand.Rand) string {
	pick := func(opts ...string) string { return opts[rng.IntN(len(opts))] }
	if rng.IntN(20) == 0 {
		return pick("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
	}
	dom := pick("*", "*", "?", "1", "15", "31", "1-7", "10-20/5", "29", "28-31", "13", "2,9,30", "*/2", "*/10")
	dow := pick("*", "*", "?", "0", "1-5", "SAT,SUN", "MON", "2/2", "5", "wed-fri", "*/2")
	unrestricted := func(f string) bool { return f == "*" || f == "?" }
	switch {
	case strings.HasPrefix(dom, "*/") && !unrestricted(dow):
		dow = "*"
	case strings.HasPrefix(dow, "*/") && !unrestricted(dom):
		dom = "*"
	}
	fields := []string{
		pick("*", "0", "*/5", "7,37", "10-50/20", "59", "15-20", "*/13"),
		pick("*", "0", "2", "9", "*/3", "8-18", "1,13", "23", "6-22/4", "1-3"),
		dom,
		pick("*", "*", "*", "JAN", "2", "*/3", "3-10", "FEB,AUG", "12", "dec", "11-12"),
		dow,
	}
	if rng.IntN(4) == 0 {
		fields = append([]string{pick("0", "*/15", "30", "0,30", "5-10", "*", "59")}, fields...)
	}
	return strings.Join(fields, " ")
}

var robfigParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// TestNextAgreesWithRobfig compares schedule's next tick with robfig/cron's
// for random specs in every zone of both tz data sources (the system's
// zone files and Go's embedded tzdata), from instants spread over
// 2020–2200, a third of them near the zone's offset changes and a third
// near year ends. The two differ by design within a day or two of an
// offset change (schedule runs a skipped time after the change and a
// repeated one once; robfig does neither reliably), so a difference there
// is counted, not failed; anywhere else it fails.
func TestNextAgreesWithRobfig(t *testing.T) {
	zones, err := zonetest.All()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2020, 2200))
	var compared, agreed, nearDST, robfigGaveUp, failures int
	specs := map[string]bool{}
	started := time.Now()
	for _, z := range zones {
		for range 4 {
			spec := randomSpec(rng)
			specs[spec] = true
			ours, err := schedule.Parse(spec, z.Loc)
			if err != nil {
				if strings.Contains(err.Error(), "never fires") {
					continue
				}
				t.Fatalf("schedule.Parse(%q): %v", spec, err)
			}
			sched, err := robfigParser.Parse(spec)
			if err != nil {
				t.Fatalf("cron.Parse(%q): %v", spec, err)
			}
			theirs := sched.(*cron.SpecSchedule)
			theirs.Location = z.Loc
			for _, from := range zonetest.Instants(rng, z.Loc, 6) {
				at := from
				for range 3 {
					got, want := ours.Next(at), theirs.Next(at).UTC()
					if got.IsZero() {
						failures++
						t.Errorf("%s %q: Next(%v) is zero", z, spec, at)
						break
					}
					if want.IsZero() { // robfig looks five years ahead at most
						robfigGaveUp++
						break
					}
					compared++
					switch {
					case got.Equal(want):
						agreed++
					case zonetest.NearChange(z.Loc, at, 48*time.Hour) || zonetest.NearChange(z.Loc, got, 48*time.Hour) || zonetest.NearChange(z.Loc, want, 48*time.Hour):
						nearDST++
					default:
						if failures++; failures <= 20 {
							t.Errorf("%s %q: Next(%v) = %v, robfig/cron says %v", z, spec, at, got, want)
						}
					}
					at = got
				}
			}
		}
	}
	t.Logf("%d zones, %d specs, %d ticks compared: %d agree, %d differ near an offset change, %d past robfig's five years, %d failures, %v",
		len(zones), len(specs), compared, agreed, nearDST, robfigGaveUp, failures, time.Since(started))
	if compared < 50000 || agreed < compared*9/10 {
		t.Errorf("only %d of %d ticks agree", agreed, compared)
	}
}
