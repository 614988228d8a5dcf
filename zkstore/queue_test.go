package zkstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// watchesBySession parses the four-letter word wchc: the paths each
// session watches.
func watchesBySession(t testing.TB, z *testserver.ZooKeeper) map[int64][]string {
	t.Helper()
	out, err := z.FourLetterWord("wchc")
	if err != nil {
		t.Fatal(err)
	}
	m := map[int64][]string{}
	var cur int64
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "0x"):
			id, err := strconv.ParseUint(strings.TrimSpace(line[2:]), 16, 64)
			if err != nil {
				t.Fatalf("wchc line %q: %v", line, err)
			}
			cur = int64(id)
			m[cur] = nil
		case strings.HasPrefix(strings.TrimSpace(line), "/"):
			m[cur] = append(m[cur], strings.TrimSpace(line))
		}
	}
	return m
}

type queued struct {
	c      *zk.Conn
	d      *countingDialer
	s      *Store
	tok    string
	ticket driver.Ticket
	path   string
	done   chan error // Wait's result
}

// TestQueueWatchesPredecessor queues five waiters, each on a session of its
// own, behind a holder: each sets one watch, on the node just before its
// own (counted by the server: wchc), a release wakes only the first (the
// others send nothing), a waiter leaving the middle of the queue wakes
// only the one behind it, and an entry outlives waits many times its TTL.
func TestQueueWatchesPredecessor(t *testing.T) {
	t.Parallel()
	z := testserver.StartZooKeeper(t, testserver.WithZooKeeperConfig("4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchc,wchs"))
	root := newRoot()
	hc := connect(t, z.Addr(), testSession)
	hs := newStore(t, hc, testSession, &Options{Root: root})
	htok := token()
	mustAcquire(t, hs, "q", htok, "holder", 10*time.Second)
	holderNode := children(t, hs, "q")[0]

	const n = 5
	const ttl = 200 * time.Millisecond // a queued entry is no lease: it outlives this
	ws := make([]*queued, n)
	for i := range ws {
		w := &queued{d: new(countingDialer), tok: token(), done: make(chan error, 1)}
		w.c = connectVia(t, z.Addr(), testserver.ZooKeeperMaxSessionTimeout, w.d.dial)
		w.s = newStore(t, w.c, testserver.ZooKeeperMaxSessionTimeout, &Options{Root: root})
		before := w.d.writes.Load()
		var err error
		w.ticket, err = w.s.Enqueue(ctxT(t), driver.AcquireParams{Key: "q", Token: w.tok, Owner: fmt.Sprintf("w%d", i), TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		// The Store's first node: it reads the force-release marker first.
		if r := w.d.writes.Load() - before; r != 2 {
			t.Errorf("Enqueue %d: %d requests, want 2 (the marker, the multi)", i, r)
		}
		w.path = w.s.keyPath("q") + "/" + w.ticket.(*ticket).c.name
		ws[i] = w
		go func() {
			_, err := w.ticket.Wait(context.Background())
			w.done <- err
		}()
	}
	pathOf := func(i int) string {
		if i < 0 {
			return hs.keyPath("q") + "/" + holderNode
		}
		return ws[i].path
	}
	// expectWatches waits until waiter i (for each i in want) watches
	// exactly the node of want[i] (-1: the holder's; ignore: whatever), and
	// nobody else watches anything.
	const ignore = -2
	expectWatches := func(want map[int]int) {
		t.Helper()
		var got map[int64][]string
		ok := func() bool {
			got = watchesBySession(t, z)
			seen := 0
			for i, w := range ws {
				p, waiting := want[i]
				paths := got[w.c.SessionID()]
				if p == ignore {
					seen++
					continue
				}
				if !waiting {
					if len(paths) != 0 {
						return false
					}
					continue
				}
				if len(paths) != 1 || paths[0] != pathOf(p) {
					return false
				}
				seen++
			}
			return seen == len(want) && len(got[hc.SessionID()]) == 0
		}
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				raw, _ := z.FourLetterWord("wchc")
				var sess []string
				for i, w := range ws {
					sess = append(sess, fmt.Sprintf("w%d=%x", i, w.c.SessionID()))
				}
				t.Fatalf("watches by session %v, want waiter→predecessor %v (sessions %v, holder %x)\n%s\nchildren %q", got, want, sess, hc.SessionID(), raw, children(t, hs, "q"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	expectWatches(map[int]int{0: -1, 1: 0, 2: 1, 3: 2, 4: 3})
	if out, err := z.FourLetterWord("wchs"); err == nil {
		t.Logf("wchs: %s", strings.Join(strings.Fields(out), " "))
	}

	// The queue outlives its entries' TTL many times over.
	time.Sleep(5 * ttl)
	if kids := children(t, hs, "q"); len(kids) != n+1 {
		t.Fatalf("children after waiting 5×TTL: %q", kids)
	}

	writes := func() []int64 {
		out := make([]int64, n)
		for i, w := range ws {
			out[i] = w.d.writes.Load()
		}
		return out
	}
	// settle waits a moment for wake-ups that should not come, and returns
	// the requests each waiter sent since w0.
	settle := func(w0 []int64) []int64 {
		time.Sleep(300 * time.Millisecond)
		w1 := writes()
		for i := range w1 {
			w1[i] -= w0[i]
		}
		return w1
	}

	// The holder releases: only the first waiter wakes, and it holds.
	w0 := writes()
	if err := hs.Release(ctxT(t), driver.ReleaseParams{Key: "q", Token: htok}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ws[0].done:
		if err != nil {
			t.Fatalf("first waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first waiter was not granted after the release")
	}
	// It was next in line: its Wait sent the marker check with the
	// children, which started the lease, so the Locker sends no Renew.
	if at, ok := ws[0].ticket.(driver.StartedTicket).Started(); !ok || time.Since(at) > 5*time.Second {
		t.Errorf("the first waiter's Started() = %v, %v: want its lease started by the granting Wait", at, ok)
	}
	// Its TTL is short: renew it at once, as the Locker's engine would.
	if res, err := ws[0].s.Renew(ctxT(t), []driver.RenewParams{{Key: "q", Token: ws[0].tok, TTL: 10 * time.Second}}); err != nil || res[0] != nil {
		t.Fatalf("the first waiter's Renew after its grant = %v, %v", res, err)
	}
	sent := settle(w0)
	t.Logf("requests per waiter after the release: %v", sent)
	if sent[0] != 3 {
		t.Errorf("the first waiter sent %d requests to be granted and renew, want 3 (the children and the marker check, then the Renew's check)", sent[0])
	}
	for i := 1; i < n; i++ {
		if sent[i] != 0 {
			t.Errorf("waiter %d sent %d requests after a release it does not wait for", i, sent[i])
		}
	}
	expectWatches(map[int]int{1: 0, 2: 1, 3: 2, 4: 3})

	// The middle waiter leaves: only the one behind it wakes, and watches
	// the node before the one that left.
	w0 = writes()
	if err := ws[2].ticket.Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// (Waiter 2's own Wait still sleeps on its watch of waiter 1's node,
	// which the server keeps until that node goes: when it fires, the Wait
	// returns ErrNotHeld without a request.)
	expectWatches(map[int]int{1: 0, 2: ignore, 3: 1, 4: 3})
	sent = settle(w0)
	t.Logf("requests per waiter after waiter 2 left: %v", sent)
	if sent[2] != 1 {
		t.Errorf("Leave sent %d requests, want 1", sent[2])
	}
	if sent[3] < 3 || sent[3] > 4 {
		t.Errorf("the waiter behind the one that left sent %d requests, want 3 or 4 (children and marker check, predecessor, holder)", sent[3])
	}
	for _, i := range []int{0, 1, 4} {
		if sent[i] != 0 {
			t.Errorf("waiter %d sent %d requests after a Leave it does not wait behind", i, sent[i])
		}
	}
	if h := ws[3].ticket.Holder(); h == nil || h.Owner != "w0" {
		t.Errorf("Holder() of waiter 3 = %+v, want w0", h)
	}

	// The rest are served in order.
	for _, i := range []int{1, 3, 4} {
		prev := 0
		if i > 1 {
			prev = map[int]int{3: 1, 4: 3}[i]
		}
		if err := ws[prev].s.Release(ctxT(t), driver.ReleaseParams{Key: "q", Token: ws[prev].tok}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-ws[i].done:
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d was not granted after its predecessor released", i)
		}
		if res, err := ws[i].s.Renew(ctxT(t), []driver.RenewParams{{Key: "q", Token: ws[i].tok, TTL: 10 * time.Second}}); err != nil || res[0] != nil {
			t.Fatalf("waiter %d's Renew after its grant = %v, %v", i, res, err)
		}
	}
	// The left waiter's Wait woke when waiter 1's node went.
	if err := <-ws[2].done; !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("the left waiter's Wait = %v, want ErrNotHeld", err)
	}
	if err := ws[4].s.Release(ctxT(t), driver.ReleaseParams{Key: "q", Token: ws[4].tok}); err != nil {
		t.Fatal(err)
	}
	if kids := children(t, hs, "q"); len(kids) != 0 {
		t.Fatalf("children left: %q", kids)
	}
}

// TestQueueBehindMinHold: an entry at the head behind a MinHold node is
// granted once the MinHold time is over, not before.
func TestQueueBehindMinHold(t *testing.T) {
	t.Parallel()
	for _, ttlNodes := range []bool{true, false} {
		t.Run(fmt.Sprintf("TTLNodes=%v", ttlNodes), func(t *testing.T) {
			t.Parallel()
			var z *testserver.ZooKeeper
			if ttlNodes {
				z = testserver.SharedZooKeeper(t)
			} else {
				z = testserver.StartZooKeeper(t, testserver.WithZooKeeperConfig("extendedTypesEnabled=false"))
			}
			s := newStore(t, connect(t, z.Addr(), testSession), testSession, nil)
			ws := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
			tok := token()
			mustAcquire(t, s, "job", tok, "keeper", 10*time.Second)
			tk, err := ws.Enqueue(ctxT(t), driver.AcquireParams{Key: "job", Token: token(), Owner: "waiter", TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			const keep = 500 * time.Millisecond
			released := time.Now()
			if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "job", Token: tok, KeepFor: keep}); err != nil {
				t.Fatal(err)
			}
			g, err := tk.Wait(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			el := time.Since(released)
			t.Logf("granted %v after a release with KeepFor %v", el.Round(time.Millisecond), keep)
			if el < keep-20*time.Millisecond || el > keep+2*time.Second {
				t.Errorf("granted %v after the release, want about KeepFor %v", el, keep)
			}
			if h := tk.Holder(); h == nil || h.Owner != "keeper" {
				t.Errorf("Holder() = %+v, want keeper", h)
			}
			if g.Fence == 0 {
				t.Error("zero fence")
			}
			if err := tk.Leave(ctxT(t)); err != nil { // after a grant: a release
				t.Fatal(err)
			}
			if kids := children(t, s, "job"); len(kids) != 0 {
				t.Errorf("children left: %q", kids)
			}
		})
	}
}

// TestLeaveUnconfirmed: a Leave whose delete cannot be sent (the server is
// unreachable) hands the node to the reaper, which deletes it once the
// connection is back; the entry behind it is then granted, and nothing is
// left for the reaper. The network is cut by the Conn's dialer (cutDialer),
// not by systest's proxy: the test reads the Store's orphans, which only a
// test inside the package can.
func TestLeaveUnconfirmed(t *testing.T) {
	t.Parallel()
	var cut cutDialer
	_, s, other := storesVia(t, cut.dial)
	htok := token()
	mustAcquire(t, other, "job", htok, "holder", 10*time.Second)
	tk, err := s.Enqueue(ctxT(t), driver.AcquireParams{Key: "job", Token: token(), Owner: "leaver", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	behind, err := other.Enqueue(ctxT(t), driver.AcquireParams{Key: "job", Token: token(), Owner: "behind", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cut.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := tk.Leave(ctx); err == nil {
		t.Fatal("Leave through a blackholed connection reported success")
	}
	cut.Restore()
	if err := other.Release(ctxT(t), driver.ReleaseParams{Key: "job", Token: htok}); err != nil {
		t.Fatal(err)
	}
	if _, err := behind.Wait(ctxT(t)); err != nil {
		t.Fatalf("the entry behind the one that left: %v", err)
	}
	s.mu.Lock()
	n := len(s.orphans)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d orphans still queued", n)
	}
}

// cutDialer dials as net.DialTimeout does and cuts the connections it made
// off as a blackholed network would: while cut, what the client writes is
// dropped (the write succeeds) and what the server sends is not delivered.
// Restore closes the connections made so far, as a proxy does when a
// blackhole ends, so the client reconnects, and ends the cut.
type cutDialer struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (d *cutDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return cutConn{c, d}, nil
}

func (d *cutDialer) isCut() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cut
}

// Blackhole cuts the connections off, those to come included.
func (d *cutDialer) Blackhole() {
	d.mu.Lock()
	d.cut = true
	d.mu.Unlock()
}

// Restore closes every connection made so far and ends the cut.
func (d *cutDialer) Restore() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns, d.cut = nil, false
}

type cutConn struct {
	net.Conn
	d *cutDialer
}

func (c cutConn) Write(b []byte) (int, error) {
	if c.d.isCut() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c cutConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.d.isCut() {
			return n, err
		}
		// Cut: what arrived is lost.
	}
}

// TestQueuedGrantStartsLease: a waiter granted from the queue starts its
// lease in its Wait (driver.StartedTicket), so the Locker needs no Renew.
// Granted within a third of its TTL from its create, it counts from the
// create: one request (the children). Granted later, its wake-up sends
// Renew's marker check with the children: two requests, counted from
// their send. When a force release anywhere under Root came while it
// waited, that check fails, Started reports false, and Renew starts the
// lease as before.
func TestQueuedGrantStartsLease(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	hs := newStore(t, connect(t, z.Addr(), testSession), testSession, nil)
	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		forced   bool
		requests int64
		started  bool
	}{
		{"fresh", 10 * time.Second, false, 1, true},
		{"late", 1500 * time.Millisecond, false, 2, true},
		{"late after a force release", 1500 * time.Millisecond, true, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k-" + tc.name
			htok := token()
			hfence := mustAcquire(t, hs, key, htok, "holder", 10*time.Second)
			d := new(countingDialer)
			ws := newStore(t, connectVia(t, z.Addr(), testSession, d.dial), testSession, &Options{Root: hs.Root()})
			wtok := token()
			start := time.Now()
			tk, err := ws.Enqueue(ctxT(t), driver.AcquireParams{Key: key, Token: wtok, Owner: "waiter", TTL: tc.ttl})
			if err != nil {
				t.Fatal(err)
			}
			w0 := d.writes.Load()
			done := make(chan error, 1)
			go func() {
				_, err := tk.Wait(context.Background())
				done <- err
			}()
			// The first look: the children, then the holder's data and watch.
			waitFor(t, 10*time.Second, "the waiter's first look (children, watch)", func() bool { return d.writes.Load()-w0 >= 2 })
			if tc.ttl < 2*time.Second {
				// Let a third of the TTL since the create pass: time, not an
				// event, is what makes the grant late.
				time.Sleep(time.Until(start.Add(tc.ttl / 2)))
			}
			if tc.forced {
				otok := token()
				mustAcquire(t, hs, "other-"+key, otok, "other", 10*time.Second)
				if err := hs.ForceRelease(ctxT(t), "other-"+key); err != nil {
					t.Fatal(err)
				}
			}
			w1 := d.writes.Load()
			released := time.Now()
			if err := hs.Release(ctxT(t), driver.ReleaseParams{Key: key, Token: htok}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Wait: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not granted after the release")
			}
			granted := d.writes.Load() - w1
			// Renew at once: the late cases' TTL is short.
			if res, err := ws.Renew(ctxT(t), []driver.RenewParams{{Key: key, Token: wtok, TTL: 10 * time.Second}}); err != nil || res[0] != nil {
				t.Fatalf("Renew after the grant = %v, %v", res, err)
			}
			if granted != tc.requests {
				t.Errorf("the grant took %d requests, want %d", granted, tc.requests)
			}
			at, ok := tk.(driver.StartedTicket).Started()
			switch {
			case ok != tc.started:
				t.Errorf("Started() = %v, %v, want %v", at, ok, tc.started)
			case ok && tc.requests == 1 && (at.Before(start) || !at.Before(released)):
				t.Errorf("Started() = %v: want the create's send time, in [%v, %v)", at, start, released)
			case ok && tc.requests == 2 && (at.Before(released) || at.After(time.Now())):
				t.Errorf("Started() = %v: want the wake-up's send time, after the release at %v", at, released)
			}
			if g := tk.(*ticket).c.fence; g <= hfence {
				t.Errorf("the waiter's fence %d is not above the holder's %d", g, hfence)
			}
			if err := ws.Release(ctxT(t), driver.ReleaseParams{Key: key, Token: wtok}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// renewCounter is a Store that counts its Renew calls.
type renewCounter struct {
	*Store
	renews atomic.Int64
}

func (r *renewCounter) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	r.renews.Add(1)
	return r.Store.Renew(ctx, ps)
}

// TestObtainQueuedStartsLease: a Locker's Obtain queued next behind the
// holder gets the lock when the holder releases without a Renew: the
// granting Wait started the lease, and the lock is live and renewable.
func TestObtainQueuedStartsLease(t *testing.T) {
	t.Parallel()
	z := testserver.StartZooKeeper(t, testserver.WithZooKeeperConfig("4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchc,wchs"))
	root := newRoot()
	holder, err := tasklock.New(newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: root}), &tasklock.Config{Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	wc := connect(t, z.Addr(), testSession)
	ws := &renewCounter{Store: newStore(t, wc, testSession, &Options{Root: root})}
	waiter, err := tasklock.New(ws, &tasklock.Config{Owner: "waiter"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })

	opts := &tasklock.ObtainOptions{TTL: 9 * time.Second}
	hl, err := holder.Obtain(ctxT(t), "job", opts)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *tasklock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Obtain(ctxT(t), "job", opts)
		got <- result{l, err}
	}()
	// Queued, next in line: its session watches the holder's node.
	waitFor(t, 15*time.Second, "the waiter's watch", func() bool { return len(watchesBySession(t, z)[wc.SessionID()]) > 0 })
	before := ws.renews.Load()
	if err := hl.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the lock after the release")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := ws.renews.Load() - before; n != 0 {
		t.Errorf("the queued grant sent %d Renew calls, want 0 (its Wait started the lease)", n)
	}
	if r.l.Fence() <= hl.Fence() {
		t.Errorf("the waiter's fence %d is not above the holder's %d", r.l.Fence(), hl.Fence())
	}
	if err := r.l.Extend(ctxT(t), 9*time.Second); err != nil || r.l.Err() != nil {
		t.Fatalf("Extend of the queued grant = %v (lock error %v)", err, r.l.Err())
	}
	if err := r.l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestWaitCancelled: a Wait whose context ends returns its error and
// grants nothing, its entry stays queued, and then either a Wait again is
// granted once the holder goes or Leave takes the entry out, so that the
// key is free for others.
func TestWaitCancelled(t *testing.T) {
	t.Parallel()
	for _, again := range []bool{true, false} {
		t.Run(fmt.Sprintf("again=%v", again), func(t *testing.T) {
			t.Parallel()
			_, s, other := storesVia(t, nil)
			htok, wtok := token(), token()
			mustAcquire(t, other, "job", htok, "holder", 10*time.Second)
			tk, err := s.Enqueue(ctxT(t), driver.AcquireParams{Key: "job", Token: wtok, Owner: "waiter", TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := tk.Wait(ctx)
				done <- err
			}()
			// The waiter is asleep on its watch once it read the holder.
			waitFor(t, 10*time.Second, "the waiter to read the holder", func() bool { return tk.Holder() != nil })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Wait: %v, want context.Canceled", err)
			}
			if !again {
				if err := tk.Leave(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			if err := other.Release(ctxT(t), driver.ReleaseParams{Key: "job", Token: htok}); err != nil {
				t.Fatal(err)
			}
			if again {
				g, err := tk.Wait(ctxT(t))
				if err != nil {
					t.Fatalf("Wait again: %v", err)
				}
				if g.Fence == 0 {
					t.Fatal("Wait again: no fence")
				}
				if err := tk.Leave(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			s.mu.Lock()
			_, kept := s.leases[wtok]
			s.mu.Unlock()
			if kept {
				t.Error("the waiter's lease is still kept after Leave")
			}
			mustAcquire(t, other, "job", token(), "next", 10*time.Second)
		})
	}
}

// TestWaitCancelledAlone: a Wait called with a context that has ended
// returns its error, also for an entry alone under its key (granted with
// no request), and the entry stays queued for a Wait with a live context.
func TestWaitCancelledAlone(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	tk, err := s.Enqueue(ctxT(t), driver.AcquireParams{Key: "job", Token: token(), Owner: "alone", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tk.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended context: %v, want context.Canceled", err)
	}
	g, err := tk.Wait(ctxT(t))
	if err != nil || g.Fence == 0 {
		t.Fatalf("Wait again: %+v, %v", g, err)
	}
	if err := tk.Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
