package mysqlstore_test

// The examples here need a MySQL or MariaDB server, so they are compiled,
// not run.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/mysqlstore"
)

// A lease-mode store on the caller's pool; Migrate creates the table on
// first use. Importing go-sql-driver/mysql registers the "mysql" driver.
func ExampleNew() {
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := mysqlstore.New(db, &mysqlstore.Options{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tasklock.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds the wait, not the lock
	defer cancel()
	lock, err := locker.Obtain(ctx, "invoices/send", nil)
	if errors.Is(err, tasklock.ErrNotObtained) {
		log.Print("another replica held it for the whole minute")
		return
	}
	if err != nil {
		log.Fatal(err)
	}

	// lock.Context() ends, with the reason as its cause, if the lock is
	// lost; lock.Fence() lets the resource refuse a holder that lost it
	// (e.g. UPDATE ... WHERE fence <= ?, in the same database).
	if err := sendInvoices(lock.Context(), lock.Fence()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrLockLost): the lock was lost during the work
	}
	if err := lock.Release(context.Background()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrNotHeld): the lease had ended before
	}
}

// Connection mode holds each lock on its own connection, so a crashed
// holder's locks are freed at once; keepalive makes a dead network show
// within seconds.
func ExampleKeepAliveDialer() {
	mysql.RegisterDialContext("tcpka", mysqlstore.KeepAliveDialer(5*time.Second, 10*time.Second))
	db, err := sql.Open("mysql", "app:secret@tcpka(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(64) // locks held at once, plus headroom
	store, err := mysqlstore.New(db, &mysqlstore.Options{Mode: mysqlstore.ModeConnection})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the Lockers, before db
	locker, err := tasklock.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	// Obtain, work under lock.Context(), Release: as in the example of New.
}

// MigrationStatus for a `tasklock migrate status`-like report.
func ExampleMigrationStatus() {
	db, err := sql.Open("mysql", "app:secret@tcp(db.internal:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	states, err := mysqlstore.MigrationStatus(context.Background(), db, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range states {
		log.Printf("%03d_%s applied=%v %v", m.Version, m.Name, m.Applied(), m.AppliedAt)
	}
}

// sendInvoices stands for the work the lock protects: it stops when ctx
// ends and hands fence to what it writes.
func sendInvoices(ctx context.Context, fence uint64) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	fmt.Println("invoices sent under fence", fence)
	return nil
}
