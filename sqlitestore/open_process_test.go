package sqlitestore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/testserver"
)

// TestConcurrentOpenOfANewFile starts processes that open the same new
// database file at the same moment, as the nodes of a fleet started
// together do, many times over. Each switches the file to WAL, and SQLite
// answers the one that would deadlock with SQLITE_BUSY at once, without
// calling its busy handler: before Open retried that, about one round in
// ten failed with "database busy".
func TestConcurrentOpenOfANewFile(t *testing.T) {
	if testserver.HelperRole() == "opener" {
		db, err := Open(os.Getenv(envDB), nil)
		if err == nil {
			_, err = New(db, &Options{Migrate: true})
			db.Close()
		}
		if err != nil {
			helperFail("%v", err)
		}
		fmt.Println("OPENED")
		return
	}
	const rounds, procs = 20, 8
	dir := t.TempDir()
	for r := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("round%d.db", r))
		hs := make([]*testserver.Process, procs)
		for i := range hs {
			hs[i] = testserver.StartHelper(t, "TestConcurrentOpenOfANewFile", "opener", envDB+"="+path)
		}
		for _, h := range hs {
			nextLine(t, h, "OPENED", 30*time.Second)
			if code := h.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("round %d: helper exited %d", r, code)
			}
		}
	}
}

// TestConcurrentMigrateInProcess opens one new database file from several
// goroutines at once, each with its own pool (as the Stores of one process
// or the storeurl of `tasklock serve` and `tasklock jobs` do), and each
// migrates it: every New succeeds and each migration is recorded once.
func TestConcurrentMigrateInProcess(t *testing.T) {
	const rounds, openers = 20, 6
	dir := t.TempDir()
	for r := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("round%d.db", r))
		start := make(chan struct{})
		errs := make(chan error, openers)
		for range openers {
			go func() {
				<-start
				db, err := Open(path, nil)
				if err != nil {
					errs <- err
					return
				}
				defer db.Close()
				_, err = New(db, &Options{Migrate: true})
				errs <- err
			}()
		}
		close(start)
		for range openers {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		db, err := Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n, distinct int
		err = db.QueryRow(`SELECT count(*), count(DISTINCT version) FROM tasklock_locks_migrations`).Scan(&n, &distinct)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n != len(migrations) || distinct != len(migrations) {
			t.Fatalf("round %d: %d migrations recorded (%d distinct), want each of %d once", r, n, distinct, len(migrations))
		}
	}
}
