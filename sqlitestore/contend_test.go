package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// envContend sets how long the contention tests run (a Go duration);
// the acceptance run is SQLITESTORE_CONTEND=30s. Default: 4s.
const envContend = "SQLITESTORE_CONTEND"

// contendFor returns the contention tests' duration.
func contendFor(t testing.TB) time.Duration {
	s := os.Getenv(envContend)
	if s == "" {
		return 4 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", envContend, s)
	}
	return d
}

// TestCancelledCallLeavesNoWriteLock: a call whose context ends at any
// moment of its statement leaves no write lock behind: another pool on the
// file can always write within its busy timeout. With modernc.org/sqlite
// interrupting statements on ctx's end, a cancellation that lands after
// an UPDATE … RETURNING's first row left the statement unfinalized and the
// write lock held for good.
func TestCancelledCallLeavesNoWriteLock(t *testing.T) {
	path := dbPath(t)
	s := newStoreT(t, openT(t, path, nil))
	probe := newStoreT(t, openT(t, path, &Options{BusyTimeout: time.Second}))
	ctx := ctxT(t)
	deadline := time.Now().Add(3 * time.Second)
	n := 0
	for ; time.Now().Before(deadline); n++ {
		cctx, cancel := context.WithCancel(ctx)
		// Cancel at a random moment of the call (the point of the test).
		stop := time.AfterFunc(time.Duration(rand.IntN(200))*time.Microsecond, cancel)
		key := fmt.Sprintf("k%d", n%4)
		switch n % 4 {
		case 0:
			_, _ = s.Acquire(cctx, driver.AcquireParams{Key: key, Token: fmt.Sprint("t", n), TTL: time.Millisecond})
		case 1:
			_, _ = s.Renew(cctx, []driver.RenewParams{{Key: key, Token: fmt.Sprint("t", n-1), TTL: time.Millisecond}})
		case 2:
			_ = s.Release(cctx, driver.ReleaseParams{Key: key, Token: fmt.Sprint("t", n-2)})
		case 3:
			_, _ = s.AcquireBatch(cctx, []driver.AcquireParams{
				{Key: key, Token: fmt.Sprint("t", n), TTL: time.Millisecond},
				{Key: key + "b", Token: fmt.Sprint("t", n), TTL: time.Millisecond},
			})
		}
		stop.Stop()
		cancel()
		_, err := probe.Acquire(ctx, driver.AcquireParams{Key: "probe", Token: fmt.Sprint("p", n), TTL: time.Microsecond})
		var he *driver.HeldError
		if err != nil && !errors.As(err, &he) {
			t.Fatalf("after %d cancelled calls, another pool's write: %v", n+1, err)
		}
	}
	t.Logf("%d cancelled calls, none left the write lock held", n)
}

// contendStats is what contend measured.
type contendStats struct {
	grants, held, cancelled atomic.Int64

	mu      sync.Mutex
	maxCall time.Duration // longest TryObtain or Release
	callOp  string
	maxGap  time.Duration // longest time without a grant (in this process)
	errs    []string      // unexpected errors, first 10
}

func (st *contendStats) fail(format string, args ...any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.errs) < 10 {
		st.errs = append(st.errs, fmt.Sprintf(format, args...))
	}
}

func (st *contendStats) call(op string, d time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if d > st.maxCall {
		st.maxCall, st.callOp = d, op
	}
}

func (st *contendStats) String() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return fmt.Sprintf("grants=%d held=%d cancelled=%d maxCall=%v(%s) maxGap=%v errors=%d",
		st.grants.Load(), st.held.Load(), st.cancelled.Load(), st.maxCall.Round(time.Millisecond), st.callOp,
		st.maxGap.Round(time.Millisecond), len(st.errs))
}

// contend runs perLocker goroutines on each of lks, all on one key, for
// d: each loop is a blocking Obtain (its context has no deadline, so a
// store error such as ErrBusy ends it at once instead of being retried),
// a TryObtain, or an Obtain whose wait is cancelled after up to 20 ms.
// A grant holds the lock for a moment, checks that no other goroutine of
// the process holds it, and releases it. Every error other than "held" and
// a cancelled wait is recorded, as are the longest TryObtain or Release
// call and the longest time without a grant.
func contend(lks []*tasklock.Locker, perLocker int, d time.Duration) *contendStats {
	st := &contendStats{}
	var inside atomic.Int32
	start := time.Now()
	var lastGrant atomic.Int64 // ns since start
	gap := func(now time.Duration) {
		g := now - time.Duration(lastGrant.Swap(int64(now)))
		st.mu.Lock()
		st.maxGap = max(st.maxGap, g)
		st.mu.Unlock()
	}
	stopCtx, stop := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, stop)
	defer timer.Stop()
	opts := &tasklock.ObtainOptions{TTL: 2 * time.Second}
	var wg sync.WaitGroup
	for i, lk := range lks {
		for j := range perLocker {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 1))
				for n := 0; stopCtx.Err() == nil; n++ {
					var (
						l   *tasklock.Lock
						err error
						op  string
					)
					switch n % 3 {
					case 0:
						op = "Obtain"
						l, err = lk.Obtain(stopCtx, "job", opts)
					case 1:
						op = "TryObtain"
						t0 := time.Now()
						l, err = lk.TryObtain(stopCtx, "job", opts)
						st.call(op, time.Since(t0))
					case 2:
						op = "cancelled Obtain"
						ctx, cancel := context.WithCancel(stopCtx)
						t := time.AfterFunc(time.Duration(r.IntN(20_000))*time.Microsecond, cancel)
						l, err = lk.Obtain(ctx, "job", opts)
						t.Stop()
						cancel()
						if err != nil && ctx.Err() != nil && stopCtx.Err() == nil {
							if !errors.Is(err, context.Canceled) {
								st.fail("%s: %v", op, err)
							}
							st.cancelled.Add(1)
							continue
						}
					}
					switch {
					case err == nil:
					case errors.Is(err, tasklock.ErrNotObtained) && op == "TryObtain":
						st.held.Add(1)
						continue
					case stopCtx.Err() != nil && errors.Is(err, context.Canceled):
						return
					default:
						st.fail("%s: %v", op, err)
						continue
					}
					gap(time.Since(start))
					st.grants.Add(1)
					if inside.Add(1) != 1 {
						st.fail("two holders of one lock in one process")
					}
					for range r.IntN(50) {
						select {
						case <-l.Done():
							st.fail("lock lost while held: %v", l.Err())
						default:
						}
					}
					inside.Add(-1)
					t0 := time.Now()
					if err := l.Release(context.Background()); err != nil {
						st.fail("Release: %v", err)
					}
					st.call("Release", time.Since(t0))
				}
			}(uint64(i*perLocker + j))
		}
	}
	wg.Wait()
	gap(time.Since(start))
	return st
}

// check fails t if st saw an error, a call or a gap between grants longer
// than busy, or no grants.
func (st *contendStats) check(t *testing.T, who string, busy time.Duration) {
	t.Helper()
	t.Logf("%s: %v", who, st)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range st.errs {
		t.Errorf("%s: %s", who, e)
	}
	if st.maxCall >= busy {
		t.Errorf("%s: a %s took %v, not less than the busy timeout %v", who, st.callOp, st.maxCall, busy)
	}
	if st.maxGap >= busy {
		t.Errorf("%s: no grant for %v, not less than the busy timeout %v", who, st.maxGap, busy)
	}
	if st.grants.Load() == 0 {
		t.Errorf("%s: no grants", who)
	}
}

// contenders opens n Stores on path, each with its own *sql.DB opened with
// Open, and a Locker for each.
func contenders(t *testing.T, path string, n int) []*tasklock.Locker {
	lks := make([]*tasklock.Locker, n)
	for i := range lks {
		s := newStoreT(t, openT(t, path, nil))
		lk, err := tasklock.New(s, &tasklock.Config{Owner: fmt.Sprintf("store-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close() })
		lks[i] = lk
	}
	return lks
}

// TestStoresContend: eight Stores in one process, each with its own
// *sql.DB from Open, contend for one key with blocking, non-blocking and
// cancelled obtains; they keep handing the lock over, with no error
// (ErrBusy included) and no stall as long as the busy timeout.
func TestStoresContend(t *testing.T) {
	lks := contenders(t, dbPath(t), 8)
	st := contend(lks, 2, contendFor(t))
	st.check(t, "8 Stores", DefaultBusyTimeout)
}

// TestNewWhileStoresContend: New with Options.Migrate on a migrated file
// needs no write lock — it succeeds while another connection holds it —
// and Stores keep being opened and migrated while eight others contend,
// none failing with ErrBusy.
func TestNewWhileStoresContend(t *testing.T) {
	path := dbPath(t)
	newStoreT(t, openT(t, path, nil))

	// Another connection holds the write lock: New must not need it.
	ctx := ctxT(t)
	conn, err := openT(t, path, nil).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(openT(t, path, &Options{BusyTimeout: 50 * time.Millisecond}), &Options{Migrate: true}); err != nil {
		t.Errorf("New with Migrate on a migrated file while another connection writes: %v", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	d := contendFor(t)
	lks := contenders(t, path, 8)
	var (
		opened  atomic.Int64
		newErrs = make(chan error, 1)
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for deadline := time.Now().Add(d); time.Now().Before(deadline); {
			db, err := Open(path, nil)
			if err == nil {
				_, err = New(db, &Options{Migrate: true})
				db.Close()
			}
			if err != nil {
				newErrs <- err
				return
			}
			opened.Add(1)
		}
	}()
	st := contend(lks, 2, d)
	<-done
	select {
	case err := <-newErrs:
		t.Errorf("Open and New while Stores contend: %v", err)
	default:
	}
	t.Logf("%d Stores opened and migrated while 8 contended", opened.Load())
	st.check(t, "8 Stores", DefaultBusyTimeout)
}

// TestProcessesContend: four processes on one file, each with a Store (its
// *sql.DB from Open, migrated by New) and a Locker run by four goroutines,
// contend for one key as in TestStoresContend; each reports its
// measurements, and none may see an error or a stall.
func TestProcessesContend(t *testing.T) {
	d := contendFor(t)
	if testserver.HelperRole() == "contender" {
		runContender(d)
		os.Exit(0)
	}
	const procs = 4
	path := dbPath(t)
	db := openT(t, path, nil)
	newStoreT(t, db)
	ctx := ctxT(t)
	for _, q := range []string{`CREATE TABLE start (go INTEGER NOT NULL)`, `INSERT INTO start VALUES (0)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	hs := make([]*testserver.Process, procs)
	for i := range hs {
		hs[i] = testserver.StartHelper(t, "TestProcessesContend", "contender",
			envDB+"="+path, envOwner+"=proc-"+strconv.Itoa(i))
	}
	for _, h := range hs {
		nextLine(t, h, "READY", 30*time.Second)
	}
	if _, err := db.ExecContext(ctx, `UPDATE start SET go = 1`); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		line := nextLine(t, h, "DONE ", d+60*time.Second)
		if code := h.Wait(t, 10*time.Second); code != 0 {
			t.Fatalf("contender exited with %d", code)
		}
		t.Logf("pid %d: %s", h.Pid(), line)
		if !strings.Contains(line, " errors=0") || strings.Contains(line, " grants=0 ") {
			t.Errorf("pid %d: %s", h.Pid(), line)
		}
	}
}

// runContender is a TestProcessesContend process: it waits for the start
// signal, contends for d, prints "DONE <stats>", "ERR <error>" lines and,
// when a call or gap reached the busy timeout, a "STALL" line (which makes
// the parent's check fail through errors=).
func runContender(d time.Duration) {
	db, err := Open(os.Getenv(envDB), nil)
	if err != nil {
		helperFail("%v", err)
	}
	s, err := New(db, &Options{Migrate: true})
	if err != nil {
		helperFail("%v", err)
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: os.Getenv(envOwner)})
	if err != nil {
		helperFail("%v", err)
	}
	fmt.Println("READY")
	waitStart(db)
	st := contend([]*tasklock.Locker{lk}, 4, d)
	for _, e := range st.errs {
		fmt.Println("ERR", e)
	}
	if st.maxCall >= DefaultBusyTimeout || st.maxGap >= DefaultBusyTimeout {
		st.fail("stall: longest call %v, longest gap %v", st.maxCall, st.maxGap)
	}
	fmt.Println("DONE", st)
	_ = lk.Close()
	_ = db.Close()
}
