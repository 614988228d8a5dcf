package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/memstore"
)

// Two Lockers on one Store stand for two replicas; with a real store they
// would be two processes, each with its own Locker.
func ExampleNew() {
	store := memstore.New(nil) // nil: the system clock
	locker, err := tasklock.New(store, &tasklock.Config{Owner: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // bounds the wait, not the lock
	defer cancel()
	lock, err := locker.Obtain(ctx, "invoices/send", nil)
	if errors.Is(err, tasklock.ErrNotObtained) {
		fmt.Println("held elsewhere for 5s; try later")
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

	other, _ := tasklock.New(store, &tasklock.Config{Owner: "worker-2"})
	defer other.Close()
	_, err = other.TryObtain(context.Background(), "invoices/send", nil)
	fmt.Println("worker-2 not obtained:", errors.Is(err, tasklock.ErrNotObtained))

	if err := lock.Release(context.Background()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrNotHeld): the lease had ended before
	}
	fmt.Println(context.Cause(lock.Context()))
	// Output:
	// invoices sent under fence 1
	// worker-2 not obtained: true
	// tasklock: lock released
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
