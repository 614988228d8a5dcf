package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/sqlitestore"
)

// Every process on the host that opens the same file shares the locks. Open
// sets the pragmas the store needs on every connection; New with Migrate
// creates the table on first use.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "tasklock-example") // in production: a path every process uses, e.g. /var/lib/myapp/tasklock.db
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "tasklock.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlitestore.New(db, &sqlitestore.Options{Migrate: true})
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
		fmt.Println("another process held it for the whole minute")
		return
	}
	if err != nil {
		log.Fatal(err)
	}

	// lock.Context() ends, with the reason as its cause, if the lock is
	// lost; lock.Fence() lets the resource refuse a holder that lost it.
	if err := sendInvoices(lock.Context(), lock.Fence()); err != nil {
		log.Print(err)
	}
	if err := lock.Release(context.Background()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrNotHeld): the lease had ended before
	}
	// Output: invoices sent under fence 1
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
