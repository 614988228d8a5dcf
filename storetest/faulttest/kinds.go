package faulttest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
)

// Read-write locks and semaphores. A third protocol, for a holder process
// of a read side, a write side or a semaphore's permit ([KindHolderMain],
// [StartKindHolder]): "HELD <mode> <fence>", then every critical section
// as "ENTER <fence> <t>" and "LEAVE <fence> <t> accepted=<bool>" (or
// "LEAVE <fence> <t> error <err>"), "RESUMED done=closed|open" after a
// pause, and "LOST <cause>". The times are Unix nanoseconds of the host's
// clock, which every process of a test reads, so the parent puts the
// holder's sections beside its own ([Sections]) and counts overlaps
// ([CheckSections]): a semaphore's holders beyond its permits, or a writer
// beside anyone. A fenced register (the holder's WriteFunc) is the second
// oracle, for a write side and a read side (a reader writes the fence of
// the last writer, so a reader that a new writer should have stopped is
// refused); a semaphore of more than one permit has no fence order among
// its holders, and its holder may take a WriteFunc that always accepts.
//
// A store's test that a killed holder's permit returns, sketched:
//
//	// The holder process's body.
//	func TestKindHolder(t *testing.T) { faulttest.KindHolderMain(t, setup) }
//
//	h := faulttest.StartKindHolder(t, "TestKindHolder", "pool", tasklock.ModePermit, 2, ttl, env...)
//	var log faulttest.Sections
//	mine, _ := a.Semaphore("pool", 2).Acquire(ctx, nil) // the other permit
//	stop := log.Loop("a", mine, nil)
//	killed := time.Now()
//	h.Kill(t)
//	l, _ := b.Semaphore("pool", 2).Acquire(ctx, nil) // within TTL + 1s of killed
//	log.Loop("b", l, nil)
//	...
//	stop()
//	faulttest.CheckSections(t, 2, h.Sections(), log.List())

// Environment of a kinds holder process, besides [EnvKey] and [EnvTTL].
const (
	EnvHold    = "TASKLOCK_HOLD"    // the hold: "read", "write" or "permit" (tasklock.Mode's String)
	EnvPermits = "TASKLOCK_PERMITS" // the semaphore's permits, for "permit"
)

// HelperOwner is the owner name and Section.Holder of a holder process.
const HelperOwner = "helper"

// Section is one critical section: a holder's unit of work under its
// lock, from before it looked at the lock's Done to after its act, in Unix
// nanoseconds of the host's clock.
type Section struct {
	Holder       string
	Mode         tasklock.Mode
	Fence        uint64
	Enter, Leave int64
	// Interrupted: the holder's process was paused during the section,
	// which therefore ended after the pause, with an act a lock cannot
	// stop (it began before the lease ended); only a fenced resource can
	// refuse it. CheckSections logs such sections and does not count them.
	Interrupted bool
}

func (s Section) String() string {
	return fmt.Sprintf("%s %v fence %d [%d, %d]", s.Holder, s.Mode, s.Fence, s.Enter, s.Leave)
}

// Sections is a log of critical sections, safe for concurrent use: the
// test's own holders add theirs with Do.
type Sections struct {
	mu   sync.Mutex
	list []Section
}

// Do runs act as one critical section of l, held by holder: it looks at
// l's Done first, and when the lock has ended runs nothing and returns
// false.
func (s *Sections) Do(holder string, l *tasklock.Lock, act func()) bool {
	enter := time.Now().UnixNano()
	select {
	case <-l.Done():
		return false
	default:
	}
	if act != nil {
		act()
	}
	sec := Section{Holder: holder, Mode: l.Mode(), Fence: l.Fence(), Enter: enter, Leave: time.Now().UnixNano()}
	s.mu.Lock()
	s.list = append(s.list, sec)
	s.mu.Unlock()
	return true
}

// Loop runs critical sections of l, held by holder, one every 5ms (each
// calling act, which may be nil) until l's Done closes or the returned
// stop is called; stop waits for the section under way.
func (s *Sections) Loop(holder string, l *tasklock.Lock, act func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for s.Do(holder, l, act) {
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond): // the work between two sections
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// Both runs one critical section of b, held by hb, inside one of a, held
// by ha: two holders in their sections at once, as a semaphore's permits
// or two readers allow. Loops overlap only as their timing falls (two
// loops of one period can stay out of phase), so a test that checks the
// holders overlapped at all (CheckSections's most) calls Both, with no
// Loop of a or b running, for an overlap it can count on. It reports
// whether both sections ran: false when either lock had ended.
func (s *Sections) Both(ha string, a *tasklock.Lock, hb string, b *tasklock.Lock) bool {
	inner := false
	outer := s.Do(ha, a, func() { inner = s.Do(hb, b, nil) })
	return outer && inner
}

// List returns the sections logged so far.
func (s *Sections) List() []Section {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// CheckSections fails the test at every moment when the sections of
// every log, taken together, break a lock's promise: two writers, a
// writer beside a reader, or more than permits holders of a semaphore
// (permits is ignored for read-write locks). The sections must be of one
// key. It returns the most sections open at once (to check that the
// holders overlapped at all where they should). Interrupted sections are
// logged, not counted.
func CheckSections(t testing.TB, permits int, logs ...[]Section) (most int) {
	t.Helper()
	type event struct {
		at    int64
		enter bool
		i     int
	}
	var (
		all    []Section
		events []event
	)
	for _, log := range logs {
		for _, s := range log {
			if s.Interrupted {
				t.Logf("not counted: %v, interrupted by a pause (only fencing can refuse its act)", s)
				continue
			}
			if s.Leave < s.Enter {
				t.Errorf("section %v ends before it begins", s)
				continue
			}
			events = append(events, event{s.Enter, true, len(all)}, event{s.Leave, false, len(all)})
			all = append(all, s)
		}
	}
	// In time order; at one instant, leaving before entering.
	slices.SortFunc(events, func(a, b event) int {
		if a.at != b.at {
			return compare(a.at, b.at)
		}
		return compare(boolInt(a.enter), boolInt(b.enter))
	})
	open := map[int]bool{}
	var writers, readers, held, reported int
	for _, e := range events {
		s := all[e.i]
		delta := -1
		if e.enter {
			delta = 1
		}
		switch s.Mode {
		case tasklock.ModeWrite:
			writers += delta
		case tasklock.ModeRead:
			readers += delta
		default:
			held += delta
		}
		if !e.enter {
			delete(open, e.i)
			continue
		}
		open[e.i] = true
		most = max(most, len(open))
		bad := writers > 1 || (writers > 0 && readers > 0) || (held > permits && s.Mode == tasklock.ModePermit) || (held > 1 && s.Mode == tasklock.ModeMutex)
		if bad {
			if reported++; reported <= 5 {
				var with []string
				for j := range open {
					if j != e.i {
						with = append(with, all[j].String())
					}
				}
				slices.Sort(with)
				t.Errorf("overlap: %v entered while %d sections were open: %v", s, len(with), with)
			}
		}
	}
	if reported > 5 {
		t.Errorf("%d overlaps in all", reported)
	}
	return most
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// KindHolderMain is the body of a store's kinds holder test function: in
// a normal run it skips; in a helper process started by [StartKindHolder]
// it builds the store with setup, obtains [EnvKey] as owner "helper" with
// TTL [EnvTTL], as the hold [EnvHold] (RWMutex RLock or Lock, or a permit
// of Semaphore(key, [EnvPermits])), prints "HELD <mode> <fence>", and then,
// every 10ms while its lock's Done is open, runs a critical section that
// calls write with its fence (see the protocol above). Before each section
// it looks at Done; when the look comes more than a TTL after the one
// before (it was paused), it prints "RESUMED done=closed|open" first. When
// Done is closed it prints "LOST <cause>" and exits.
func KindHolderMain(t *testing.T, setup SetupFunc) {
	if testserver.HelperRole() != Role {
		t.Skip("runs only as a helper process started by testserver.StartHelper")
	}
	os.Exit(runKindHolder(setup))
}

// parseHold reads a hold's name ("read", "write", "permit").
func parseHold(s string) (tasklock.Mode, bool) {
	for _, m := range []tasklock.Mode{tasklock.ModeRead, tasklock.ModeWrite, tasklock.ModePermit} {
		if m.String() == s {
			return m, true
		}
	}
	return 0, false
}

func runKindHolder(setup SetupFunc) int {
	fail := func(err error) int {
		fmt.Println("ERROR", err)
		return 1
	}
	ttl, err := time.ParseDuration(os.Getenv(EnvTTL))
	if err != nil {
		return fail(err)
	}
	mode, ok := parseHold(os.Getenv(EnvHold))
	if !ok {
		return fail(fmt.Errorf("%s=%q: want read, write or permit", EnvHold, os.Getenv(EnvHold)))
	}
	permits, _ := strconv.Atoi(os.Getenv(EnvPermits))
	s, write, err := setup(ttl)
	if err != nil {
		return fail(err)
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: HelperOwner, Logger: QuietLogger})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key, opts := os.Getenv(EnvKey), &tasklock.ObtainOptions{TTL: ttl}
	var l *tasklock.Lock
	switch mode {
	case tasklock.ModeRead:
		l, err = lk.RWMutex(key).RLock(ctx, opts)
	case tasklock.ModeWrite:
		l, err = lk.RWMutex(key).Lock(ctx, opts)
	default:
		l, err = lk.Semaphore(key, permits).Acquire(ctx, opts)
	}
	if err != nil {
		return fail(err)
	}
	fmt.Printf("HELD %v %d\n", mode, l.Fence())
	closed := func() bool {
		select {
		case <-l.Done():
			return true
		default:
			return false
		}
	}
	last := time.Now()
	for {
		enter := time.Now()
		lost := closed()
		if now := time.Now(); now.Sub(last) > ttl {
			// Paused since the last look, perhaps after this one: look
			// again before acting.
			lost = closed()
			fmt.Printf("RESUMED done=%s\n", map[bool]string{true: "closed", false: "open"}[lost])
		}
		last = enter
		if lost {
			fmt.Printf("LOST %v\n", l.Err())
			return 0
		}
		fmt.Printf("ENTER %d %d\n", l.Fence(), enter.UnixNano())
		accepted, err := true, error(nil)
		if write != nil {
			wctx, cancel := context.WithTimeout(context.Background(), time.Second)
			accepted, err = write(wctx, l.Fence())
			cancel()
		}
		leave := time.Now().UnixNano()
		if err != nil {
			fmt.Printf("LEAVE %d %d error %v\n", l.Fence(), leave, err)
		} else {
			fmt.Printf("LEAVE %d %d accepted=%v\n", l.Fence(), leave, accepted)
		}
		time.Sleep(10 * time.Millisecond) // the work between two sections
	}
}

// KindHolder is the parent's handle on a kinds holder process. Its Kill,
// Stop and Cont note when they took effect, so that its sections end at a
// kill and are marked Interrupted across a pause: Stop notes the time once
// the process is stopped and Cont before it sends SIGCONT, so that a
// section open across the pause is Interrupted however late the parent
// runs (a section cannot begin while the process is stopped, nor end
// before it is resumed).
type KindHolder struct {
	*testserver.Process
	// Mode and Fence are the hold's.
	Mode  tasklock.Mode
	Fence uint64

	mu       sync.Mutex
	secs     []Section
	enter    int64 // the open section's start, 0 when none is open
	accepted int   // LEAVE lines with accepted=true
	refused  int   // LEAVE lines with accepted=false or an error
	stops    []int64
	conts    []int64
	killed   int64
	lost     string // the holder's "LOST <cause>" line, "" before it
	drained  chan struct{}
}

// StartKindHolder starts test function name (a [KindHolderMain]) as a
// holder process that obtains key as mode (a semaphore of permits for
// tasklock.ModePermit) with ttl, env holding the store's own variables,
// and waits for its hold and its first critical section.
func StartKindHolder(t *testing.T, name, key string, mode tasklock.Mode, permits int, ttl time.Duration, env ...string) *KindHolder {
	t.Helper()
	env = append(env, EnvKey+"="+key, EnvTTL+"="+ttl.String(), EnvHold+"="+mode.String(), EnvPermits+"="+strconv.Itoa(permits))
	p := testserver.StartHelper(t, name, Role, env...)
	h := &KindHolder{Process: p, Mode: mode, drained: make(chan struct{})}
	go h.collect()
	prefix := fmt.Sprintf("HELD %v ", mode)
	h.Fence = fenceLine(t, p, prefix, 20*time.Second)
	h.WaitLine(t, "LEAVE ", 10*time.Second)
	return h
}

// collect reads the holder's sections from its stdout until it closes.
func (h *KindHolder) collect() {
	defer close(h.drained)
	for line := range h.Lines() {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "LOST" {
			h.mu.Lock()
			h.lost = line
			h.mu.Unlock()
			continue
		}
		if len(f) < 3 || (f[0] != "ENTER" && f[0] != "LEAVE") {
			continue
		}
		fence, err1 := strconv.ParseUint(f[1], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		h.mu.Lock()
		if f[0] == "ENTER" {
			h.enter = at
		} else if h.enter != 0 {
			h.secs = append(h.secs, Section{Holder: HelperOwner, Mode: h.Mode, Fence: fence, Enter: h.enter, Leave: at})
			h.enter = 0
			if len(f) > 3 && f[3] == "accepted=true" {
				h.accepted++
			} else {
				h.refused++
			}
		}
		h.mu.Unlock()
	}
}

// Kill SIGKILLs the holder (its process group), noting when: once it has
// exited (testserver's Kill waits for that), since the holder may enter a
// section after a time noted before the signal, and that section lasts
// until the process is gone.
func (h *KindHolder) Kill(t testing.TB) {
	t.Helper()
	h.Process.Kill(t)
	h.mu.Lock()
	h.killed = time.Now().UnixNano()
	h.mu.Unlock()
}

// Stop SIGSTOPs the holder, noting when it was stopped: after it was
// (testserver's Stop waits for that), since a section it entered between
// a time noted before the signal and the signal would not be seen as
// paused.
func (h *KindHolder) Stop(t testing.TB) {
	t.Helper()
	h.Process.Stop(t)
	h.mu.Lock()
	h.stops = append(h.stops, time.Now().UnixNano())
	h.mu.Unlock()
}

// Cont SIGCONTs the holder, noting when before the signal: the holder may
// leave its section before testserver's Cont sees it running and returns.
func (h *KindHolder) Cont(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	h.conts = append(h.conts, time.Now().UnixNano())
	h.mu.Unlock()
	h.Process.Cont(t)
}

// Sections returns the holder's critical sections so far. A section it
// was in when killed ends at the kill; one it is in now ends now, unless
// it is paused (then it is left out: call it after Cont). A section
// during which the holder was paused is Interrupted.
func (h *KindHolder) Sections() []Section {
	h.mu.Lock()
	defer h.mu.Unlock()
	secs := slices.Clone(h.secs)
	if h.enter != 0 {
		switch {
		case h.killed != 0:
			secs = append(secs, Section{Holder: HelperOwner, Mode: h.Mode, Fence: h.Fence, Enter: h.enter, Leave: h.killed})
		case len(h.stops) == len(h.conts):
			secs = append(secs, Section{Holder: HelperOwner, Mode: h.Mode, Fence: h.Fence, Enter: h.enter, Leave: time.Now().UnixNano()})
		}
	}
	for i := range secs {
		for j, stop := range h.stops {
			if secs[i].Enter < stop && (j >= len(h.conts) || secs[i].Leave > h.conts[j]) {
				secs[i].Interrupted = true
			}
		}
	}
	return secs
}

// Lost returns the holder's "LOST <cause>" line once it has printed it
// (its hold ended and it exits), and "" before.
func (h *KindHolder) Lost() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// Writes returns how many of the holder's sections the register accepted
// and how many it refused (or failed).
func (h *KindHolder) Writes() (accepted, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.accepted, h.refused
}

// CheckResumed resumes a holder paused past its TTL (while another took
// its place) and checks that its first look at Done after the pause found
// it closed, that it reports its loss and exits with code 0, and that
// every section it ran is in Sections. It logs what the holder said,
// prefixed with logPrefix.
func (h *KindHolder) CheckResumed(t *testing.T, logPrefix string) {
	t.Helper()
	h.Cont(t)
	resumed := h.WaitLine(t, "RESUMED ", 5*time.Second)
	lost := h.WaitLine(t, "LOST ", 5*time.Second)
	t.Logf("%sthe resumed holder said %q, then %q", logPrefix, resumed, lost)
	if resumed != "RESUMED done=closed" {
		t.Errorf("%q: the holder's Done was open after a pause past its TTL: it could act on a lost hold", resumed)
	}
	if !strings.Contains(lost, "tasklock: lock lost") {
		t.Errorf("holder's cause: %q, want a loss", lost)
	}
	if code := h.Wait(t, 10*time.Second); code != 0 {
		t.Errorf("holder exit code %d", code)
	}
	<-h.drained // stdout closed: every line is in
}
