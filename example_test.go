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

// Many readers or one writer. A writer that waits holds new readers off,
// so it is not starved; readers see the fence of the last writer.
func ExampleLocker_RWMutex() {
	store := memstore.New(nil)
	ctx := context.Background()
	newLocker := func(owner string, onEvent func(tasklock.Event)) *tasklock.Locker {
		lk, err := tasklock.New(store, &tasklock.Config{Owner: owner, OnEvent: onEvent})
		if err != nil {
			panic(err)
		}
		return lk
	}
	a, b := newLocker("web-1", nil), newLocker("web-2", nil)
	defer a.Close()
	defer b.Close()

	w, err := a.RWMutex("prices").Lock(ctx, nil) // publish a new price list
	if err != nil {
		panic(err)
	}
	_, err = b.RWMutex("prices").TryRLock(ctx, nil)
	fmt.Println("a reader while the writer holds:", errors.Is(err, tasklock.ErrNotObtained))
	_ = w.Release(ctx)

	r1, _ := a.RWMutex("prices").RLock(ctx, nil)
	r2, _ := b.RWMutex("prices").RLock(ctx, nil)
	fmt.Println("readers share, with the last writer's fence:", r1.Fence(), r2.Fence())
	_ = r2.Release(ctx)

	// Another writer asks while r1 reads: it waits, and new readers wait
	// behind it.
	asked := make(chan struct{}, 1)
	c := newLocker("web-3", func(e tasklock.Event) {
		if e.Type == tasklock.EventNotObtained {
			select {
			case asked <- struct{}{}:
			default:
			}
		}
	})
	defer c.Close()
	granted := make(chan *tasklock.Lock)
	go func() {
		w, err := c.RWMutex("prices").Lock(ctx, nil)
		if err != nil {
			panic(err)
		}
		granted <- w
	}()
	<-asked
	_, err = b.RWMutex("prices").TryRLock(ctx, nil)
	fmt.Println("a new reader while a writer waits:", errors.Is(err, tasklock.ErrNotObtained))
	_ = r1.Release(ctx)
	w2 := <-granted
	fmt.Println("the waiting writer got in with fence", w2.Fence())
	_ = w2.Release(ctx)
	// Output:
	// a reader while the writer holds: true
	// readers share, with the last writer's fence: 1 1
	// a new reader while a writer waits: true
	// the waiting writer got in with fence 2
}

// A fleet-wide limit: at most two imports run at once, across every
// replica. Each permit is a lease: a replica that dies gives its permit
// back when the lease ends.
func ExampleLocker_Semaphore() {
	locker, _ := tasklock.New(memstore.New(nil), nil)
	defer locker.Close()
	ctx := context.Background()

	imports := locker.Semaphore("imports", 2)
	first, err := imports.Acquire(ctx, nil)
	if err != nil {
		panic(err)
	}
	second, _ := imports.Acquire(ctx, nil)
	_, err = imports.TryAcquire(ctx, nil)
	fmt.Println("a third while two run:", errors.Is(err, tasklock.ErrNotObtained))

	// The number of permits is the key's while any is held.
	_, err = locker.Semaphore("imports", 3).TryAcquire(ctx, nil)
	fmt.Println("asked with three permits:", errors.Is(err, tasklock.ErrKindMismatch))

	_ = first.Release(ctx)
	third, _ := imports.TryAcquire(ctx, nil)
	fmt.Println("fences:", first.Fence(), second.Fence(), third.Fence())
	_ = second.Release(ctx)
	_ = third.Release(ctx)
	// Output:
	// a third while two run: true
	// asked with three permits: true
	// fences: 1 2 3
}

// A leader is the holder of the election's lock and its term the fence: a
// follower's Campaign returns when the leader resigns (or dies, at its
// TTL), with a greater term, and Observe shows who leads.
func ExampleLocker_Election() {
	store := memstore.New(nil)
	a, _ := tasklock.New(store, &tasklock.Config{Owner: "node-a"})
	defer a.Close()
	b, _ := tasklock.New(store, &tasklock.Config{Owner: "node-b"})
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ea, eb := a.Election("primary", nil), b.Election("primary", nil)
	lead, err := ea.Campaign(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("node-a leads, term", lead.Fence())
	seen := eb.Observe(ctx)
	fmt.Println("node-b sees:", (<-seen).Owner)

	elected := make(chan *tasklock.Lock)
	go func() {
		l, _ := eb.Campaign(ctx) // waits: node-a leads
		elected <- l
	}()
	_ = ea.Resign(ctx) // or: node-a dies, and its lease ends at its TTL
	next := <-elected
	fmt.Println("node-b leads, term", next.Fence(), "; node-a no longer leads:", ea.Leader() == nil)
	// Output:
	// node-a leads, term 1
	// node-b sees: node-a
	// node-b leads, term 2 ; node-a no longer leads: true
}
