package ledgertest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// testMarks: a ledger.Marker keeps one mark per node, replaced by the
// node's next, returns every kept mark with its times to the nanosecond
// and its view as given, lets a mark go once its ttl has passed on the
// store's clock, and refuses an invalid mark. Skipped for a ledger without
// the capability.
func testMarks(t *testing.T, l ledger.Ledger) {
	mk, ok := l.(ledger.Marker)
	if !ok {
		t.Skipf("%T does not implement ledger.Marker (optional)", l)
	}
	mark := func(m ledger.ClaimMark, ttl time.Duration) map[string]ledger.ClaimMark {
		t.Helper()
		got, err := mk.Mark(ctxT(t, 10*time.Second), m, ttl)
		if err != nil {
			t.Fatal(err)
		}
		out := make(map[string]ledger.ClaimMark)
		for _, g := range got {
			if _, dup := out[g.Node]; dup {
				t.Fatalf("node %q returned twice in %+v", g.Node, got)
			}
			out[g.Node] = g
		}
		return out
	}
	same := func(a, b ledger.ClaimMark) bool {
		return a.Node == b.Node && a.View == b.View && a.From.Equal(b.From) && a.Through.Equal(b.Through)
	}
	a := ledger.ClaimMark{Node: "a", View: "v1:j:é", From: tick0.Add(123456789), Through: tick0.Add(5*time.Second + 7)}
	b := ledger.ClaimMark{Node: "b", View: "v1:j:é", From: tick0, Through: time.Time{}} // covers nothing yet
	if got := mark(a, time.Minute); len(got) != 1 || !same(got["a"], a) {
		t.Fatalf("after a's mark: %+v, want only %+v", got, a)
	}
	// The short-lived mark first, so that a's next mark cannot outlive it.
	short := ledger.ClaimMark{Node: "short", View: "x", From: tick0, Through: tick0}
	start := time.Now()
	if got := mark(short, 300*time.Millisecond); len(got) != 2 || !same(got["short"], short) {
		t.Fatalf("after short's mark: %+v", got)
	}
	got := mark(b, time.Minute)
	if len(got) < 2 || !same(got["a"], a) || !same(got["b"], b) || !got["b"].Through.IsZero() {
		t.Fatalf("after b's mark: %+v, want %+v and %+v", got, a, b)
	}
	a2 := a
	a2.View, a2.Through = "v2", a.Through.Add(time.Second)
	got = mark(a2, time.Minute)
	if !same(got["a"], a2) || !same(got["b"], b) {
		t.Fatalf("after a's second mark: %+v, want %+v and %+v", got, a2, b)
	}
	// short goes once its ttl has passed by the store's clock.
	for {
		got = mark(b, time.Minute)
		el := time.Since(start)
		if _, ok := got["short"]; !ok {
			if el < 290*time.Millisecond {
				t.Fatalf("a mark kept for 300ms went after %v", el)
			}
			break
		}
		if el > 5*time.Second {
			t.Fatalf("a mark kept for 300ms is still returned after %v: %+v", el, got)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval
	}
	if len(got) != 2 {
		t.Fatalf("kept the marks of %v, want those of a and b", slices.Sorted(maps.Keys(got)))
	}
	for _, bad := range []struct {
		m   ledger.ClaimMark
		ttl time.Duration
	}{{ledger.ClaimMark{}, time.Minute}, {a, 0}, {ledger.ClaimMark{Node: "c", View: string(make([]byte, ledger.MaxMarkView+1))}, time.Minute}} {
		if _, err := mk.Mark(ctxT(t, 10*time.Second), bad.m, bad.ttl); err == nil {
			t.Fatalf("Mark(%q, view of %d bytes, ttl %v) succeeded", bad.m.Node, len(bad.m.View), bad.ttl)
		}
	}
}
