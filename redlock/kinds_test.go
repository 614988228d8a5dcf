package redlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// TestKindsRefused checks that the Store keeps mutexes only, saying why:
// read-write locks, semaphores and fair waits are refused with
// ErrUnsupported before any node is asked, and a direct call with another
// mode changes nothing on the nodes.
func TestKindsRefused(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	s := newStore(t, addrsOf(srvs), nil)
	if err := s.Kinds(driver.ModeMutex); err != nil {
		t.Fatalf("Kinds(mutex): %v", err)
	}
	for _, m := range []driver.Mode{driver.ModeRead, driver.ModeWrite, driver.ModePermit} {
		err := s.Kinds(m)
		if !errors.Is(err, driver.ErrUnsupported) || !strings.Contains(err.Error(), "consensus") {
			t.Errorf("Kinds(%v) = %v, want ErrUnsupported saying why", m, err)
		}
	}
	if _, ok := driver.Store(s).(driver.FairQueuer); ok {
		t.Error("the Store implements driver.FairQueuer")
	}

	lk := newLocker(t, s, "a")
	ctx := ctxT(t)
	rw := lk.RWMutex("k")
	sem := lk.Semaphore("k", 2)
	for name, try := range map[string]func() (*tasklock.Lock, error){
		"RWMutex.Lock":       func() (*tasklock.Lock, error) { return rw.Lock(ctx, nil) },
		"RWMutex.TryRLock":   func() (*tasklock.Lock, error) { return rw.TryRLock(ctx, nil) },
		"Semaphore.Acquire":  func() (*tasklock.Lock, error) { return sem.Acquire(ctx, nil) },
		"Obtain with Fair":   func() (*tasklock.Lock, error) { return lk.Obtain(ctx, "k", &tasklock.ObtainOptions{Fair: true}) },
		"TryAcquire permits": func() (*tasklock.Lock, error) { return sem.TryAcquire(ctx, nil) },
	} {
		if l, err := try(); !errors.Is(err, tasklock.ErrUnsupported) {
			if l != nil {
				_ = l.Release(ctx)
			}
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}

	// Direct calls with another mode are refused per item; mutexes in
	// the same call go on.
	tok := token()
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: tok, Owner: "a", TTL: time.Minute, Mode: driver.ModePermit, Limit: 2}); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("Acquire of a permit: %v", err)
	}
	mustAcquire(t, s, "m", tok, "a", time.Minute)
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "k", Token: tok, TTL: time.Minute, Mode: driver.ModeRead},
		{Key: "m", Token: tok, TTL: time.Minute},
	})
	if err != nil || !errors.Is(res[0], driver.ErrUnsupported) || res[1] != nil {
		t.Fatalf("Renew: %v, %v", res, err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: tok, Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("Release of a writer: %v", err)
	}
	for i := range srvs {
		if n := s.nodes[i].client.Keys(ctx, "*kinds*").Val(); len(n) != 0 {
			t.Fatalf("node %d has %v", i, n)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "m", Token: tok}); err != nil {
		t.Fatal(err)
	}
}
