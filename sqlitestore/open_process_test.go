package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// holdWriteLock opens path and holds SQLite's write lock on it (BEGIN
// IMMEDIATE and a write) until the returned function is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE holder (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				t.Error(err)
			}
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// TestMigrateOutlastsBusyTimeout: a migration that finds the write lock
// taken for longer than busy_timeout (as one process's can while its
// siblings, started together on one file, migrate and write) tries again
// instead of failing with ErrBusy, and migrates once the lock is free.
func TestMigrateOutlastsBusyTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	release := holdWriteLock(t, path)
	opts := &Options{Migrate: true, BusyTimeout: 50 * time.Millisecond}
	db, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := New(db, opts)
		done <- err
	}()
	// The lock stays taken for six busy_timeouts: the elapsed time is the
	// point here, not a wait for an event.
	select {
	case err := <-done:
		t.Fatalf("New returned while the write lock was held (after %v): %v", time.Since(start), err)
	case <-time.After(6 * opts.BusyTimeout):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("New after the write lock was freed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("New still waiting 30s after the write lock was freed")
	}
	states, err := MigrationStatus(context.Background(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pending(states) {
		t.Errorf("migrations pending after New: %+v", states)
	}
}

// TestMigrateGivesUpNamingTheCause: a migration whose write lock never
// comes fails when its context ends, with ErrBusy, the context's error and
// the cause in words.
func TestMigrateGivesUpNamingTheCause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "busy.db")
	holdWriteLock(t, path)
	db, err := Open(path, &Options{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	err = Migrate(ctx, db, nil)
	if !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "kept SQLite's write lock") {
		t.Fatalf("Migrate with the write lock held throughout: %v; want ErrBusy, DeadlineExceeded and the cause", err)
	}
}
