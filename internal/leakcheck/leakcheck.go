// Package leakcheck finds goroutines that outlive a test: the check
// go.uber.org/goleak makes, written with the standard library only.
//
// Why not goleak itself: any package a user imports brings the imports of
// its tests into the user's go.sum (go mod tidy loads the tests of the
// packages a program imports, one level deep). A goleak import in the root
// package's or a store's tests would put goleak into every user's go.sum,
// and tasklock keeps test tooling out of its users' builds.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Grace is how long [Find] keeps looking before it reports what is left:
// closed clients wind their goroutines down shortly after Close returns.
const Grace = 5 * time.Second

// Option tells [Find] which goroutines are not leaks.
type Option func(*config)

type config struct {
	funcs []string
	ids   map[string]bool
	grace time.Duration
	owner string // with OwnedByCaller: only goroutines this one started count
}

// IgnoreFunction ignores goroutines with fn (a fully qualified function
// name, e.g. "example.com/pkg.(*T).Run") anywhere on their stack.
func IgnoreFunction(fn string) Option {
	return func(c *config) { c.funcs = append(c.funcs, fn) }
}

// IgnoreCurrent ignores the goroutines running now.
func IgnoreCurrent() Option {
	ids := map[string]bool{}
	for _, g := range goroutines() {
		ids[g.id] = true
	}
	return func(c *config) {
		for id := range ids {
			c.ids[id] = true
		}
	}
}

// OwnedByCaller restricts the check to goroutines the calling goroutine
// started, directly or through goroutines it started that still run: what
// a test itself leaked, not what tests running in parallel hold.
func OwnedByCaller() Option {
	id := callerID()
	return func(c *config) { c.owner = id }
}

// callerID returns the calling goroutine's number.
func callerID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// WithGrace replaces [Grace].
func WithGrace(d time.Duration) Option {
	return func(c *config) { c.grace = d }
}

// goroutine is one goroutine of a runtime.Stack dump.
type goroutine struct {
	id      string // the number after "goroutine "
	creator string // the number after "created by ... in goroutine "
	stack   string // the whole block, header included
}

// goroutines returns every goroutine but the caller's.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for i, block := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the caller
		}
		s := string(block)
		id, _, _ := strings.Cut(strings.TrimPrefix(s, "goroutine "), " ")
		var creator string
		if _, after, ok := strings.Cut(s, "\ncreated by "); ok {
			line, _, _ := strings.Cut(after, "\n")
			if i := strings.LastIndex(line, " in goroutine "); i >= 0 {
				creator = line[i+len(" in goroutine "):]
			}
		}
		gs = append(gs, goroutine{id: id, creator: creator, stack: s})
	}
	return gs
}

// standard are functions of goroutines the runtime and the testing package
// keep for themselves.
var standard = []string{
	"testing.RunTests",
	"testing.(*T).Run",
	"testing.(*M).Run",
	"testing.runFuzzing",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"runtime.ReadTrace",
	"runtime/trace.Start",
}

func (c *config) ignored(g goroutine) bool {
	if c.ids[g.id] {
		return true
	}
	for _, lists := range [][]string{standard, c.funcs} {
		for _, fn := range lists {
			if strings.Contains(g.stack, "\n"+fn+"(") {
				return true
			}
		}
	}
	return false
}

// owned reports whether g counts under OwnedByCaller: without it every
// goroutine does; with it, those whose chain of creators (among gs, which
// still run) reaches the owner.
func (c *config) owned(g goroutine, gs []goroutine) bool {
	if c.owner == "" {
		return true
	}
	creators := make(map[string]string, len(gs))
	for _, o := range gs {
		creators[o.id] = o.creator
	}
	for id, n := g.creator, 0; id != "" && n < len(gs)+1; id, n = creators[id], n+1 {
		if id == c.owner {
			return true
		}
	}
	return false
}

// Find returns an error listing the goroutines still running (besides the
// caller's and those opts ignore) after waiting up to the grace period for
// them to end.
func Find(opts ...Option) error {
	c := &config{ids: map[string]bool{}, grace: Grace}
	for _, o := range opts {
		o(c)
	}
	deadline := time.Now().Add(c.grace)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		var left []string
		gs := goroutines()
		for _, g := range gs {
			if !c.ignored(g) && c.owned(g, gs) {
				left = append(left, g.stack)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leakcheck: %d goroutines outlived the test:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(delay) // polling the runtime: there is nothing to wait on
	}
}

// VerifyNone fails t when [Find] reports goroutines.
func VerifyNone(t testing.TB, opts ...Option) {
	t.Helper()
	if err := Find(opts...); err != nil {
		t.Error(err)
	}
}

// Main runs m's tests and then [Find]; it returns the exit code:
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
func Main(m *testing.M, opts ...Option) int {
	code := m.Run()
	if code == 0 {
		if err := Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}
