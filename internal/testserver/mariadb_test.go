package testserver_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/internal/testserver"
)

func openMariaDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mariadbPing pings with a fresh connection, so that a dead server is not
// hidden by a pooled one.
func mariadbPing(dsn string, timeout time.Duration) error {
	db, err := sql.Open("mysql", dsn+"&timeout="+timeout.String()+"&readTimeout="+timeout.String())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return db.PingContext(ctx)
}

func TestMariaDBRestartKeepsData(t *testing.T) {
	t.Parallel()
	start := time.Now()
	m := testserver.StartMariaDB(t)
	t.Logf("install and start took %v", time.Since(start))
	addr, pid := m.Addr(), m.Pid()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port", addr)
	}
	dsn := m.CreateDB(t)
	if !strings.HasPrefix(dsn, "root@tcp("+addr+")/") || !strings.HasSuffix(dsn, "?parseTime=true") {
		t.Fatalf("CreateDB DSN %q", dsn)
	}
	db := openMariaDB(t, dsn)
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE k (id INT PRIMARY KEY, v BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
		"INSERT INTO k VALUES (1, 42)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var flush int
	var logBin, bind string
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_flush_log_at_trx_commit, @@log_bin, @@bind_address").Scan(&flush, &logBin, &bind); err != nil {
		t.Fatal(err)
	}
	if flush != 2 || logBin != "0" || bind != "127.0.0.1" {
		t.Errorf("innodb_flush_log_at_trx_commit=%d log_bin=%s bind_address=%s", flush, logBin, bind)
	}

	start = time.Now()
	m.Restart(t) // SIGKILL, then crash recovery
	t.Logf("restart took %v", time.Since(start))
	if m.Addr() != addr || m.Pid() == pid {
		t.Fatalf("after restart: Addr %s (was %s), Pid %d (was %d)", m.Addr(), addr, m.Pid(), pid)
	}
	var v uint64
	err := retry(5*time.Second, func() error { return db.QueryRowContext(ctx, "SELECT v FROM k WHERE id = 1").Scan(&v) })
	if err != nil || v != 42 {
		t.Fatalf("committed row after SIGKILL and restart: %d, %v; want 42", v, err)
	}

	m.Kill(t)
	if err := mariadbPing(dsn, 300*time.Millisecond); err == nil {
		t.Fatal("ping after Kill succeeded")
	}
	m.Restart(t) // from a killed server
	if err := mariadbPing(dsn, time.Second); err != nil {
		t.Fatalf("ping after Kill and Restart: %v", err)
	}
}

func TestMariaDBStopCont(t *testing.T) {
	t.Parallel()
	m := testserver.StartMariaDB(t)
	dsn := m.DSN("")
	m.Stop(t)
	if err := mariadbPing(dsn, 300*time.Millisecond); err == nil {
		t.Fatal("ping to a stopped server succeeded")
	}
	m.Cont(t)
	if err := mariadbPing(dsn, 2*time.Second); err != nil {
		t.Fatalf("ping after Cont: %v", err)
	}
}

func TestMariaDBShared(t *testing.T) {
	t.Parallel()
	// This package's TestMain does not know about the shared server, so
	// this test stops it itself; the others use StartMariaDB.
	t.Cleanup(func() {
		if err := testserver.StopSharedMariaDB(); err != nil {
			t.Error(err)
		}
	})
	m := testserver.SharedMariaDB(t)
	if again := testserver.SharedMariaDB(t); again != m {
		t.Fatal("SharedMariaDB started a second server")
	}
	var dbs []string
	t.Run("a", func(t *testing.T) { dbs = append(dbs, m.CreateDB(t)) })
	t.Run("a", func(t *testing.T) { dbs = append(dbs, m.CreateDB(t)) })
	if len(dbs) != 2 || dbs[0] == dbs[1] {
		t.Fatalf("CreateDB returned %q", dbs)
	}
	for _, dsn := range dbs {
		db := openMariaDB(t, dsn)
		if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
	}
	dir := m.Dir()
	if err := testserver.StopSharedMariaDB(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("shared server directory %s still there: %v", dir, err)
	}
	if err := mariadbPing(dbs[0], 300*time.Millisecond); err == nil {
		t.Fatal("shared server still answers after StopSharedMariaDB")
	}
}

// retry calls f until it succeeds or d passes, and returns its last error.
func retry(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
