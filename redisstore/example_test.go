package redisstore_test

// The examples here need a Redis server, so they are compiled, not run.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/redisstore"
)

// One Redis node, shared by every replica of the service.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, nil)
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
	// lost; lock.Fence() lets the resource refuse a holder that lost it.
	if err := sendInvoices(lock.Context(), lock.Fence()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrLockLost): the lock was lost during the work
	}
	if err := lock.Release(context.Background()); err != nil {
		log.Print(err) // errors.Is(err, tasklock.ErrNotHeld): the lease had ended before
	}
}

// A Sentinel-managed master. Replication is asynchronous: WaitReplicas
// narrows, but does not close, the window in which a failover loses a
// grant (see "Safety level").
func ExampleNew_sentinel() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, &redisstore.Options{WaitReplicas: 1})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tasklock.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	lock, err := locker.TryObtain(context.Background(), "invoices/send", nil)
	switch {
	case errors.Is(err, tasklock.ErrNotObtained):
		return // another replica has it
	case errors.Is(err, redisstore.ErrReplicas):
		log.Print("too few replicas acknowledged the grant; not obtained")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lock.Release(context.Background())
	_ = sendInvoices(lock.Context(), lock.Fence())
}

// A Redis Cluster: each key's lease and fence counter share a hash slot, and
// renewals go to each master in one pipeline. redis.NewUniversalClient
// returns a cluster client too when given several addresses.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"redis-1:6379", "redis-2:6379", "redis-3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tasklock.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	_ = locker // Obtain, work under lock.Context(), Release: as in the first example
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
