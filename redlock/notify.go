package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// subscribeTimeout bounds one attempt to subscribe on one node.
const subscribeTimeout = time.Second

// resubscribeMax caps the backoff between attempts on a node that could not
// be subscribed to.
const resubscribeMax = 5 * time.Second

// Subscribe implements driver.Notifier with one redisstore subscription per
// node: every node publishes the deletions of leases that Release carries
// out there, each naming the lease's token, and onRelease is called once
// per released lock, when a majority of the nodes have published its
// deletion: then the key is free on a majority, and an attempt can win it.
// Give-backs of grants that did not become a lock publish nothing, so they
// wake nobody (see Acquire); ForceRelease's deletions, which name no
// token, call onRelease for each node. A lock held on just a majority
// whose release one of those nodes' subscriptions misses wakes nobody:
// waiters then find it free by polling. It returns once a majority of the
// nodes are subscribed, or every node has answered and at least one is.
// Nodes not yet subscribed are retried in the background, with backoff up
// to 5s, until stop; go-redis resubscribes a broken subscription by
// itself. It fails with a *QuorumError when no node could be subscribed.
// stop ends every subscription and waits for the store's goroutines to
// exit.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	heard := newReleases(len(s.nodes), s.quorum, onRelease)
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
				st, err := n.store.Subscribe(actx, func(msg string) { heard.from(i, msg) })
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

// releaseMemory is how long releases keeps count of a lease's deletions:
// far longer than the nodes of one release take to publish it.
const releaseMemory = 10 * time.Second

// releases turns the deletions the nodes publish into one onRelease per
// released lock. It is safe for concurrent use.
type releases struct {
	onRelease     func(key string)
	nodes, quorum int

	mu       sync.Mutex
	cur, old map[string]*deletion // by message; old: the previous period's
	rotated  time.Time            // when old took over from cur
}

// deletion counts the nodes that published one lease's deletion.
type deletion struct {
	from  []bool // by node
	count int
	woken bool
}

func newReleases(nodes, quorum int, onRelease func(key string)) *releases {
	return &releases{onRelease: onRelease, nodes: nodes, quorum: quorum,
		cur: make(map[string]*deletion), old: make(map[string]*deletion), rotated: time.Now()}
}

// from takes msg, published by node i: release.lua's '}' token ':' key, or
// a plain key (redisstore's ForceRelease), passed on at once. A lease's
// deletion calls onRelease when the quorum-th node publishes it. The same
// message from a node already counted is the same token's lease released
// again, and starts a new count. Counts are forgotten after one to two
// releaseMemory periods.
func (r *releases) from(i int, msg string) {
	rest, tagged := strings.CutPrefix(msg, "}")
	if !tagged {
		r.onRelease(msg)
		return
	}
	_, key, ok := strings.Cut(rest, ":")
	if !ok {
		return // not ours
	}
	r.mu.Lock()
	if now := time.Now(); now.Sub(r.rotated) >= releaseMemory {
		r.old, r.cur, r.rotated = r.cur, make(map[string]*deletion), now
	}
	d := r.cur[msg]
	if d == nil {
		if d = r.old[msg]; d != nil {
			delete(r.old, msg)
			r.cur[msg] = d
		}
	}
	if d == nil || d.from[i] {
		d = &deletion{from: make([]bool, r.nodes)}
		r.cur[msg] = d
	}
	d.from[i] = true
	d.count++
	wake := !d.woken && d.count >= r.quorum
	d.woken = d.woken || wake
	if d.count == r.nodes {
		delete(r.cur, msg)
	}
	r.mu.Unlock()
	if wake {
		r.onRelease(key)
	}
}
