// Package faulttest is the harness the stores' fault tests share: a lock
// holder run in a helper process (started with [testserver.StartHelper])
// that obtains a key and writes its fence to a store-kept fenced register
// while its lock's Done is open, reporting each step on stdout, and the
// parent side that starts it, waits for its lines, and pauses or kills it.
//
// Three line protocols exist, as the stores' tests grew them:
//
//   - [HolderMain] and [StartHolder]: "LOCKED <fence>", "WROTE" (the first
//     accepted write), "RESUMED after <gap>" (after a pause), then every
//     write tried ("WRITE <fence> accepted=<bool>" or "WRITE <fence> error
//     <err>"), and "LOST <cause>" when Done closes.
//   - [ReportingHolderMain] and [StartReportingHolder]: "obtained <fence>",
//     "write <ok> <err>" for every write, "resumed done=closed" (or
//     "done=closed ctx=open", or "done=open") after a gap longer than the
//     TTL, and "lost <cause>".
//   - [KindHolderMain] and [StartKindHolder], for a read side, a write
//     side or a semaphore's permit: "HELD <mode> <fence>", each critical
//     section as "ENTER" and "LEAVE" lines with the host clock's time,
//     "RESUMED done=closed|open" after a pause, and "LOST <cause>". The
//     parent logs its own holders' sections beside the holder's
//     ([Sections]) and counts overlaps ([CheckSections]); see kinds.go.
//
// How to build the store and the register from the helper's environment,
// and the server faults, stay with each store's tests.
//
// It sits beside storetest rather than under internal/ because it is built
// on the Locker (internal/ holds leaves that import nothing of ours above
// them); a third-party store's fault tests can use it the same way.
package faulttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/fence"
	"github.com/tasklock/tasklock/internal/testserver"
)

// Role is the helper role the holder process is started with.
const Role = "holder"

// Environment the parent passes to every holder process, besides the
// store's own variables.
const (
	EnvKey = "TASKLOCK_KEY" // the key to obtain
	EnvTTL = "TASKLOCK_TTL" // the lock's TTL, as time.ParseDuration reads it
)

// QuietLogger drops a Locker's warnings (an expected loss is not news).
var QuietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// WriteFunc makes one fenced write to the register and reports whether the
// register accepted it.
type WriteFunc func(ctx context.Context, fence uint64) (accepted bool, err error)

// SetupFunc builds, in the helper process, the store to obtain the key on
// and the register writer, from the environment; ttl is [EnvTTL].
type SetupFunc func(ttl time.Duration) (driver.Store, WriteFunc, error)

// NewLocker returns a Locker on s with cfg, closed when the test ends.
func NewLocker(t testing.TB, s driver.Store, cfg tasklock.Config) *tasklock.Locker {
	t.Helper()
	lk, err := tasklock.New(s, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// Obtain obtains key with lk, failing the test on error, and returns the
// lock and the time since start (the fault).
func Obtain(t testing.TB, lk *tasklock.Locker, key string, opts *tasklock.ObtainOptions, start time.Time) (*tasklock.Lock, time.Duration) {
	t.Helper()
	l, err := lk.Obtain(ctxT(t), key, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, time.Since(start)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// HolderMain is the body of a store's holder test function: in a normal
// run it skips; in a helper process started by [StartHolder] it builds the
// store with setup, obtains [EnvKey] as owner "helper" with TTL [EnvTTL],
// prints "LOCKED <fence>", and then writes its fence every 10ms while its
// lock's Done is open. After a pause (SIGSTOP) it prints "RESUMED", and
// every write it tries from then on; when Done closes it prints "LOST
// <cause>" and exits.
func HolderMain(t *testing.T, setup SetupFunc) {
	if testserver.HelperRole() != Role {
		t.Skip("runs only as a helper process started by testserver.StartHelper")
	}
	os.Exit(runHolder(setup))
}

func runHolder(setup SetupFunc) int {
	ttl, err := time.ParseDuration(os.Getenv(EnvTTL))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	s, write, err := setup(ttl)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "helper", Logger: QuietLogger})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	ctx := context.Background()
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := lk.Obtain(octx, os.Getenv(EnvKey), &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Printf("LOCKED %d\n", l.Fence())
	last := time.Now()
	resumed, wrote := false, false
	for {
		if gap := time.Since(last); gap > 200*time.Millisecond && !resumed {
			resumed = true
			fmt.Printf("RESUMED after %v\n", gap.Round(time.Millisecond))
		}
		last = time.Now()
		select {
		case <-l.Done():
			fmt.Printf("LOST %v\n", l.Err())
			return 0
		default:
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		ok, err := write(wctx, l.Fence())
		cancel()
		switch {
		case err != nil:
			fmt.Printf("WRITE %d error %v\n", l.Fence(), err)
		case resumed || !ok:
			fmt.Printf("WRITE %d accepted=%v\n", l.Fence(), ok)
		case !wrote:
			wrote = true
			fmt.Println("WROTE")
		}
		time.Sleep(10 * time.Millisecond) // the work between two writes
	}
}

// Holder is the parent's handle on a holder process.
type Holder struct {
	*testserver.Process
	// Fence is the fence of the lock the holder obtained.
	Fence uint64
}

// StartHolder starts test function name as a holder process that obtains
// key with ttl (env holds the store's own variables), and waits for its
// lock and its first accepted write.
func StartHolder(t *testing.T, name, key string, ttl time.Duration, env ...string) *Holder {
	t.Helper()
	env = append(env, EnvKey+"="+key, EnvTTL+"="+ttl.String())
	h := testserver.StartHelper(t, name, Role, env...)
	fence := fenceLine(t, h, "LOCKED ", 20*time.Second)
	h.WaitLine(t, "WROTE", 10*time.Second)
	return &Holder{Process: h, Fence: fence}
}

func fenceLine(t *testing.T, h *testserver.Process, prefix string, timeout time.Duration) uint64 {
	t.Helper()
	line := h.WaitLine(t, prefix, timeout)
	fence, err := strconv.ParseUint(strings.TrimPrefix(line, prefix), 10, 64)
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	return fence
}

// CheckResumed resumes a holder paused past its TTL (whose key another
// obtained meanwhile) and checks that it reports its loss and that none of
// the writes it tried after resuming was accepted, and that it exits with
// code 0. It logs what the holder said, prefixed with logPrefix.
func (h *Holder) CheckResumed(t *testing.T, logPrefix string) {
	t.Helper()
	h.Cont(t)
	lost := h.WaitLine(t, "LOST ", 5*time.Second)
	var after []string
	for drained := false; !drained; {
		select {
		case line := <-h.Lines():
			if strings.HasPrefix(line, "RESUMED") || strings.HasPrefix(line, "WRITE ") {
				after = append(after, line)
			}
		default:
			drained = true
		}
	}
	t.Logf("%sthe resumed holder said %q, after %q", logPrefix, after, lost)
	if !strings.Contains(lost, "tasklock: lock lost") {
		t.Errorf("holder's cause: %q, want a loss", lost)
	}
	for _, line := range after {
		if strings.Contains(line, "accepted=true") {
			t.Errorf("the resumed holder's write was accepted: %q", line)
		}
	}
	if code := h.Wait(t, 10*time.Second); code != 0 {
		t.Errorf("holder exit code %d", code)
	}
}

// ReportingHolderMain is the body of a holder test function with the
// second protocol: in a normal run it skips; in a helper process it builds
// the store with setup, obtains [EnvKey] as owner "holder" with TTL
// [EnvTTL], prints "obtained <fence>", and while Done is open writes its
// fence every 10ms, printing "write <ok> <err>". After a gap longer than
// the TTL (it was stopped) it prints whether its lock's Context had ended
// and Done was closed before doing anything else ("resumed done=closed",
// or "done=closed ctx=open", or "done=open"); when Done closes it prints
// "lost <cause>" and exits.
func ReportingHolderMain(t *testing.T, setup SetupFunc) {
	if testserver.HelperRole() != Role {
		t.Skip("helper process for the fault tests")
	}
	ttl, _ := time.ParseDuration(os.Getenv(EnvTTL))
	s, write, err := setup(ttl)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "holder"})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx := context.Background()
	l, err := lk.Obtain(ctx, os.Getenv(EnvKey), &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("obtained", l.Fence())
	lctx := l.Context()
	last := time.Now()
	for {
		gap := time.Since(last)
		last = time.Now()
		if gap > ttl {
			// The context first: Done looks at the deadline itself and
			// would end the context too.
			ctxEnded := lctx.Err() != nil
			select {
			case <-l.Done():
				if ctxEnded {
					fmt.Println("resumed done=closed")
				} else {
					fmt.Println("resumed done=closed ctx=open")
				}
			default:
				fmt.Println("resumed done=open")
			}
		}
		select {
		case <-l.Done():
			fmt.Println("lost", l.Err())
			os.Exit(0)
		default:
		}
		ok, err := write(ctx, l.Fence())
		fmt.Println("write", ok, err)
		time.Sleep(10 * time.Millisecond) // one unit of work
	}
}

// StartReportingHolder starts test function name as a holder process of
// the second protocol that obtains key with ttl (env holds the store's own
// variables), and waits for its lock and its first accepted write.
func StartReportingHolder(t *testing.T, name, key string, ttl time.Duration, env ...string) *Holder {
	t.Helper()
	env = append(env, EnvKey+"="+key, EnvTTL+"="+ttl.String())
	h := testserver.StartHelper(t, name, Role, env...)
	line := h.WaitLine(t, "obtained ", 10*time.Second)
	fence, err := strconv.ParseUint(strings.TrimPrefix(line, "obtained "), 10, 64)
	if err != nil {
		t.Fatalf("bad line %q", line)
	}
	h.WaitLine(t, "write true", 5*time.Second)
	return &Holder{Process: h, Fence: fence}
}

// Work is an in-process holder's critical section: it writes the lock's
// fence to Reg every 5ms until the lock's Done closes.
type Work struct {
	// Reg is the register the work writes to.
	Reg  fence.Register
	mu   sync.Mutex
	last time.Time // the last accepted write
	done chan struct{}
}

// StartWork starts l's critical section and waits up to 5s for its first
// accepted write.
func StartWork(t *testing.T, l *tasklock.Lock) *Work {
	t.Helper()
	w := &Work{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-l.Done():
				return
			default:
			}
			if w.Reg.Write(l.Fence()) == nil {
				w.mu.Lock()
				w.last = time.Now()
				w.mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond) // the work between two writes
		}
	}()
	const d = 5 * time.Second
	deadline := time.Now().Add(d)
	for {
		if a, _ := w.Reg.Counts(); a > 0 {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("a write: not within %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Wait waits for the critical section to end and returns the time of its
// last accepted write.
func (w *Work) Wait() time.Time {
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// CheckStale writes newFence, which must be accepted, and then oldFence,
// which must be refused as stale.
func (w *Work) CheckStale(t *testing.T, oldFence, newFence uint64) {
	t.Helper()
	if err := w.Reg.Write(newFence); err != nil {
		t.Fatal(err)
	}
	if err := w.Reg.Write(oldFence); !errors.Is(err, tasklock.ErrStaleFence) {
		t.Errorf("a late write of the old holder: %v, want ErrStaleFence", err)
	}
}

// Takeover is what [Work.AwaitTakeover] saw after a fault cut the holder
// of Old off at Cut.
type Takeover struct {
	Old, New   *tasklock.Lock
	Cut        time.Time // when the fault began
	DoneAt     time.Time // when Old's Done closed
	ObtainedAt time.Time // when the other obtained New
	LastWrite  time.Time // the old holder's last accepted write
}

// AwaitTakeover has other obtain key with opts (from context.Background)
// while the work of old, whose holder a fault cut off at cut, goes on. It
// fails the test when old's Done does not close within limit (the message
// says "within " + within) or the other does not obtain.
func (w *Work) AwaitTakeover(t *testing.T, old *tasklock.Lock, other *tasklock.Locker, key string, opts *tasklock.ObtainOptions, cut time.Time, limit time.Duration, within string) *Takeover {
	t.Helper()
	got := make(chan time.Time, 1)
	var l2 *tasklock.Lock
	go func() {
		var err error
		l2, err = other.Obtain(context.Background(), key, opts)
		if err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	select {
	case <-old.Done():
	case <-time.After(limit):
		t.Fatalf("the blackholed holder's Done did not close within %s", within)
	}
	tk := &Takeover{Old: old, Cut: cut, DoneAt: time.Now()}
	tk.LastWrite = w.Wait()
	tk.ObtainedAt = <-got
	if l2 == nil {
		t.FailNow()
	}
	tk.New = l2
	return tk
}

// Check logs the takeover, prefixed with logPrefix, and checks that the
// old holder's cause is ErrLockLost, that the other obtained after the old
// holder's Done and last write, with a higher fence, and that the register
// refuses a late write of the old holder.
func (tk *Takeover) Check(t *testing.T, w *Work, logPrefix string) {
	t.Helper()
	cut := tk.Cut
	t.Logf("%sholder's Done closed %v after the cut (%v); other obtained %v after the cut", logPrefix,
		tk.DoneAt.Sub(cut).Round(time.Millisecond), tk.Old.Err(), tk.ObtainedAt.Sub(cut).Round(time.Millisecond))
	if !errors.Is(tk.Old.Err(), tasklock.ErrLockLost) {
		t.Errorf("holder's cause %v, want ErrLockLost", tk.Old.Err())
	}
	if !tk.ObtainedAt.After(tk.DoneAt) || !tk.ObtainedAt.After(tk.LastWrite) {
		t.Errorf("the other obtained at +%v, before the holder's Done (+%v) or last write (+%v)",
			tk.ObtainedAt.Sub(cut), tk.DoneAt.Sub(cut), tk.LastWrite.Sub(cut))
	}
	if tk.New.Fence() <= tk.Old.Fence() {
		t.Errorf("fence %d after %d", tk.New.Fence(), tk.Old.Fence())
	}
	w.CheckStale(t, tk.Old.Fence(), tk.New.Fence())
}

// ObtainAfterDone has b obtain key with opts after a fault cut the holder
// of la off at cut, and fails the test unless la's Done had closed by
// then. It returns b's lock and when la's Done closed and b obtained.
func ObtainAfterDone(t *testing.T, la *tasklock.Lock, b *tasklock.Locker, key string, opts *tasklock.ObtainOptions, cut time.Time) (lb *tasklock.Lock, doneAt, bAt time.Time) {
	t.Helper()
	aDone := make(chan time.Time, 1)
	go func() { <-la.Done(); aDone <- time.Now() }()
	lb, err := b.Obtain(ctxT(t), key, opts)
	if err != nil {
		t.Fatal(err)
	}
	bAt = time.Now()
	select {
	case <-la.Done():
	default:
		t.Fatalf("b obtained %v after the cut while a's Done was still open", bAt.Sub(cut))
	}
	// Closed: the goroutine has the time, or will have it at once (later
	// than Done closed when it runs late).
	return lb, <-aDone, bAt
}

// LookAt looks at l's Done at deadline and reports on the returned channel
// whether it was closed then. Done checks the lock's local validity
// itself, so the answer does not depend on how late the Locker's
// goroutines run on a busy machine: after a cut at time c that no renewal
// gets through, a look at c + TTL must find Done closed (the last renewal
// that succeeded was sent before c).
func LookAt(l *tasklock.Lock, deadline time.Time) <-chan bool {
	closed := make(chan bool, 1)
	time.AfterFunc(time.Until(deadline), func() {
		select {
		case <-l.Done():
			closed <- true
		default:
			closed <- false
		}
	})
	return closed
}

// RefuseStale writes newFence to reg, which must be accepted, and then
// oldFence, which must be refused as stale; it stops the test otherwise.
func RefuseStale(t *testing.T, reg *fence.Register, oldFence, newFence uint64) {
	t.Helper()
	if err := reg.Write(newFence); err != nil {
		t.Fatal(err)
	}
	if err := reg.Write(oldFence); !errors.Is(err, tasklock.ErrStaleFence) {
		t.Fatalf("a late write by a = %v, want ErrStaleFence", err)
	}
}

// Write is one write a store-kept register accepted.
type Write struct {
	Fence  uint64
	Writer string
}

// CheckHistory fails when an accepted write's fence in hist (in the order
// the register accepted them) is below an earlier one, or when writer
// "helper" (the holder process) wrote after the first write with fence
// from, and returns how many writes each writer made.
func CheckHistory(t testing.TB, hist []Write, from uint64) map[string]int {
	t.Helper()
	counts := map[string]int{}
	var highest uint64
	taken := false
	for i, w := range hist {
		counts[w.Writer]++
		if w.Fence < highest {
			t.Errorf("history[%d]: write with fence %d accepted after fence %d", i, w.Fence, highest)
		}
		highest = max(highest, w.Fence)
		if w.Fence >= from {
			taken = true
		}
		if taken && w.Writer == "helper" {
			t.Errorf("history[%d]: the old holder wrote (fence %d) after the new holder's fence %d", i, w.Fence, from)
		}
	}
	return counts
}

// ServerPaused checks calls with no deadline of the caller's to a store
// whose server pause stops (SIGSTOP: its sockets stay open, and silent):
// a TryObtain of b's ends with the store's error within its lease's TTL
// and an eighth, the Release of a lock a held within 6 s (the Locker's
// bounds: 5 s and an eighth), and once resume has run, b obtains a lock
// again.
func ServerPaused(t testing.TB, a, b *tasklock.Locker, pause, resume func(testing.TB)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := a.Obtain(ctx, "held", &tasklock.ObtainOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	pause(t)
	Unanswered(t, "TryObtain", ttl+ttl/8, func() error {
		_, err := b.TryObtain(context.Background(), "job", &tasklock.ObtainOptions{TTL: ttl})
		return err
	})
	Unanswered(t, "Release", 6*time.Second, func() error { return held.Release(context.Background()) })
	resume(t)
	l, err := b.Obtain(ctx, "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("after the server resumed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Unanswered runs call, a call made with no deadline to a store that does
// not answer (paused, down), and fails the test unless it returns an error
// within limit (and a second more, for a busy machine). It returns that
// error.
func Unanswered(t testing.TB, what string, limit time.Duration, call func() error) error {
	t.Helper()
	start := time.Now()
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	select {
	case err := <-errc:
		took := time.Since(start)
		t.Logf("%s to a store that does not answer, with no deadline: %v after %v", what, err, took.Round(time.Millisecond))
		switch {
		case err == nil || errors.Is(err, tasklock.ErrNotObtained):
			t.Errorf("%s to a store that does not answer: %v, want the store's error", what, err)
		case took > limit+time.Second:
			t.Errorf("%s took %v, want at most %v", what, took, limit)
		}
		return err
	case <-time.After(limit + 10*time.Second): // a bound on a hang, far above the limit
		t.Fatalf("%s to a store that does not answer, with no deadline, had not returned %v later", what, limit+10*time.Second)
		return nil
	}
}

// ReleaseDuringHungRenewal checks a connection-mode Release (a lock held
// on a connection of its own) made while a renewal of the lock is under
// way on that connection and the server, paused by pause, does not answer
// it: renew runs the renewal (its ctx has a TTL's deadline); renewing
// reports whether it holds the lock's connection. A Release whose ctx
// ends after 1 s returns ctx's error within 3 s, and the renewal then
// ends with driver.ErrNotHeld within 3 s too. It returns with the server
// still paused, for the caller to check the connection.
func ReleaseDuringHungRenewal(t testing.TB, ttl time.Duration, pause func(testing.TB), renew, release func(context.Context) error, renewing func() bool) {
	t.Helper()
	pause(t)
	renewed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ttl)
		defer cancel()
		renewed <- renew(ctx)
	}()
	for deadline := time.Now().Add(5 * time.Second); !renewing(); {
		if time.Now().After(deadline) {
			t.Fatal("the renewal did not take the lock's connection within 5s")
		}
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := release(ctx)
	took := time.Since(start)
	t.Logf("Release with a 1s deadline during a hung renewal (TTL %v): %v after %v", ttl, err, took.Round(time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release: %v, want ctx's error", err)
	}
	if took > 3*time.Second {
		t.Errorf("Release took %v, want about 1s (its ctx's deadline)", took)
	}
	select {
	case err := <-renewed:
		if !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("the hung renewal: %v, want ErrNotHeld", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the hung renewal had not returned 3s after Release")
	}
}

// FreeWithin polls acquire (an attempt to take a key) until it succeeds,
// failing the test after d.
func FreeWithin(t testing.TB, d time.Duration, acquire func() error) {
	t.Helper()
	for deadline := time.Now().Add(d); ; {
		err := acquire()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key is not free %v later: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond) // a poll's interval
	}
}

// Locked reports whether something holds mu (a store's lock on one of its
// connections, say) at the moment it looks.
func Locked(mu *sync.Mutex) bool {
	if !mu.TryLock() {
		return true
	}
	mu.Unlock()
	return false
}
