package mysqlfault

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/mysqlstore"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) {
	// go-sql-driver logs broken connections to stderr; the fault tests
	// break many on purpose.
	_ = mysql.SetLogger(quietLogger{})
	os.Exit(testserver.Main(m, proxy.IgnoreToxics))
}

type quietLogger struct{}

func (quietLogger) Print(...any) {}

var modes = []mysqlstore.Mode{mysqlstore.ModeLease, mysqlstore.ModeConnection}

const faultKey = "fault"

// warmConns is how many connections openDB opens up front.
const warmConns = 8

// openDB opens a pool on dsn, closed at cleanup, with warmConns
// connections opened at once and kept idle.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxIdleConns(2 * warmConns)
	ctx := ctxT(t)
	conns := make([]*sql.Conn, warmConns)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	return db
}

// newStore makes a store on a fresh database of the shared server.
func newStore(t testing.TB, mode mysqlstore.Mode) (*mysqlstore.Store, string) {
	t.Helper()
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	return mustNew(t, openDB(t, dsn), &mysqlstore.Options{Mode: mode, Migrate: true}), dsn
}

// mustNew returns a Store that is closed at cleanup, before db is.
func mustNew(t testing.TB, db *sql.DB, opts *mysqlstore.Options) *mysqlstore.Store {
	t.Helper()
	s, err := mysqlstore.New(db, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newFaultLocker(t *testing.T, s *mysqlstore.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner})
}

// TestBlackhole: the network between a holder and the database silently
// drops everything. The holder's Done closes while the database still
// considers the lock its own; another client obtains it only afterwards.
func TestBlackhole(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			const ttl = time.Second
			srv := testserver.SharedMariaDB(t)
			s, dsn := newStore(t, mode)
			proxy := proxy.Start(t, srv.Addr())
			viaProxy := strings.Replace(dsn, srv.Addr(), proxy.Addr(), 1)
			sA := mustNew(t, openDB(t, viaProxy), &mysqlstore.Options{Mode: mode})
			a := newFaultLocker(t, sA, "a")
			b := newFaultLocker(t, s, "b")
			ctx := ctxT(t)

			la, err := a.TryObtain(ctx, faultKey, &tasklock.ObtainOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			proxy.Blackhole(t)
			cut := time.Now()
			got := obtainAfter(la, func() (*tasklock.Lock, error) {
				return b.Obtain(ctx, faultKey, &tasklock.ObtainOptions{TTL: 5 * time.Second})
			})
			awaitLoss(t, s, la, cut, string(mode)+": A")
			g := checkGrant(t, <-got, la, cut, string(mode)+": B")
			proxy.Restore(t)
			releaseAfterPartition(t, ctx, la, "A")
			_ = g.l.Release(ctx)
		})
	}
}

// holderIsLive reports whether the database still holds l's lock for it:
// its row unexpired (lease mode), or its lock name in use (connection
// mode), with l's fence. It reads through s's Leases, which asks exactly
// that.
func holderIsLive(t *testing.T, s *mysqlstore.Store, l *tasklock.Lock) bool {
	t.Helper()
	ls, err := s.Leases(ctxT(t), l.Key())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ls {
		if x.Key == l.Key() && x.Fence == l.Fence() {
			return true
		}
	}
	return false
}

// TestBlackholePermit: the holder of one of a semaphore's two permits is
// cut off from the database by a blackhole while another Locker holds the
// other permit and a third waits for one. The cut-off holder's Done closes
// within its TTL of the cut, while the database still counts its permit;
// the waiter gets a permit only after that, with a higher fence. Every
// holder runs critical sections while it holds, and a log of them
// (faulttest.Sections) shows never more than two at once.
func TestBlackholePermit(t *testing.T) {
	t.Parallel()
	const (
		ttl     = time.Second
		permits = 2
	)
	srv := testserver.SharedMariaDB(t)
	s, dsn := newStore(t, mysqlstore.ModeLease)
	proxy := proxy.Start(t, srv.Addr())
	viaProxy := strings.Replace(dsn, srv.Addr(), proxy.Addr(), 1)
	sA := mustNew(t, openDB(t, viaProxy), nil)
	a := newFaultLocker(t, sA, "a")
	b := newFaultLocker(t, s, "b")
	c := newFaultLocker(t, s, "c")
	ctx := ctxT(t)
	var log faulttest.Sections

	la, err := a.Semaphore(faultKey, permits).TryAcquire(ctx, &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Each section's act lasts a moment, to widen the window an overlap
	// would show in.
	work := func() { time.Sleep(2 * time.Millisecond) }
	stopA := log.Loop("a", la, work)
	lb, err := b.Semaphore(faultKey, permits).TryAcquire(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stopB := log.Loop("b", lb, work)
	if _, err := c.Semaphore(faultKey, permits).TryAcquire(ctx, nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("a third permit: %v, want ErrNotObtained", err)
	}
	proxy.Blackhole(t)
	cut := time.Now()
	closedInTime := faulttest.LookAt(la, cut.Add(ttl))
	got := obtainAfter(la, func() (*tasklock.Lock, error) {
		return c.Semaphore(faultKey, permits).Acquire(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
	})
	awaitLoss(t, s, la, cut, "a")
	if !<-closedInTime {
		t.Fatalf("the cut-off holder's Done was open %v after the cut", ttl)
	}
	g := checkGrant(t, <-got, la, cut, "c")
	stopC := log.Loop("c", g.l, work)
	waitFor(t, 5*time.Second, "c's critical sections", func() bool {
		n := 0
		for _, sec := range log.List() {
			if sec.Holder == "c" {
				n++
			}
		}
		return n >= 5
	})
	stopA()
	stopB()
	stopC()
	most := faulttest.CheckSections(t, permits, log.List())
	t.Logf("%d critical sections, at most %d open at once", len(log.List()), most)
	assertOpen(t, lb) // b held its permit all along, beside a's and then c's
	if g.l.Fence() <= lb.Fence() {
		t.Fatalf("c's fence %d, after b's %d", g.l.Fence(), lb.Fence())
	}
	ls, err := s.Leases(ctx, faultKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) > permits {
		t.Fatalf("%d permits live at the database: %+v", len(ls), ls)
	}
	proxy.Restore(t)
	releaseAfterPartition(t, ctx, la, "a")
	_ = g.l.Release(ctx)
	_ = lb.Release(ctx)
}

// grant is what obtainAfter's obtain got, and when.
type grant struct {
	l      *tasklock.Lock
	at     time.Time
	err    error
	closed bool // the cut-off holder's Done was closed by then
}

// obtainAfter runs obtain on a goroutine, while the holder of cut is cut
// off, and sends its outcome, with whether cut's Done had closed by then.
func obtainAfter(cut *tasklock.Lock, obtain func() (*tasklock.Lock, error)) <-chan grant {
	got := make(chan grant, 1)
	go func() {
		l, err := obtain()
		g := grant{l: l, at: time.Now(), err: err}
		select {
		case <-cut.Done():
			g.closed = true
		default:
		}
		got <- g
	}()
	return got
}

// awaitLoss waits for l's Done after its holder was cut off at cut, and
// logs when it closed and whether the database still had l's lease then.
func awaitLoss(t *testing.T, s *mysqlstore.Store, l *tasklock.Lock, cut time.Time, who string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the partitioned holder's Done did not close", who)
	}
	doneAt := time.Now()
	// Informational: this read may come late on a busy machine.
	still := holderIsLive(t, s, l)
	t.Logf("%s's Done closed %v after the cut (%v); the database still had its lease when the test looked: %v",
		who, doneAt.Sub(cut).Round(time.Millisecond), l.Err(), still)
}

// checkGrant checks g, the grant that obtainAfter got for who while the
// holder of lost was cut off at cut: granted only once lost's Done had
// closed, with a higher fence, lost's cause ErrLockLost.
func checkGrant(t *testing.T, g grant, lost *tasklock.Lock, cut time.Time, who string) grant {
	t.Helper()
	if g.err != nil {
		t.Fatal(g.err)
	}
	t.Logf("%s obtained %v after the cut", who, g.at.Sub(cut).Round(time.Millisecond))
	if !g.closed {
		t.Fatalf("%s obtained while the cut-off holder's Done was still open", who)
	}
	if g.l.Fence() <= lost.Fence() {
		t.Fatalf("%s's fence %d after %d", who, g.l.Fence(), lost.Fence())
	}
	if !errors.Is(lost.Err(), tasklock.ErrLockLost) {
		t.Fatalf("the cut-off holder's cause %v, want ErrLockLost", lost.Err())
	}
	return g
}

// releaseAfterPartition releases l once the partition is over: its lease
// is gone, so Release says ErrNotHeld. The first attempts may fail on
// connections the proxy closed.
func releaseAfterPartition(t *testing.T, ctx context.Context, l *tasklock.Lock, who string) {
	t.Helper()
	var err error
	waitFor(t, 5*time.Second, who+"'s Release after the partition", func() bool {
		err = l.Release(ctx)
		return err == nil || errors.Is(err, tasklock.ErrNotHeld)
	})
	if !errors.Is(err, tasklock.ErrNotHeld) {
		t.Errorf("%s's Release after the partition: %v, want ErrNotHeld", who, err)
	}
}

// assertOpen fails the test when l's Done is closed.
func assertOpen(t *testing.T, l *tasklock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("%v hold of %q lost: %v", l.Mode(), l.Key(), l.Err())
	default:
	}
}
