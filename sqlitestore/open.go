package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Open opens (creating it if needed) the SQLite database file at path for
// a Store, with the "sqlite" driver of modernc.org/sqlite, and checks that
// it works. Every connection of the pool runs, when it is opened:
//
//	PRAGMA busy_timeout = <Options.BusyTimeout in ms>  -- wait for the write lock, don't fail
//	PRAGMA journal_mode = WAL                          -- readers and the writer don't block each other
//	PRAGMA synchronous = NORMAL                        -- FULL with Options.SyncFull
//	PRAGMA foreign_keys = ON
//
// and its transactions start with BEGIN IMMEDIATE (_txlock=immediate), so a
// transaction that writes takes the write lock up front rather than failing
// with SQLITE_BUSY when it upgrades from reading. The pragmas ride in the
// DSN (modernc's _pragma parameters) because a pragma run with db.Exec
// would reach only one connection of the pool.
//
// path is a file path, not a URI; ":memory:" is refused (an in-memory
// database is private to one connection and cannot use WAL: use memstore).
// Open fails with a message saying why when the directory does not exist,
// the file or directory is not writable (WAL creates path-wal and path-shm
// beside the database), the file is not a SQLite database, or WAL cannot be
// enabled. Only Options.BusyTimeout and Options.SyncFull are used; the
// others are validated. The caller closes the returned *sql.DB.
func Open(path string, opts *Options) (*sql.DB, error) {
	c, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	switch {
	case path == "":
		return nil, badOption("path", "", "empty")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, badOption("path", path, "want the path of a database file (not \":memory:\" or a file: URI)")
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sqlitestore: open %q: directory %q does not exist: %w", path, dir, err)
		}
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("sqlitestore: open %q: %q is not a directory", path, dir)
	}
	db, err := sql.Open("sqlite", dsn(path, c))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %q: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.busy+checkTimeout)
	defer cancel()
	mode, err := journalMode(ctx, db)
	if err != nil {
		db.Close()
		return nil, openError("open", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %q: journal_mode is %q, not wal: SQLite could not switch the database to WAL", path, mode)
	}
	return db, nil
}

// journalMode opens a connection, which runs the pragmas, and reads the
// journal mode back, which catches a database that silently stayed in
// another mode. ctx is honoured between tries, not during one (stmtCtx).
// It retries while SQLite answers busy, until ctx ends:
// processes that open a new database file at the same moment all switch
// it to WAL, which takes the exclusive lock, and SQLite answers the one
// that would deadlock with SQLITE_BUSY at once instead of calling its
// busy handler, so busy_timeout does not cover this case.
func journalMode(ctx context.Context, db *sql.DB) (string, error) {
	delay := time.Millisecond
	for {
		var mode string
		err := db.QueryRowContext(stmtCtx(ctx), "PRAGMA journal_mode").Scan(&mode)
		if err == nil || !isBusy(err) {
			return mode, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", err
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// dsn returns the modernc.org/sqlite DSN Open uses for path: a file: URI
// (so '?', '#' and '%' in the path cannot be mistaken for parameters) with
// the pragmas as _pragma parameters, applied to every new connection.
func dsn(path string, c config) string {
	sync := "NORMAL"
	if c.syncFull {
		sync = "FULL"
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", c.busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	u := url.URL{Path: filepath.Clean(path)}
	return "file:" + u.EscapedPath() + "?" + q.Encode()
}

// openError explains the SQLite errors that mean the file cannot be used
// at all.
func openError(op, path string, err error) error {
	var se *sqlite.Error
	hint := ""
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_AUTH:
			hint = ": the directory must exist and be writable, as must the database file (WAL creates the -wal and -shm files beside it)"
		case sqlite3.SQLITE_NOTADB:
			hint = ": the file is not a SQLite database"
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("sqlitestore: %s %q: %w: %w", op, path, ErrBusy, err)
		}
	}
	if path == "" {
		return fmt.Errorf("sqlitestore: %s: %w%s", op, err, hint)
	}
	return fmt.Errorf("sqlitestore: %s %q: %w%s", op, path, err, hint)
}
