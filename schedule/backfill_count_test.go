package schedule

import (
	"testing"
	"time"
)

// countTicks counts a range's ticks no further than its limit, unless it
// can count them by arithmetic (an @every schedule's): then exactly.
func TestCountTicks(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	from, to := now.Add(-25*time.Hour), now.Add(-time.Hour)
	for _, c := range []struct {
		spec      string
		from, to  time.Time
		limit, n  int
		wantExact bool
	}{
		{"* * * * * *", from, to, 11, 11, false},
		{"* * * * * *", now.Add(-10 * time.Second), now, 11, 11, true}, // 11 ticks, none past the limit
		{"* * * * * *", now.Add(-10 * time.Second), now, 100, 11, true},
		{"@every 1s", now.Add(-10 * time.Second), now, 5, 11, true},
		{"@every 7s", now.Add(-time.Hour), now, 5, 514, true},
		{"@every 1h", now.Add(time.Second), now.Add(29 * time.Minute), 5, 0, true},
	} {
		sched := MustParse(c.spec, time.UTC)
		n, exact := countTicks(sched, c.from.Add(-time.Nanosecond), c.to, c.limit)
		walked := 0
		for t := sched.Next(c.from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(c.to) && walked <= c.limit; t = sched.Next(t) {
			walked++
		}
		if exact && n != walked && walked <= c.limit {
			t.Errorf("%s: counted %d, walked %d", c.spec, n, walked)
		}
		if n != c.n || exact != c.wantExact {
			t.Errorf("countTicks(%s, %v, %v, %d) = %d, %v; want %d, %v", c.spec, c.from, c.to, c.limit, n, exact, c.n, c.wantExact)
		}
	}
}
