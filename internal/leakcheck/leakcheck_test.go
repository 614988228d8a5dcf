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
