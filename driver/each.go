package driver

import (
	"context"
	"sync"
)

// eachParallel bounds the calls AcquireEach and ReleaseEach make at once.
const eachParallel = 16

// AcquireEach answers a batch with one acquire call per item, for a store
// that cannot batch in some configuration (MaxBatch 1) but still
// implements Batcher: the items of different keys concurrently, up to 16
// at a time, and the items of one key one after the other, so that a key
// named twice goes to its first item, as Batcher requires.
func AcquireEach(ctx context.Context, ps []AcquireParams, acquire func(context.Context, AcquireParams) (Grant, error)) []AcquireResult {
	res := make([]AcquireResult, len(ps))
	eachByKey(len(ps), func(i int) string { return ps[i].Key }, func(i int) {
		res[i].Grant, res[i].Err = acquire(ctx, ps[i])
	})
	return res
}

// ReleaseEach is AcquireEach for releases.
func ReleaseEach(ctx context.Context, ps []ReleaseParams, release func(context.Context, ReleaseParams) error) []error {
	errs := make([]error, len(ps))
	eachByKey(len(ps), func(i int) string { return ps[i].Key }, func(i int) {
		errs[i] = release(ctx, ps[i])
	})
	return errs
}

// eachByKey calls fn(i) for i in 0..n-1: concurrently for different keys,
// up to eachParallel at once, and in order for the items of one key. It
// returns when every call has. A lone item is called on the caller's
// goroutine.
func eachByKey(n int, key func(int) string, fn func(int)) {
	if n == 1 {
		fn(0)
		return
	}
	groups := make(map[string][]int, n)
	var order []string
	for i := range n {
		k := key(i)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, eachParallel)
	for _, k := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range groups[k] {
				fn(i)
			}
		})
	}
	wg.Wait()
}
