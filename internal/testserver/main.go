package testserver

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakGrace is how long [Main] keeps looking for leaked goroutines before
// it reports them. goleak alone retries for about a second, but go-redis's
// pool redials a refused server in a goroutine that sleeps one second
// between tries and only then notices that its pool was closed.
const leakGrace = 5 * time.Second

// Main runs the tests of m, then stops every server shared by the test
// binary — PostgreSQL ([StartPostgres], with its template cluster),
// MariaDB ([SharedMariaDB]) and ZooKeeper ([SharedZooKeeper]) — removes
// their files, checks that no goroutine outlives the tests, and returns
// the exit code. Every package whose tests start servers uses it:
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }
//
// In a helper process ([StartHelper]) Main only runs the helper's test:
// stopping servers and checking leaks are the parent's job.
func Main(m *testing.M) int {
	code := m.Run()
	if HelperRole() != "" {
		return code
	}
	stopShared()
	for _, stop := range []func() error{StopSharedMariaDB, StopSharedZooKeeper} {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code == 0 {
		if err := FindLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// FindLeaks reports goroutines still running, ignoring those that
// libraries wind down on their own shortly after being closed: toxiproxy's
// per-toxic goroutines (ToxicStub.Run) and go-redis's redial loop, which
// FindLeaks waits out for up to leakGrace rather than ignoring, so a pool
// that is never closed is still reported.
func FindLeaks() error {
	deadline := time.Now().Add(leakGrace)
	for {
		err := goleak.Find(goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"))
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
