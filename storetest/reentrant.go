package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// testReentrant: an Obtain with the holder's context is a nested hold on
// the same lease, not a second grant. Another Locker cannot obtain the key
// while either hold is open, the inner release keeps the key held, the
// outer release frees it; the fence is the outer's; and the loss of the
// outer lease (Locker closed, MaxHold reached) ends the nested handle with
// the same cause.
func testReentrant(t *testing.T, s driver.Store) {
	ev := newEvents()
	a := newLocker(t, s, "a", ev)
	b := newLocker(t, s, "b", nil)
	ctx := ctxT(t, 10*time.Second)

	outer := mustObtain(t, a, "reentrant", nil)
	inner, err := a.Obtain(outer.Context(), "reentrant", nil)
	if err != nil {
		t.Fatalf("nested Obtain: %v", err)
	}
	if inner.Fence() != outer.Fence() || inner.Owner() != outer.Owner() || inner.Key() != outer.Key() {
		t.Fatalf("nested handle fence %d owner %q, want the outer's %d %q", inner.Fence(), inner.Owner(), outer.Fence(), outer.Owner())
	}
	if n := ev.count(tasklock.EventObtained); n != 1 {
		t.Fatalf("%d grants for an outer and a nested hold, want 1", n)
	}
	mustNotObtain(t, b, "reentrant")
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("nested Release: %v", err)
	}
	if !errors.Is(inner.Err(), tasklock.ErrReleased) {
		t.Fatalf("nested cause = %v, want ErrReleased", inner.Err())
	}
	assertOpen(t, outer)
	mustNotObtain(t, b, "reentrant") // the inner release kept the lease
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("outer Release: %v", err)
	}
	next := mustObtain(t, b, "reentrant", nil)
	if next.Fence() <= outer.Fence() {
		t.Fatalf("next grant's fence %d, want above %d", next.Fence(), outer.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Loss: the outer's Locker closes.
	c := newLocker(t, s, "c", nil)
	outer = mustObtain(t, c, "reentrant-close", nil)
	inner, err = c.TryObtain(outer.Context(), "reentrant-close", nil)
	if err != nil {
		t.Fatalf("nested TryObtain: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, inner, time.Second)
	if !errors.Is(inner.Err(), tasklock.ErrClosed) || inner.Err() != outer.Err() {
		t.Fatalf("nested cause = %v, want the outer's %v", inner.Err(), outer.Err())
	}

	// Loss: MaxHold ends the shared lease, whatever the nested call asked.
	ttl, maxHold := time.Second, 1500*time.Millisecond
	outer = mustObtain(t, a, "reentrant-maxhold", &tasklock.ObtainOptions{TTL: ttl, MaxHold: maxHold})
	inner, err = a.Obtain(outer.Context(), "reentrant-maxhold", &tasklock.ObtainOptions{MaxHold: time.Hour})
	if err != nil {
		t.Fatalf("nested Obtain: %v", err)
	}
	doneBy(t, inner, time.Now().Add(maxHold), "the outer's MaxHold")
	if !errors.Is(inner.Err(), tasklock.ErrMaxHold) || inner.Err() != outer.Err() {
		t.Fatalf("nested cause = %v, want the outer's %v (ErrMaxHold)", inner.Err(), outer.Err())
	}
	l, err := b.Obtain(ctxT(t, 10*time.Second), "reentrant-maxhold", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
}
