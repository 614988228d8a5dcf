package zonetest

import (
	"testing"
	"time"
)

func TestSourcesLoad(t *testing.T) {
	e, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	s, err := System()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d embedded zones, %d system zones", len(e), len(s))
	for _, src := range []string{"embedded", "system"} {
		loc, err := Load("Europe/Berlin", src)
		if err != nil {
			t.Fatal(err)
		}
		tr := Transitions(loc, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), 24*time.Hour)
		want := []time.Time{time.Date(2030, 3, 31, 1, 0, 0, 0, time.UTC), time.Date(2030, 10, 27, 1, 0, 0, 0, time.UTC)}
		if len(tr) != 2 || !tr[0].Equal(want[0]) || !tr[1].Equal(want[1]) {
			t.Errorf("%s: Berlin 2030 transitions %v, want %v", src, tr, want)
		}
	}
}
