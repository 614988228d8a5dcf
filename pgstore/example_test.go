package pgstore_test

// The example here needs a PostgreSQL server, so it is compiled, not run.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/pgstore"
)

// Leases in a table on the caller's pool; Migrate creates the table on
// first use. Waiters are woken by LISTEN/NOTIFY.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app:secret@db.internal:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, &pgstore.Options{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tasklock.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close() // before pool.Close: deferred calls run last first

	wait, cancel := context.WithTimeout(ctx, time.Minute) // bounds the wait, not the lock
	defer cancel()
	lock, err := locker.Obtain(wait, "invoices/send", nil)
	if errors.Is(err, tasklock.ErrNotObtained) {
		log.Print("another replica held it for the whole minute")
		return
	}
	if err != nil {
		log.Fatal(err)
	}

	// lock.Context() ends, with the reason as its cause, if the lock is
	// lost; lock.Fence() lets the resource refuse a holder that lost it
	// (e.g. UPDATE ... WHERE fence <= $1, in the same database).
	if err := sendInvoices(lock.Context(), lock.Fence()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrLockLost): the lock was lost during the work
	}
	if err := lock.Release(ctx); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrNotHeld): the lease had ended before
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
