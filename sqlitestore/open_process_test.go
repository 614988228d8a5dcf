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
