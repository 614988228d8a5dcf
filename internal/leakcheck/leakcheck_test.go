package leakcheck

import (
	"strings"
	"testing"
	"time"
)

func TestFindReportsALeakAndIgnoresWhatItIsTold(t *testing.T) {
	stop := make(chan struct{})
	started := make(chan struct{})
	go leakyLoop(started, stop)
	<-started
	err := Find(WithGrace(50 * time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "leakcheck.leakyLoop") {
		t.Fatalf("Find = %v, want the leaked goroutine named", err)
	}
	if err := Find(WithGrace(0), IgnoreFunction("github.com/tasklock/tasklock/internal/leakcheck.leakyLoop")); err != nil {
		t.Fatalf("Find with IgnoreFunction = %v", err)
	}
	if err := Find(WithGrace(0), IgnoreCurrent()); err != nil {
		t.Fatalf("Find with IgnoreCurrent = %v", err)
	}
	close(stop)
	if err := Find(); err != nil {
		t.Fatalf("Find after the goroutine ended = %v", err)
	}
}

func leakyLoop(started, stop chan struct{}) {
	close(started)
	<-stop
}

// TestOwnedByCallerIgnoresOtherTestsGoroutines: a goroutine another
// goroutine started (as a test running in parallel does) is not the
// caller's leak; one the caller started, directly or through a goroutine
// of its own, is.
func TestOwnedByCallerIgnoresOtherTestsGoroutines(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	startPair := func() { // a goroutine that starts one of its own
		started := make(chan struct{})
		go func() {
			inner := make(chan struct{})
			go leakyLoop(inner, stop)
			<-inner
			close(started)
			<-stop
		}()
		<-started
	}
	startPair() // another test's work: this goroutine is not the caller below
	errs := make(chan error, 2)
	go func() { // the caller
		errs <- Find(WithGrace(0), OwnedByCaller())
		startPair()
		errs <- Find(WithGrace(50*time.Millisecond), OwnedByCaller())
	}()
	if err := <-errs; err != nil {
		t.Fatalf("Find(OwnedByCaller) reported other goroutines' work: %v", err)
	}
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "2 goroutines") {
		t.Fatalf("Find(OwnedByCaller) = %v, want the caller's 2 goroutines", err)
	}
}
