package driver

import (
	"math"
	"testing"
	"time"
)

func TestUnitsRoundsUp(t *testing.T) {
	for _, c := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Millisecond, 0},
		{-time.Second, time.Millisecond, 0},
		{1, time.Millisecond, 1},
		{500 * time.Microsecond, time.Millisecond, 1},
		{time.Millisecond, time.Millisecond, 1},
		{time.Millisecond + 1, time.Millisecond, 2},
		{1500 * time.Millisecond, time.Second, 2},
		{2 * time.Second, time.Second, 2},
		{999 * time.Nanosecond, time.Microsecond, 1},
		{30 * time.Second, time.Microsecond, 30_000_000},
		{time.Duration(math.MaxInt64 - 1000), time.Second, int64(time.Duration(math.MaxInt64-1000)/time.Second) + 1},
	} {
		if got := Units(c.d, c.unit); got != c.want {
			t.Errorf("Units(%v, %v) = %d, want %d", c.d, c.unit, got, c.want)
		}
		if got := Units(c.d, c.unit); c.d > 0 && time.Duration(got)*c.unit < c.d && got < math.MaxInt64/int64(c.unit) {
			t.Errorf("Units(%v, %v) = %d units: shorter than asked", c.d, c.unit, got)
		}
	}
}
