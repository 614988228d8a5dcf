package zkstore_test

// The example here needs a ZooKeeper ensemble, so it is compiled, not run.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/zkstore"
)

// All locks of a Store live on the Conn's session; a holder that dies is
// replaced when its session expires. Options.SessionTimeout must be the
// timeout given to zk.Connect. Waiters queue in ZooKeeper, first come,
// first served. zkstore.Dialer gives up a handshake a restarting server
// does not answer, where go-zookeeper would wait for it for over a minute.
func ExampleNew() {
	const sessionTimeout = 10 * time.Second
	conn, _, err := zk.Connect([]string{"zk-1:2181", "zk-2:2181", "zk-3:2181"}, sessionTimeout,
		zk.WithDialer(zkstore.Dialer(sessionTimeout)))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	store, err := zkstore.New(conn, &zkstore.Options{SessionTimeout: sessionTimeout})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tasklock.New(store, nil) // lock TTLs up to SessionTimeout (zkstore.ErrTTL otherwise)
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
	// lost; lock.Fence() (the lock node's czxid) lets the resource refuse a
	// holder that lost it.
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
