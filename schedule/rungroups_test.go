package schedule

import (
	"testing"
	"time"
)

// A pass's claimed work reaches each job's run goroutine in claim order,
// grouped by job in the order of the jobs' first work, also when a job's
// works are not next to each other (a trigger request after the ticks);
// a goroutine appending to its works does not write over the next job's,
// and a reset keeps nothing of the pass before.
func TestRunGroupsSplit(t *testing.T) {
	a, b, c := &job{}, &job{}, &job{}
	t0 := time.Unix(1000, 0)
	tick := func(n int) work { return work{tick: t0.Add(time.Duration(n) * time.Second)} }
	var g runGroups
	for pass := range 2 {
		g = g.reset()
		g.add(a, tick(1))
		g.add(b, tick(2))
		g.add(a, tick(3))
		g.add(c, tick(4))
		g.add(b, work{trigger: "now"})
		items := g.split()
		if len(g.order) != 3 || g.order[0] != a || g.order[1] != b || g.order[2] != c {
			t.Fatalf("pass %d: order %v", pass, g.order)
		}
		want := [][]string{{tick(1).tick.String(), tick(3).tick.String()}, {tick(2).tick.String(), "now"}, {tick(4).tick.String()}}
		for i, ws := range items {
			if len(ws) != len(want[i]) {
				t.Fatalf("pass %d: job %d has %d works, want %d", pass, i, len(ws), len(want[i]))
			}
			for k, w := range ws {
				got := w.trigger
				if got == "" {
					got = w.tick.String()
				}
				if got != want[i][k] {
					t.Errorf("pass %d: job %d work %d is %s, want %s", pass, i, k, got, want[i][k])
				}
			}
		}
		first := items[1][0]
		_ = append(items[0], tick(9))
		if items[1][0] != first {
			t.Fatalf("pass %d: an append to job 0's works wrote over job 1's", pass)
		}
	}
}
