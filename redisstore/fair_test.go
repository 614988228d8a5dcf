package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// testFairStore checks the queue's store calls: an empty queue grants at
// once; Leave releases a grant; an entry not renewed is gone after its
// TTL; a Wait whose context ends leaves the entry queued.
func testFairStore(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	first := driver.AcquireParams{Key: "f", Token: token(), Owner: "first", TTL: time.Minute}
	t1, err := s.EnqueueFair(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	g1, err := t1.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := driver.AcquireParams{Key: "f", Token: token(), Owner: "second", TTL: 200 * time.Millisecond}
	t2, err := s.EnqueueFair(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if h := t2.Holder(); h == nil || h.Owner != "first" {
		t.Fatalf("Holder() after EnqueueFair = %+v, want first", h)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = t2.Wait(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait behind a holder: %v, want DeadlineExceeded", err)
	}
	if h := t2.Holder(); h == nil || h.Owner != "first" || h.TTL <= 0 {
		t.Fatalf("Holder() = %+v, want first with its TTL", h)
	}
	// Nobody renews the second entry: it is gone within its TTL.
	waitFor(t, 5*time.Second, func() bool {
		return c.Exists(ctx, s.lockKey("f")+fairSuffix).Val() == 0
	})
	if _, err := t2.Wait(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Wait of an expired entry: %v, want ErrNotHeld", err)
	}
	// Leave after the grant releases the key (the Locker never does it,
	// but a store may be asked to).
	if err := t1.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, s.lockKey("f")).Val() != 0 {
		t.Fatal("Leave after a grant left the lease")
	}
	g3 := mustAcquire(t, s, "f", token(), "plain", time.Minute)
	if g3 <= g1.Fence {
		t.Fatalf("fence %d after the fair grant's %d", g3, g1.Fence)
	}
}
