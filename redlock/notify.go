package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// subscribeTimeout bounds one attempt to subscribe on one node.
const subscribeTimeout = time.Second

// resubscribeMax caps the backoff between attempts on a node that could not
// be subscribed to.
const resubscribeMax = 5 * time.Second

// Subscribe implements driver.Notifier with one redisstore subscription per
// node: every node publishes the releases it carries out, so a release
// wakes waiters through any node that held the lease (a released lease
// usually arrives once per node; waiters do not mind). It returns once a
// majority of the nodes are subscribed, or every node has answered and at
// least one is; since every lease is held by a majority, a majority of
// subscriptions hears of every release that reaches all its nodes. Nodes
// not yet subscribed are retried in the background, with backoff up to 5s,
// until stop; go-redis resubscribes a broken subscription by itself. It
// fails with a *QuorumError when no node could be subscribed. stop ends
// every subscription and waits for the store's goroutines to exit.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		stops []func()
	)
	type first struct {
		i   int
		err error
	}
	firsts := make(chan first, len(s.nodes)) // one per node, never blocks
	for i, n := range s.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			backoff := 100 * time.Millisecond
			for attempt := 0; ; attempt++ {
				actx, acancel := context.WithTimeout(bg, subscribeTimeout)
				st, err := n.store.Subscribe(actx, onRelease)
				acancel()
				if attempt == 0 {
					firsts <- first{i, err}
				}
				if err == nil {
					mu.Lock()
					stops = append(stops, st)
					mu.Unlock()
					return
				}
				t := time.NewTimer(backoff)
				select {
				case <-bg.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, resubscribeMax)
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait() // after this nobody appends to stops
			for _, st := range stops {
				st()
			}
		})
	}

	ok := 0
	var failed []*NodeError
	for range s.nodes {
		select {
		case f := <-firsts:
			if f.err != nil {
				failed = append(failed, &NodeError{Addr: s.nodes[f.i].addr, Err: f.err})
			} else if ok++; ok >= s.quorum {
				return stop, nil
			}
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("redlock: subscribe: %w", ctx.Err())
		}
	}
	if ok == 0 {
		stop()
		return nil, s.quorumError("subscribe", "", "", failed)
	}
	return stop, nil
}
