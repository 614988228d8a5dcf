package repeats

import (
	"testing"
	"time"
)

func TestFailure(t *testing.T) {
	var f Failure
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	if ended, _ := f.Recovered(t0); ended {
		t.Fatal("a success with no failure before ends a spell")
	}
	// A poll every 250ms for three minutes: the first failure, then one
	// line a minute.
	var logged []time.Duration
	var last []any
	for d := time.Duration(0); d < 3*time.Minute; d += 250 * time.Millisecond {
		if log, attrs := f.Failed(t0.Add(d)); log {
			logged, last = append(logged, d), attrs
		}
	}
	want := []time.Duration{0, time.Minute, 2 * time.Minute}
	if len(logged) != len(want) {
		t.Fatalf("logged at %v, want %v", logged, want)
	}
	for i := range want {
		if logged[i] != want[i] {
			t.Fatalf("logged at %v, want %v", logged, want)
		}
	}
	if len(last) != 4 || last[1] != t0 || last[3] != 239 {
		t.Errorf("attrs of the last line %v, want failing_since %v and not_logged 239", last, t0)
	}
	ended, attrs := f.Recovered(t0.Add(3 * time.Minute))
	if !ended || len(attrs) != 4 || attrs[1] != 720 || attrs[3] != 3*time.Minute {
		t.Fatalf("Recovered = %v %v, want a spell of 720 failures over 3m0s", ended, attrs)
	}
	// A new spell is logged at once.
	if log, attrs := f.Failed(t0.Add(4 * time.Minute)); !log || attrs != nil {
		t.Errorf("the first failure of a new spell: log %v attrs %v, want logged with none", log, attrs)
	}
}
