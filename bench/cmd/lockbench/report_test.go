package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	if ds[0] != 5 {
		t.Error("percentile sorted its argument in place")
	}
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 36120.6: "36,121", 1234567: "1,234,567"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}
