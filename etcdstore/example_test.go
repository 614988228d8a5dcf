package etcdstore_test

// The example here needs an etcd cluster, so it is compiled, not run.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/etcdstore"
)

// All locks of a Store live on one etcd session lease; a holder that dies
// is replaced within SessionTTL. Waiters queue at etcd, first come, first
// served. Close the Locker, then the Store, then the client.
func ExampleNew() {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"etcd-1:2379", "etcd-2:2379", "etcd-3:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := etcdstore.New(client, &etcdstore.Options{SessionTTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(context.Background())
	locker, err := tasklock.New(store, nil) // lock TTLs up to SessionTTL (etcdstore.ErrTTL otherwise)
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
	// lost; lock.Fence() (the key's create revision) lets the resource
	// refuse a holder that lost it.
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
