package tasklock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/memstore"
)

func Example() {
	store := memstore.New(nil) // in production: one Redis, PostgreSQL, ... for every replica
	report := func(ctx context.Context) error {
		fmt.Println("the report runs")
		return nil
	}
	opts := &tasklock.ObtainOptions{TTL: 10 * time.Second, MinHold: 30 * time.Second}

	// Two replicas reach the nightly report at about the same time.
	for _, replica := range []string{"web-1", "web-2"} {
		locker, err := tasklock.New(store, &tasklock.Config{Owner: replica})
		if err != nil {
			panic(err)
		}
		defer locker.Close()
		res, err := tasklock.Once(context.Background(), locker, "nightly-report", opts, report)
		switch {
		case err != nil:
			fmt.Println(replica, "failed:", err)
		case res.Ran:
			fmt.Println(replica, "ran it with fence", res.Fence)
		default:
			fmt.Println(replica, "skipped it: held by", res.Holder)
		}
	}
	// Output:
	// the report runs
	// web-1 ran it with fence 1
	// web-2 skipped it: held by web-1
}

func ExampleWithLock() {
	locker, _ := tasklock.New(memstore.New(nil), nil)
	defer locker.Close()

	// A mutex: every caller waits for its turn and runs.
	for i := range 2 {
		err := tasklock.WithLock(context.Background(), locker, "ledger-compaction", nil, func(ctx context.Context) error {
			fmt.Println("turn", i)
			return nil
		})
		fmt.Println("err:", err)
	}
	// Output:
	// turn 0
	// err: <nil>
	// turn 1
	// err: <nil>
}

func ExampleLocker_TryObtain() {
	store := memstore.New(nil)
	a, _ := tasklock.New(store, &tasklock.Config{Owner: "web-1"})
	defer a.Close()
	b, _ := tasklock.New(store, &tasklock.Config{Owner: "web-2"})
	defer b.Close()

	ctx := context.Background()
	lock, err := a.TryObtain(ctx, "cleanup", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("web-1 holds cleanup with fence", lock.Fence())

	_, err = b.TryObtain(ctx, "cleanup", nil)
	var held *tasklock.NotObtainedError
	if errors.As(err, &held) {
		fmt.Println("web-2 not obtained; holder:", held.Owner)
	}
	fmt.Println(errors.Is(err, tasklock.ErrNotObtained))
	_ = lock.Release(ctx)
	// Output:
	// web-1 holds cleanup with fence 1
	// web-2 not obtained; holder: web-1
	// true
}

func ExampleLocker_Obtain() {
	store := memstore.New(nil)
	locker, _ := tasklock.New(store, nil)
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, _ := locker.Obtain(ctx, "sync", nil)
	go func() { _ = first.Release(context.Background()) }()

	// Waits until the first holder releases; woken by the store.
	second, err := locker.Obtain(ctx, "sync", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("fences:", first.Fence(), second.Fence())
	_ = second.Release(ctx)
	// Output: fences: 1 2
}

func ExampleWithLock_lockLost() {
	locker, _ := tasklock.New(memstore.New(nil), nil)
	defer locker.Close()

	// MaxHold bounds the work: its context ends, with ErrMaxHold as cause,
	// before the lease could expire at the store.
	opts := &tasklock.ObtainOptions{TTL: 10 * time.Second, MaxHold: 300 * time.Millisecond}
	err := tasklock.WithLock(context.Background(), locker, "slow-job", opts, func(ctx context.Context) error {
		<-ctx.Done()
		fmt.Println("work stopped:", context.Cause(ctx))
		return ctx.Err()
	})
	fmt.Println(errors.Is(err, tasklock.ErrMaxHold), errors.Is(err, tasklock.ErrLockLost))
	// Output:
	// work stopped: tasklock: max hold reached
	// true true
}

func ExampleLock_Heartbeat() {
	locker, _ := tasklock.New(memstore.New(nil), nil)
	defer locker.Close()

	opts := &tasklock.ObtainOptions{TTL: time.Second, ProgressTimeout: 300 * time.Millisecond}
	lock, _ := locker.TryObtain(context.Background(), "import", opts)
	for range 3 {
		time.Sleep(50 * time.Millisecond) // a unit of work
		lock.Heartbeat()
	}
	// The worker stops reporting progress: renewal stops and Done closes.
	<-lock.Done()
	fmt.Println(lock.Err())
	// Output: tasklock: no progress heartbeat within ProgressTimeout
}

// Holds are reentrant within a call chain that carries the lock's context:
// the nested Obtain returns at once, on the same lease.
func ExampleLocker_Obtain_reentrant() {
	store := memstore.New(nil)
	locker, _ := tasklock.New(store, &tasklock.Config{Owner: "web-1"})
	defer locker.Close()
	other, _ := tasklock.New(store, &tasklock.Config{Owner: "web-2"})
	defer other.Close()
	ctx := context.Background()

	outer, err := locker.Obtain(ctx, "accounts", nil)
	if err != nil {
		panic(err)
	}
	// Deeper in the same call chain, with the lock's context (or one
	// derived from it):
	inner, err := locker.Obtain(outer.Context(), "accounts", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("same fence:", inner.Fence() == outer.Fence())

	_ = inner.Release(ctx) // the lease stays with the outer hold
	_, err = other.TryObtain(ctx, "accounts", nil)
	fmt.Println("after the inner release, held:", errors.Is(err, tasklock.ErrNotObtained))

	_ = outer.Release(ctx) // the outermost release frees the key
	l, err := other.TryObtain(ctx, "accounts", nil)
	fmt.Println("after the outer release:", err)
	_ = l.Release(ctx)
	// Output:
	// same fence: true
	// after the inner release, held: true
	// after the outer release: <nil>
}
