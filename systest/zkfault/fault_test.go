package zkfault

import (
	"context"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
	"github.com/tasklock/tasklock/zkstore"
)

// TestFaults runs the fault tests side by side.
func TestFaults(t *testing.T) {
	t.Run("NetworkBlackholed", func(t *testing.T) { t.Parallel(); testBlackholed(t) })
	t.Run("PermitHolderBlackholed", func(t *testing.T) { t.Parallel(); testPermitBlackholed(t) })
}

// testBlackholed: the holder's traffic to ZooKeeper is blackholed by a
// proxy. Its Done closes before its session could expire at the server
// (its TTL is the session timeout, counted from its last renewal, which the
// server heard), and another (connected directly) obtains only after that.
func testBlackholed(t *testing.T) {
	z, c := shared(t)
	root := newRoot()
	proxy := proxy.Start(t, z.Addr())
	hc := connect(t, proxy.Addr(), faultSession)
	holder := newLocker(t, newStore(t, hc, faultSession, &zkstore.Options{Root: root}), "holder")
	other := newLocker(t, newStore(t, c, testSession, &zkstore.Options{Root: root}), "other")
	l1, err := holder.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultSession})
	if err != nil {
		t.Fatal(err)
	}
	work := faulttest.StartWork(t, l1)
	proxy.Blackhole(t)
	cut := time.Now()

	tk := work.AwaitTakeover(t, l1, other, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second, Wait: 10 * time.Second},
		cut, faultSession+time.Second, "the session timeout + 1s")
	if tk.DoneAt.Sub(cut) > faultSession {
		t.Errorf("Done closed %v after the cut, later than the session timeout %v", tk.DoneAt.Sub(cut), faultSession)
	}
	tk.Check(t, work, "")
	acc, rej := work.Reg.Counts()
	t.Logf("register: %d accepted, %d rejected (the probe above)", acc, rej)
	proxy.Restore(t)
}

// testPermitBlackholed: of a semaphore of two, one permit's holder is cut
// off from ZooKeeper by a blackholing proxy while another holds the other
// permit. The cut-off holder's Done closes before its session could expire
// at the server; a waiter (connected directly) gets the permit only after
// that, within the session timeout + 1s. The critical sections of all
// three never number more than two at once.
func testPermitBlackholed(t *testing.T) {
	z, c := shared(t)
	root := newRoot()
	px := proxy.Start(t, z.Addr())
	hc := connect(t, px.Addr(), faultSession)
	holder := newLocker(t, newStore(t, hc, faultSession, &zkstore.Options{Root: root}), "holder")
	other := newLocker(t, newStore(t, c, testSession, &zkstore.Options{Root: root}), "other")
	ctx := ctxT(t)
	var log faulttest.Sections
	cutOff, err := holder.Semaphore("pool", 2).Acquire(ctx, &tasklock.ObtainOptions{TTL: faultSession})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := other.Semaphore("pool", 2).Acquire(ctx, &tasklock.ObtainOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	doneAt := make(chan time.Time, 1)
	go func() { <-cutOff.Done(); doneAt <- time.Now() }()
	// Sections that last (the work under the permit), so that holders'
	// sections overlap where the permits allow it.
	work := func() { time.Sleep(2 * time.Millisecond) }
	stops := []func(){log.Loop("holder", cutOff, work), log.Loop("other", kept, work)}
	px.Blackhole(t)
	cut := time.Now()

	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next, err := other.Semaphore("pool", 2).Acquire(wctx, &tasklock.ObtainOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	var done time.Time
	select {
	case done = <-doneAt:
	default:
		t.Fatalf("the permit was granted again %v after the cut while the cut-off holder's Done was open", granted.Sub(cut))
	}
	t.Logf("cut-off holder's Done closed %v after the cut (%v); its permit granted again %v after the cut, %v after Done",
		done.Sub(cut).Round(time.Millisecond), cutOff.Err(), granted.Sub(cut).Round(time.Millisecond), granted.Sub(done).Round(time.Millisecond))
	if d := done.Sub(cut); d > faultSession {
		t.Errorf("Done closed %v after the cut, later than the session timeout %v", d, faultSession)
	}
	if d := granted.Sub(cut); d > faultSession+time.Second {
		t.Errorf("the permit came back %v after the cut, want ≤ the session timeout + 1s", d)
	}
	if next.Fence() <= cutOff.Fence() || next.Fence() <= kept.Fence() {
		t.Errorf("fence %d after %d and %d", next.Fence(), cutOff.Fence(), kept.Fence())
	}
	stops = append(stops, log.Loop("next", next, work))
	waitFor(t, 5*time.Second, "the new holder's sections", func() bool {
		n := 0
		for _, s := range log.List() {
			if s.Holder == "next" {
				n++
			}
		}
		return n >= 5
	})
	for _, stop := range stops {
		stop()
	}
	if !log.Both("other", kept, "next", next) {
		t.Fatalf("a permit ended: kept's %v, next's %v", kept.Err(), next.Err())
	}
	if most := faulttest.CheckSections(t, 2, log.List()); most != 2 {
		t.Errorf("at most %d sections at once, want 2", most)
	}
	for _, l := range []*tasklock.Lock{kept, next} {
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	px.Restore(t)
}
