package zkstore

import (
	"context"
	"errors"
	"sync"

	"github.com/go-zookeeper/zk"
)

// notifier keeps the Store's subscriptions and the watches that serve them.
// While at least one subscription is active, every Acquire that finds its
// key held sets a data watch on the blocking lock node (one per node, shared
// by all subscriptions), and one goroutine waits for it. A renewal of that
// node (NodeDataChanged) only re-arms the watch; its deletion (release,
// expiry, the holder's session ending), or the watch being dropped with the
// session, is passed to every subscription as a release of the key.
type notifier struct {
	s *Store

	mu   sync.Mutex
	subs map[*subscription]struct{}
	gen  *watchGen // nil while nobody subscribes
}

type subscription struct{ onRelease func(string) }

// watchGen is the watches of one stretch of time with subscribers. Its
// goroutines end when ctx is cancelled, after the last subscription
// stopped.
type watchGen struct {
	ctx     context.Context // cancelled when the last subscription stops
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	watched map[string]struct{} // lock node paths with a watch goroutine
}

// Subscribe implements driver.Notifier with ZooKeeper watches (see
// Acquire): a waiter is woken when the lock node it waits behind is
// deleted, without polling. go-zookeeper v1.0.4 has no persistent or
// recursive watches (AddWatch), so each watch is a one-time data watch
// that its goroutine re-arms; watches survive a reconnection (the client
// sets them again) and end with the session, which wakes their waiters.
// It returns at once: the subscription is active when it returns. stop
// ends it, and once the last subscription has stopped, waits for the
// watch goroutines to exit. (A GetW still waiting for the server then
// finishes on its own goroutine when the server answers or the client gives
// the request up; the watch it may set is never read.)
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := &s.notify
	sub := &subscription{onRelease}
	n.mu.Lock()
	if n.subs == nil {
		n.subs = make(map[*subscription]struct{})
	}
	n.subs[sub] = struct{}{}
	if n.gen == nil {
		ctx, cancel := context.WithCancel(context.Background())
		n.gen = &watchGen{ctx: ctx, cancel: cancel, watched: make(map[string]struct{})}
	}
	n.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs, sub)
			var g *watchGen
			if len(n.subs) == 0 {
				g, n.gen = n.gen, nil
				g.cancel()
			}
			n.mu.Unlock()
			if g != nil {
				g.wg.Wait()
			}
		})
	}, nil
}

// watch makes sure a watch goroutine waits on the lock node at path for
// key, if anybody subscribes.
func (n *notifier) watch(key, path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.gen
	if g == nil {
		return
	}
	if _, ok := g.watched[path]; ok {
		return
	}
	g.watched[path] = struct{}{}
	g.wg.Add(1)
	go n.wait(g, key, path)
}

// wait watches the node at path until it is deleted or the generation
// ends.
func (n *notifier) wait(g *watchGen, key, path string) {
	defer g.wg.Done()
	defer func() {
		n.mu.Lock()
		delete(g.watched, path)
		n.mu.Unlock()
	}()
	type armed struct {
		ch  <-chan zk.Event
		err error
	}
	for {
		// GetW rather than ExistsW: on a missing node it sets no watch (an
		// exists watch would wait for a creation that never comes). It
		// runs through call, so that stop need not wait for a server that
		// does not answer.
		a, err := call(g.ctx, func() (armed, error) {
			_, _, ch, err := n.s.conn.GetW(path)
			return armed{ch, err}, nil
		}, nil)
		switch {
		case err != nil:
			return // stopped
		case errors.Is(a.err, zk.ErrNoNode):
			n.release(g, key)
			return
		case a.err != nil:
			return // the waiters poll, and their next attempt watches again
		}
		select {
		case ev := <-a.ch:
			if ev.Type == zk.EventNodeDataChanged {
				continue // renewed: still held
			}
			n.release(g, key) // deleted, or the watch was dropped
			return
		case <-g.ctx.Done():
			return
		}
	}
}

// release passes key to every subscription, unless g has ended. It calls
// them under n.mu (they must not block), so that none is called after its
// stop returned.
func (n *notifier) release(g *watchGen, key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gen != g {
		return
	}
	for sub := range n.subs {
		sub.onRelease(key)
	}
}
