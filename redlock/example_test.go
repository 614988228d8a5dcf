package redlock_test

// The example here needs three Redis servers, so it is compiled, not run.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/redlock"
)

// Three independent Redis servers (not replicas of each other); a lock is
// granted when two of them grant it. ContextTimeoutEnabled lets a call stop
// waiting for a silent node at the node timeout.
func ExampleNew() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer client.Close()
		clients = append(clients, client)
	}
	store, err := redlock.New(clients, nil)
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
	var quorum *redlock.QuorumError
	switch {
	case errors.Is(err, tasklock.ErrNotObtained):
		log.Print("another replica held it for the whole minute")
		return
	case errors.As(err, &quorum):
		log.Fatalf("fewer than %d of %d nodes answered: %v", quorum.Quorum, quorum.Nodes, err)
	case err != nil:
		log.Fatal(err)
	}

	// lock.Context() ends, with the reason as its cause, if the lock is
	// lost; lock.Fence() lets the resource refuse a holder that lost it
	// (read "Fences" for what a node restart does to them).
	if err := sendInvoices(lock.Context(), lock.Fence()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrLockLost): the lock was lost during the work
	}
	if err := lock.Release(context.Background()); err != nil {
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
