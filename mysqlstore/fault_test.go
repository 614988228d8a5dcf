package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// The fault tests use a fenced register in the database as their oracle:
// one row whose fence only grows. A write under fence f is accepted only
// when no higher fence was written before (UPDATE ... WHERE fence <= f), and
// every accepted write gets the next sequence number, decided by the
// database. "No write of the old holder is accepted after the new holder's"
// is then: every accepted write of the old holder has a lower sequence
// number than the new holder's first.
//
// The test of a holder cut off by a blackholing proxy is in
// systest/mysqlfault: the proxy must not be a dependency of the library
// module.

const registerDDL = "CREATE TABLE register (id INT PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL)"

func createRegister(t testing.TB, db *sql.DB) {
	t.Helper()
	for _, q := range []string{registerDDL, "INSERT INTO register VALUES (1, 0, 0)"} {
		if _, err := db.ExecContext(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
}

// registerWrite writes under fence and returns the write's sequence number,
// or 0 when the register refused it as stale.
func registerWrite(ctx context.Context, db *sql.DB, fence uint64) (uint64, error) {
	res, err := db.ExecContext(ctx, "UPDATE register SET fence = ?, seq = LAST_INSERT_ID(seq + 1) WHERE id = 1 AND fence <= ?", fence, fence)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, err
	}
	id, err := res.LastInsertId()
	return uint64(id), err
}

// Environment of the holder helper.
const (
	envDSN  = "MYSQLSTORE_DSN"
	envMode = "MYSQLSTORE_MODE"
	envTTL  = "MYSQLSTORE_TTL"
)

const faultKey = "fault"

// TestHolderHelper is the lock holder that the fault tests run as a
// separate process and then kill or stop. It obtains faultKey, prints
// "LOCKED <fence>", and writes to the register every 20ms, printing
// "WROTE <fence> <seq>" or "REJECTED <fence>", until its lock's Done is
// closed; then it prints "LOST <cause>", makes one more write as a holder
// that ignores Done would, and exits.
func TestHolderHelper(t *testing.T) {
	if testserver.HelperRole() != "holder" {
		t.Skip("runs only as a helper process of the fault tests")
	}
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", os.Getenv(envDSN))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(db, &Options{Mode: Mode(os.Getenv(envMode))})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := lk.Obtain(ctx, faultKey, &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("LOCKED %d\n", l.Fence())
	for {
		select {
		case <-l.Done():
			fmt.Printf("LOST %v\n", l.Err())
			printWrite(ctx, db, l.Fence())
			os.Exit(0)
		default:
		}
		printWrite(ctx, db, l.Fence())
		time.Sleep(20 * time.Millisecond) // the work between two writes
	}
}

// printWrite writes to the register and prints the outcome.
func printWrite(ctx context.Context, db *sql.DB, fence uint64) {
	seq, err := registerWrite(ctx, db, fence)
	switch {
	case err != nil:
		fmt.Printf("WRITEERR %v\n", err)
	case seq == 0:
		fmt.Printf("REJECTED %d\n", fence)
	default:
		fmt.Printf("WROTE %d %d\n", fence, seq)
	}
}

// startHolder starts the helper on dsn and waits until it holds the lock.
func startHolder(t *testing.T, dsn string, mode Mode, ttl time.Duration) (*testserver.Process, uint64) {
	t.Helper()
	h := testserver.StartHelper(t, "TestHolderHelper", "holder",
		envDSN+"="+dsn, envMode+"="+string(mode), envTTL+"="+ttl.String())
	line := h.WaitLine(t, "LOCKED ", 20*time.Second)
	fence, err := strconv.ParseUint(strings.TrimPrefix(line, "LOCKED "), 10, 64)
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	h.WaitLine(t, "WROTE ", 5*time.Second)
	return h, fence
}

// helperWrites returns the sequence numbers of the helper's accepted writes
// and the number of its rejected ones, reading its output to the end.
func helperWrites(t *testing.T, h *testserver.Process) (accepted []uint64, rejected int) {
	t.Helper()
	h.Wait(t, 10*time.Second)
	for line := range h.Lines() {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "WROTE":
			seq, _ := strconv.ParseUint(f[2], 10, 64)
			accepted = append(accepted, seq)
		case len(f) >= 1 && f[0] == "REJECTED":
			rejected++
		}
	}
	return accepted, rejected
}

func newFaultLocker(t *testing.T, s *Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner})
}

// TestHolderKilled: a holder process is SIGKILLed; another process obtains
// the key within TTL + 1s (lease mode) or 2s whatever the TTL (connection
// mode: the server frees the lock when the connection closes), with a
// higher fence, and the register accepts its write after all the old
// holder's.
func TestHolderKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  Mode
		ttl   time.Duration
		limit time.Duration
	}{
		{ModeLease, 2 * time.Second, 3 * time.Second},
		{ModeConnection, 10 * time.Second, 2 * time.Second},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			s, db, dsn := newStore(t, tc.mode)
			createRegister(t, db)
			h, f1 := startHolder(t, dsn, tc.mode, tc.ttl)
			lk := newFaultLocker(t, s, "next")

			h.Kill(t)
			l, el := faulttest.Obtain(t, lk, faultKey, &tasklock.ObtainOptions{TTL: 5 * time.Second}, time.Now())
			t.Logf("%s: obtained %v after SIGKILL of the holder (TTL %v)", tc.mode, el.Round(time.Millisecond), tc.ttl)
			if el > tc.limit {
				t.Errorf("takeover took %v, want ≤ %v", el, tc.limit)
			}
			if l.Fence() <= f1 {
				t.Fatalf("fence %d after the killed holder's %d", l.Fence(), f1)
			}
			seq, err := registerWrite(ctxT(t), db, l.Fence())
			if err != nil || seq == 0 {
				t.Fatalf("the new holder's write: seq %d, %v", seq, err)
			}
			accepted, _ := helperWrites(t, h)
			for _, a := range accepted {
				if a > seq {
					t.Fatalf("the killed holder's write %d was accepted after the new holder's %d", a, seq)
				}
			}
			_ = l.Release(ctxT(t))
		})
	}
}

// TestHolderPaused: a holder process is SIGSTOPped past its TTL. Another
// obtains the key (lease mode: when the row expires by the database's clock;
// connection mode: when the server ends the silent session after its
// wait_timeout) and writes. When the old holder resumes, its lock's Done is
// already closed, and the register refuses whatever it still tries to
// write.
func TestHolderPaused(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			const ttl = time.Second
			s, db, dsn := newStore(t, mode)
			createRegister(t, db)
			h, f1 := startHolder(t, dsn, mode, ttl)
			lk := newFaultLocker(t, s, "next")

			h.Stop(t)
			l, took := faulttest.Obtain(t, lk, faultKey, &tasklock.ObtainOptions{TTL: 5 * time.Second}, time.Now())
			t.Logf("%s: obtained %v after SIGSTOP of the holder (TTL %v)", mode, took.Round(time.Millisecond), ttl)
			if l.Fence() <= f1 {
				t.Fatalf("fence %d after the paused holder's %d", l.Fence(), f1)
			}
			seq, err := registerWrite(ctxT(t), db, l.Fence())
			if err != nil || seq == 0 {
				t.Fatalf("the new holder's write: seq %d, %v", seq, err)
			}

			h.Cont(t)
			lost := h.WaitLine(t, "LOST ", 5*time.Second)
			t.Logf("resumed holder: %s", lost)
			if !strings.Contains(lost, tasklock.ErrLockLost.Error()) {
				t.Errorf("resumed holder's cause %q, want ErrLockLost", lost)
			}
			accepted, rejected := helperWrites(t, h)
			for _, a := range accepted {
				if a > seq {
					t.Fatalf("the paused holder's write %d was accepted after the new holder's %d", a, seq)
				}
			}
			if rejected == 0 {
				t.Fatal("the resumed holder's write after Done was not refused")
			}
			t.Logf("paused holder: %d writes accepted, all before the new holder's; %d refused after resuming", len(accepted), rejected)
			_ = l.Release(ctxT(t))
		})
	}
}

// TestServerPaused: the server is SIGSTOPped (its sockets stay open, and
// silent). A TryObtain and a Release with no deadline of the caller's end
// with the store's error all the same, the first within its lease's TTL
// and an eighth (the Locker's bound, bound.go); once the server resumes, a
// lock is obtained again.
func TestServerPaused(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartMariaDB(t)
			s := mustNew(t, openDB(t, srv.CreateDB(t)), &Options{Mode: mode, Migrate: true})
			faulttest.ServerPaused(t, newFaultLocker(t, s, "a"), newFaultLocker(t, s, "b"), srv.Stop, srv.Cont)
		})
	}
}

// TestServerRestart: the database is killed and restarted while a lock is
// held. Lease mode: a restart shorter than the lease leaves the lease in
// force (rows are durable) and the holder keeps it; a server down past the
// TTL ends the holder's lock locally, and after the restart the next grant's
// fence is higher. Connection mode: the lock dies with the holder's
// connection, the holder learns it at its next renewal, and fences keep
// increasing across the restart.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartMariaDB(t)
			dsn := srv.CreateDB(t)
			s := mustNew(t, openDB(t, dsn), &Options{Mode: mode, Migrate: true})
			ev := make(chan tasklock.Event, 1024)
			lk, err := tasklock.New(s, &tasklock.Config{Owner: "a", OnEvent: func(e tasklock.Event) {
				select {
				case ev <- e:
				default:
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lk.Close() })
			b := newFaultLocker(t, s, "b")
			ctx := ctxT(t)

			var last uint64
			if mode == ModeLease {
				// The lease must outlast the restart, which takes seconds
				// on a busy machine (3.8 and 5.9 s seen at a load of 20
				// on two cores).
				const ttl = 15 * time.Second
				l, err := lk.TryObtain(ctx, faultKey, &tasklock.ObtainOptions{TTL: ttl})
				if err != nil {
					t.Fatal(err)
				}
				last = l.Fence()
				start := time.Now()
				srv.Restart(t)
				t.Logf("restart took %v", time.Since(start).Round(time.Millisecond))
				for len(ev) > 0 { // events from before and during the restart
					<-ev
				}
				// Renewed every TTL/3: the next renewal may be that far off.
				waitEvent(t, ev, tasklock.EventRenewed, ttl/3+5*time.Second)
				select {
				case <-l.Done():
					t.Fatalf("lease lost across a short restart: %v", l.Err())
				default:
				}
				if _, err := b.TryObtain(ctx, faultKey, nil); !errors.Is(err, tasklock.ErrNotObtained) {
					t.Fatalf("another TryObtain after the restart: %v, want ErrNotObtained", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}

			// Down past the lease (lease mode), or any restart (connection
			// mode): the holder learns of the loss.
			l, err := lk.TryObtain(ctx, faultKey, &tasklock.ObtainOptions{TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if l.Fence() <= last {
				t.Fatalf("fence %d after %d", l.Fence(), last)
			}
			down := time.Now()
			if mode == ModeLease {
				srv.Kill(t)
			} else {
				srv.Restart(t)
			}
			select {
			case <-l.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the holder was not told of the loss")
			}
			t.Logf("%s: holder told %v after the server went down: %v", mode, time.Since(down).Round(time.Millisecond), l.Err())
			if !errors.Is(l.Err(), tasklock.ErrLockLost) {
				t.Fatalf("cause %v, want ErrLockLost", l.Err())
			}
			if mode == ModeLease {
				srv.Restart(t)
			}
			l2, err := b.Obtain(ctx, faultKey, nil)
			if err != nil {
				t.Fatal(err)
			}
			if l2.Fence() <= l.Fence() {
				t.Fatalf("fence %d after the restart, not above %d", l2.Fence(), l.Fence())
			}
			t.Logf("%s: fences %d, then %d after the restart", mode, l.Fence(), l2.Fence())
			_ = l2.Release(ctx)
		})
	}
}

// waitEvent waits for an event of type typ.
func waitEvent(t *testing.T, ev <-chan tasklock.Event, typ tasklock.EventType, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e := <-ev:
			if e.Type == typ {
				return
			}
		case <-timeout:
			t.Fatalf("no %v event within %v", typ, d)
		}
	}
}

// TestRestartExclusive: in connection mode a server restart frees every
// GET_LOCK at once, while the old holder goes on until its next renewal
// fails. A contender that obtains the key after the restart must still
// not get it while the old holder's Done is open. Holder a obtains the
// key, b waits for it in Obtain, and the server is restarted (SIGKILL and
// start); this repeats MYSQLSTORE_RESTARTS times (default 10), and every
// time b's grant must come after a's Done closed.
func TestRestartExclusive(t *testing.T) {
	t.Parallel()
	restarts := 10
	if s := os.Getenv("MYSQLSTORE_RESTARTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MYSQLSTORE_RESTARTS=%q: want a positive number", s)
		}
		restarts = n
	}
	srv := testserver.StartMariaDB(t)
	dsn := srv.CreateDB(t)
	sa := mustNew(t, openDB(t, dsn), &Options{Mode: ModeConnection, Migrate: true})
	sb := mustNew(t, openDB(t, dsn), &Options{Mode: ModeConnection})
	a := faulttest.NewLocker(t, sa, tasklock.Config{Owner: "a", Logger: faulttest.QuietLogger})
	b := faulttest.NewLocker(t, sb, tasklock.Config{Owner: "b", Logger: faulttest.QuietLogger})
	const ttl = 2 * time.Second
	opts := &tasklock.ObtainOptions{TTL: ttl}
	overlaps := 0
	var waits []time.Duration
	for i := range restarts {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		la, err := a.Obtain(ctx, faultKey, opts)
		if err != nil {
			cancel()
			t.Fatalf("restart %d: a: %v", i, err)
		}
		aDone := make(chan time.Time, 1)
		go func() { <-la.Done(); aDone <- time.Now() }()
		type result struct {
			l   *tasklock.Lock
			err error
			at  time.Time
		}
		bGot := make(chan result, 1)
		go func() {
			l, err := b.Obtain(ctx, faultKey, opts)
			bGot <- result{l, err, time.Now()}
		}()
		start := time.Now()
		srv.Restart(t)
		up := time.Now()
		var r result
		select {
		case r = <-bGot:
		case <-time.After(20 * time.Second):
			cancel()
			t.Fatalf("restart %d: b did not obtain within 20s of the restart", i)
		}
		if r.err != nil {
			cancel()
			t.Fatalf("restart %d: b: %v", i, r.err)
		}
		var doneAt time.Time
		select {
		case doneAt = <-aDone:
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("restart %d: a's Done did not close within 10s of b's grant", i)
		}
		waits = append(waits, r.at.Sub(up).Round(time.Millisecond))
		if doneAt.After(r.at) {
			overlaps++
			t.Errorf("restart %d: b obtained %v after the server was back, %v before a's Done closed (%v): two holders",
				i, r.at.Sub(up).Round(time.Millisecond), doneAt.Sub(r.at).Round(time.Millisecond), la.Err())
		}
		if r.l.Fence() <= la.Fence() {
			t.Errorf("restart %d: fence %d after %d", i, r.l.Fence(), la.Fence())
		}
		if err := r.l.Release(ctx); err != nil {
			t.Errorf("restart %d: b's release: %v", i, err)
		}
		_ = la.Release(ctx) // lost already: ErrNotHeld
		cancel()
		t.Logf("restart %d took %v; b obtained %v after the server was back", i, up.Sub(start).Round(time.Millisecond), r.at.Sub(up).Round(time.Millisecond))
	}
	t.Logf("%d restarts, %d with two holders; b's grants after the server was back: %v", restarts, overlaps, waits)
}

// TestReleaseDuringHungRenewal: connection mode, the server is SIGSTOPped
// while a renewal (a ping) is under way on the lock's connection. A
// Release whose ctx ends after 1s returns ctx's error within 3s (it used
// to wait for the renewal, which ends only with its own ctx, a TTL
// later: 10 s), the renewal ends at once too, the connection is closed
// and no longer held, and once the server resumes the key is free.
func TestReleaseDuringHungRenewal(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	srv := testserver.StartMariaDB(t)
	s := mustNew(t, openDB(t, srv.CreateDB(t)), &Options{Mode: ModeConnection, Migrate: true})
	mustAcquire(t, s, "k", "tok-a", "a", ttl)
	s.mu.Lock()
	hc := s.held["tok-a"]
	s.mu.Unlock()
	if hc == nil {
		t.Fatal("the lock's connection is not held")
	}
	resume := sync.OnceFunc(func() { srv.Cont(t) })
	t.Cleanup(resume) // before the Store's, the pool's and the server's cleanups
	faulttest.ReleaseDuringHungRenewal(t, ttl, srv.Stop,
		func(ctx context.Context) error {
			res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: "tok-a", TTL: ttl}})
			return cmp.Or(err, res[0])
		},
		func(ctx context.Context) error { return s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "tok-a"}) },
		func() bool { return faulttest.Locked(&hc.mu) })
	if err := hc.conn.PingContext(ctxT(t)); !errors.Is(err, sql.ErrConnDone) {
		t.Errorf("the lock's connection: ping %v, want sql.ErrConnDone (closed)", err)
	}
	s.mu.Lock()
	n := len(s.held)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d connections still held", n)
	}
	// The server ends the closed session when it runs again, and with it
	// the lock.
	resume()
	faulttest.FreeWithin(t, 10*time.Second, func() error {
		_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: "tok-b", Owner: "b", TTL: time.Second})
		return err
	})
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: "tok-b"}); err != nil {
		t.Fatal(err)
	}
}
