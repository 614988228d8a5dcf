package testserver

import (
	"fmt"
	"os"
	"testing"

	"github.com/tasklock/tasklock/internal/leakcheck"
)

// Main runs the tests of m, then stops every server shared by the test
// binary — PostgreSQL ([StartPostgres], with its template cluster),
// MariaDB ([SharedMariaDB]) and ZooKeeper ([SharedZooKeeper]) — removes
// their files, checks that no goroutine outlives the tests (opts name the
// goroutines that are not leaks), and returns the exit code. Every package
// whose tests start servers uses it:
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }
//
// In a helper process ([StartHelper]) Main only runs the helper's test:
// stopping servers and checking leaks are the parent's job.
//
// The leak check waits up to [leakcheck.Grace] for goroutines to end:
// go-redis's pool redials a refused server in a goroutine that sleeps one
// second between tries and only then notices that its pool was closed.
func Main(m *testing.M, opts ...leakcheck.Option) int {
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
		if err := leakcheck.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}
