package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
)

// Environment of the helper processes.
const (
	envDB    = "SQLITESTORE_TEST_DB"
	envIter  = "SQLITESTORE_TEST_ITER"
	envTTL   = "SQLITESTORE_TEST_TTL"
	envOwner = "SQLITESTORE_TEST_OWNER"
)

// helperFail reports a helper's failure on stdout, where the parent's
// nextLine shows it, and on stderr, and exits.
func helperFail(format string, args ...any) {
	msg := fmt.Sprintf("FAIL "+format, args...)
	fmt.Println(msg)
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}

// nextLine returns the helper's next stdout line that starts with prefix,
// failing the test on a FAIL line, on timeout, or when stdout closes. It
// reads Process.Lines rather than WaitLine, whose unlocked read of its
// change channel races with the reader goroutine under -race.
func nextLine(t *testing.T, h *testserver.Process, prefix string, timeout time.Duration) string {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-h.Lines():
			switch {
			case !ok:
				t.Fatalf("helper (pid %d) closed stdout without a line starting with %q", h.Pid(), prefix)
			case strings.HasPrefix(line, "FAIL "):
				t.Fatalf("helper (pid %d): %s", h.Pid(), line)
			case strings.HasPrefix(line, prefix):
				return line
			}
		case <-timer.C:
			t.Fatalf("helper (pid %d): no line starting with %q within %v", h.Pid(), prefix, timeout)
		}
	}
}

// helperStore opens the shared file the way a daemon would.
func helperStore() (*sql.DB, *Store) {
	db, err := Open(os.Getenv(envDB), nil)
	if err != nil {
		helperFail("%v", err)
	}
	s, err := New(db, nil) // the parent migrated
	if err != nil {
		helperFail("%v", err)
	}
	return db, s
}

// waitStart waits, in a helper process, for the parent's start signal (go
// = 1 in table start), for up to 30s.
func waitStart(db *sql.DB) {
	for deadline := time.Now().Add(30 * time.Second); ; {
		var g int
		if err := db.QueryRow(`SELECT go FROM start`).Scan(&g); err != nil {
			helperFail("%v", err)
		}
		if g == 1 {
			return
		}
		if time.Now().After(deadline) {
			helperFail("no start signal")
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}

// TestProcessesShareFile: four processes take turns on one lock in one
// file, and inside it increment a counter in another table with a read and
// a separate write, which loses updates unless the lock excludes. The final
// count is exact, fences increase in the order of the critical sections,
// and no SQLITE_BUSY reaches a caller: the workers' Obtain has no deadline,
// so a store error would end it at once and fail the worker.
func TestProcessesShareFile(t *testing.T) {
	if testserver.HelperRole() == "worker" {
		runWorker()
		os.Exit(0)
	}
	const workers, iterations = 4, 40
	path := dbPath(t)
	db := openT(t, path, nil)
	newStoreT(t, db)
	ctx := ctxT(t)
	for _, q := range []string{
		`CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)`,
		`INSERT INTO counter VALUES (1, 0)`,
		`CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, fence INTEGER NOT NULL, pid INTEGER NOT NULL, before INTEGER NOT NULL)`,
		`CREATE TABLE start (go INTEGER NOT NULL)`,
		`INSERT INTO start VALUES (0)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	hs := make([]*testserver.Process, workers)
	for i := range hs {
		hs[i] = testserver.StartHelper(t, "TestProcessesShareFile", "worker",
			envDB+"="+path, envIter+"="+strconv.Itoa(iterations), envOwner+"=worker-"+strconv.Itoa(i))
	}
	for _, h := range hs {
		nextLine(t, h, "READY", 30*time.Second)
	}
	start := time.Now()
	if _, err := db.ExecContext(ctx, `UPDATE start SET go = 1`); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		line := nextLine(t, h, "DONE ", 60*time.Second)
		if code := h.Wait(t, 10*time.Second); code != 0 {
			t.Fatalf("worker exited with %d", code)
		}
		t.Logf("pid %d: %s", h.Pid(), line)
		if !strings.Contains(line, " renewFailed=0") {
			t.Errorf("worker %d: renewals failed: %s", h.Pid(), line)
		}
	}
	t.Logf("%d processes × %d critical sections in %v", workers, iterations, time.Since(start))

	var n int
	if err := db.QueryRowContext(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != workers*iterations {
		t.Fatalf("counter = %d, want %d: updates were lost, the lock did not exclude", n, workers*iterations)
	}
	rows, err := db.QueryContext(ctx, `SELECT fence, pid, before FROM log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last int64
	pids := map[int]int{}
	i := 0
	for rows.Next() {
		var fence, before int64
		var pid int
		if err := rows.Scan(&fence, &pid, &before); err != nil {
			t.Fatal(err)
		}
		if fence <= last {
			t.Fatalf("critical section %d has fence %d after %d", i, fence, last)
		}
		if before != int64(i) {
			t.Fatalf("critical section %d read the counter as %d: sections overlapped", i, before)
		}
		last = fence
		pids[pid]++
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != workers*iterations || len(pids) != workers {
		t.Fatalf("%d critical sections by %d processes, want %d by %d", i, len(pids), workers*iterations, workers)
	}
}

func runWorker() {
	db, s := helperStore()
	n, _ := strconv.Atoi(os.Getenv(envIter))
	var renewFailed atomic.Int64
	lk, err := tasklock.New(s, &tasklock.Config{Owner: os.Getenv(envOwner), OnEvent: func(e tasklock.Event) {
		if e.Type == tasklock.EventRenewFailed {
			renewFailed.Add(1)
		}
	}})
	if err != nil {
		helperFail("%v", err)
	}
	fmt.Println("READY")
	waitStart(db)
	// No deadline: Obtain then returns any store error at once instead of
	// retrying it, so a SQLITE_BUSY that escaped would fail the worker.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := time.AfterFunc(60*time.Second, cancel)
	defer stop.Stop()
	pid := os.Getpid()
	for i := range n {
		l, err := lk.Obtain(ctx, "counter", &tasklock.ObtainOptions{TTL: 5 * time.Second})
		if err != nil {
			helperFail("obtain %d: %v", i, err)
		}
		var v int64
		if err := db.QueryRowContext(ctx, `SELECT n FROM counter WHERE id = 1`).Scan(&v); err != nil {
			helperFail("read: %v", err)
		}
		time.Sleep(200 * time.Microsecond) // widen the window a broken lock would show
		if _, err := db.ExecContext(ctx, `UPDATE counter SET n = ?1 WHERE id = 1`, v+1); err != nil {
			helperFail("write: %v", err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO log (fence, pid, before) VALUES (?1, ?2, ?3)`, int64(l.Fence()), pid, v); err != nil {
			helperFail("log: %v", err)
		}
		select {
		case <-l.Done():
			helperFail("lock ended inside the critical section: %v", l.Err())
		default:
		}
		if err := l.Release(ctx); err != nil {
			helperFail("release: %v", err)
		}
	}
	if err := lk.Close(); err != nil {
		helperFail("close: %v", err)
	}
	fmt.Printf("DONE %d renewFailed=%d\n", n, renewFailed.Load())
	_ = db.Close()
}

// runHolder obtains "job" and then works in 10 ms steps, checking Done
// before each: "WORK i gap=<ms since the previous check>" while it holds
// the lock, "LOST i gap=... cause=..." when it finds Done closed, followed
// by "RELEASE <error>" for its late Release. It exits after that, or runs
// until killed. The gap is read just before the check, so a WORK line with
// a gap longer than the TTL means the holder was paused and then went on
// working without noticing.
func runHolder() {
	_, s := helperStore()
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		helperFail("%v", err)
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: os.Getenv(envOwner)})
	if err != nil {
		helperFail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := lk.Obtain(ctx, "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		helperFail("%v", err)
	}
	fmt.Printf("LOCKED %d\n", l.Fence())
	last := time.Now()
	for i := 0; ; i++ {
		now := time.Now()
		gap := now.Sub(last)
		last = now
		select {
		case <-l.Done():
			fmt.Printf("LOST %d gap=%d cause=%v\n", i, gap.Milliseconds(), l.Err())
			fmt.Printf("RELEASE %v\n", l.Release(ctx))
			os.Exit(0)
		default:
		}
		fmt.Printf("WORK %d gap=%d\n", i, gap.Milliseconds())
		time.Sleep(10 * time.Millisecond) // a step of the holder's work
	}
}

// holderSetup starts a holder process on a fresh file and waits until it
// holds "job". It returns the parent's Locker on the same file, the
// helper, and the helper's fence.
func holderSetup(t *testing.T, testName string, ttl time.Duration) (*tasklock.Locker, *Store, *helper, uint64) {
	path := dbPath(t)
	s := newStoreT(t, openT(t, path, nil))
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	h := &helper{testserver.StartHelper(t, testName, "holder", envDB+"="+path, envTTL+"="+ttl.String(), envOwner+"=holder"), path}
	line := nextLine(t, h.Process, "LOCKED ", 30*time.Second)
	fence, err := strconv.ParseUint(strings.TrimPrefix(line, "LOCKED "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	nextLine(t, h.Process, "WORK ", 10*time.Second)
	_, err = lk.TryObtain(ctxT(t), "job", nil)
	var ne *tasklock.NotObtainedError
	if !errors.As(err, &ne) || ne.Owner != "holder" {
		t.Fatalf("TryObtain while the helper holds the lock = %v, want held by holder", err)
	}
	return lk, s, h, fence
}

// helper is a holder process and the file it uses.
type helper struct {
	*testserver.Process
	path string
}

// stopOutsideWrite SIGSTOPs the holder at a moment it holds no SQLite
// write lock, checked with probe (a pool with a short busy_timeout). A
// process stopped inside one of its statements keeps the write lock and
// stalls every writer on the file until it resumes (see the package
// documentation); that is not the scenario under test, so such a stop is
// undone and tried again.
func stopOutsideWrite(t *testing.T, h *helper, probe *sql.DB) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		h.Stop(t)
		conn, err := probe.Conn(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.ExecContext(ctxT(t), "BEGIN IMMEDIATE")
		if err == nil {
			_, err = conn.ExecContext(ctxT(t), "ROLLBACK")
		}
		conn.Close()
		switch {
		case err == nil:
			return
		case !isBusy(err):
			t.Fatal(err)
		case attempt == 20:
			t.Fatalf("the holder was stopped inside a write %d times in a row", attempt)
		}
		t.Logf("stop %d caught the holder inside a write; resuming it and stopping again", attempt)
		h.Cont(t)
		nextLine(t, h.Process, "WORK ", 10*time.Second)
	}
}

// TestHolderKilled: a holder SIGKILLed mid-work is replaced within TTL + 1s
// (design target P6), with a greater fence.
func TestHolderKilled(t *testing.T) {
	if testserver.HelperRole() == "holder" {
		runHolder()
		os.Exit(0)
	}
	const ttl = time.Second
	lk, _, h, fence := holderSetup(t, "TestHolderKilled", ttl)
	h.Kill(t)
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+2*time.Second)
	defer cancel()
	l, err := lk.Obtain(ctx, "job", nil)
	if err != nil {
		t.Fatalf("Obtain after the holder was killed: %v", err)
	}
	took := time.Since(killed)
	defer l.Release(context.Background())
	t.Logf("takeover %v after SIGKILL (TTL %v)", took, ttl)
	if took > ttl+time.Second {
		t.Fatalf("takeover took %v, want within TTL + 1s = %v", took, ttl+time.Second)
	}
	if l.Fence() <= fence {
		t.Fatalf("fence %d after the killed holder's %d", l.Fence(), fence)
	}
}

// TestHolderPaused: a holder SIGSTOPped past its TTL loses the lock to
// another process; when it resumes, the first Done check it makes is
// already closed (it never works on as if it held the lock), and its late
// Release does not touch the new holder's lease.
func TestHolderPaused(t *testing.T) {
	if testserver.HelperRole() == "holder" {
		runHolder()
		os.Exit(0)
	}
	const ttl = 600 * time.Millisecond
	lk, _, h, fence := holderSetup(t, "TestHolderPaused", ttl)
	stopOutsideWrite(t, h, openT(t, h.path, &Options{BusyTimeout: 100 * time.Millisecond}))
	stopped := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+5*time.Second)
	defer cancel()
	l, err := lk.Obtain(ctx, "job", nil)
	if err != nil {
		t.Fatalf("Obtain while the holder is stopped: %v", err)
	}
	t.Logf("obtained %v after SIGSTOP (TTL %v)", time.Since(stopped), ttl)
	if l.Fence() <= fence {
		t.Fatalf("fence %d after the paused holder's %d", l.Fence(), fence)
	}
	// Keep it stopped past its TTL, as the scenario says, however soon
	// the lease ended at the store.
	if rest := ttl + 100*time.Millisecond - time.Since(stopped); rest > 0 {
		time.Sleep(rest) // the length of the pause, not synchronisation
	}
	h.Cont(t)
	paused := time.Since(stopped)
	for {
		line := nextLine(t, h.Process, "", 10*time.Second)
		var i, gap int64
		if _, err := fmt.Sscanf(line, "WORK %d gap=%d", &i, &gap); err == nil {
			if time.Duration(gap)*time.Millisecond >= ttl {
				t.Fatalf("the holder resumed after %dms and worked on (%q): Done was not closed", gap, line)
			}
			continue
		}
		if !strings.HasPrefix(line, "LOST ") {
			t.Fatalf("unexpected line %q", line)
		}
		if _, err := fmt.Sscanf(line, "LOST %d gap=%d", &i, &gap); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(line, tasklock.ErrLockLost.Error()) {
			t.Fatalf("holder reported %q, want cause ErrLockLost", line)
		}
		t.Logf("holder paused %v, on resume: %s", paused, line)
		break
	}
	rel := nextLine(t, h.Process, "RELEASE ", 10*time.Second)
	if !strings.Contains(rel, tasklock.ErrNotHeld.Error()) {
		t.Fatalf("the paused holder's late Release: %q, want ErrNotHeld", rel)
	}
	if code := h.Wait(t, 10*time.Second); code != 0 {
		t.Fatalf("holder exited with %d", code)
	}
	select {
	case <-l.Done():
		t.Fatalf("the new holder's lock ended: %v", l.Err())
	default:
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("the new holder's Release: %v (its lease was touched)", err)
	}
}
