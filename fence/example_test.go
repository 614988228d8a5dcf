package fence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/fence"
	"github.com/tasklock/tasklock/memstore"
)

func ExampleRegister() {
	var reg fence.Register
	fmt.Println(reg.Write(2)) // the current holder writes
	fmt.Println(reg.Write(1)) // a paused former holder wakes up and tries
	// Output:
	// <nil>
	// tasklock: stale fence: 1 < 2
}

// A holder whose lease ran out while it was paused comes back and writes:
// the resource refuses it, because a later holder wrote with a higher fence.
func ExampleRegister_staleHolder() {
	store := memstore.New(nil)
	a, _ := tasklock.New(store, &tasklock.Config{Owner: "web-1"})
	defer a.Close()
	b, _ := tasklock.New(store, &tasklock.Config{Owner: "web-2"})
	defer b.Close()

	var reg fence.Register // stands for the protected resource
	ctx := context.Background()
	opts := &tasklock.ObtainOptions{TTL: 100 * time.Millisecond, NoRenew: true}
	first, _ := a.Obtain(ctx, "invoices", opts)
	<-first.Done() // web-1 stalls; its lease runs out (here: it is not renewed)

	second, _ := b.Obtain(ctx, "invoices", nil)
	fmt.Println("web-2 writes:", reg.Write(second.Fence()))

	err := reg.Write(first.Fence()) // web-1 resumes and writes
	fmt.Println("web-1 refused:", errors.Is(err, tasklock.ErrStaleFence))
	_ = second.Release(ctx)
	// Output:
	// web-2 writes: <nil>
	// web-1 refused: true
}
