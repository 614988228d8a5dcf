package zkstore

import (
	"context"
	"sync"

	"github.com/go-zookeeper/zk"
)

// Subscribe implements driver.Notifier for read-write locks and
// semaphores (a mutex's waiters queue instead: see Enqueue). Their entries
// released or force-released through this Store are announced at once.
// For the others, while a subscription runs, a kinds Acquire of this Store that reads a key's
// entries sets a child watch on the key's node, unless one of this
// Store's is set there already, at no extra request (getChildren with a
// watch). When it fires — an entry was deleted (released, ended at its
// deadline, force-released, gone with its session) or created — every
// subscription's onRelease is called with the key; so a waiter whose
// attempt was refused is woken by the next change of the key. One watch
// per key and Store, one goroutine waiting on it, until it fires or the
// last subscription stops. ZooKeeper sends the event to the session, so a
// change while the client reconnects fires it at the reconnection; the
// session's end fires it too.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.note.subscribe(onRelease), nil
}

// notifier keeps the Store's subscriptions and the watches set for them.
type notifier struct {
	mu   sync.Mutex
	subs map[*subscription]struct{}
	gen  *watchGen // nil while nobody subscribes
}

// subscription is one Subscribe's callback.
type subscription struct{ onRelease func(key string) }

// watchGen is the watches set while one run of subscriptions lasts: the
// keys watched, and the goroutines waiting on them, which end when the
// last subscription stops.
type watchGen struct {
	quit    chan struct{}
	watched map[string]bool
	wg      sync.WaitGroup // the goroutines waiting on watches
}

func (n *notifier) subscribe(onRelease func(key string)) func() {
	sub := &subscription{onRelease: onRelease}
	n.mu.Lock()
	if n.subs == nil {
		n.subs = make(map[*subscription]struct{})
	}
	n.subs[sub] = struct{}{}
	if n.gen == nil {
		n.gen = &watchGen{quit: make(chan struct{}), watched: make(map[string]bool)}
	}
	n.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs, sub)
			g := n.gen
			last := len(n.subs) == 0 && g != nil
			if last {
				n.gen = nil
				close(g.quit)
			}
			n.mu.Unlock()
			if last {
				g.wg.Wait()
			}
		})
	}
}

// watchSlot is one kinds Acquire's turn to set the watch on its key.
type watchSlot struct {
	n     *notifier
	gen   *watchGen
	key   string
	armed bool // the watch is set and a goroutine waits on it
}

// slot returns the calling Acquire's turn to set a watch on key, or nil
// when nobody subscribes or a watch of this Store is set there already.
// The caller calls done when it is through.
func (n *notifier) slot(key string) *watchSlot {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.gen
	if g == nil || g.watched[key] {
		return nil
	}
	g.watched[key] = true
	return &watchSlot{n: n, gen: g, key: key}
}

// wanted reports whether the next read of the key's children should set
// the watch.
func (w *watchSlot) wanted() bool { return w != nil && !w.armed }

// set hands the watch a read set (nil: the read failed) to a goroutine
// that waits for it, unless every subscription stopped meanwhile (the
// watch then fires into its buffered channel, unread).
func (w *watchSlot) set(ch <-chan zk.Event) {
	if ch == nil {
		return
	}
	w.armed = true
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	if w.n.gen != w.gen {
		return
	}
	w.gen.wg.Add(1)
	go w.n.wait(w.gen, w.key, ch)
}

// done gives the turn back when no watch was set.
func (w *watchSlot) done() {
	if w == nil || w.armed {
		return
	}
	w.n.mu.Lock()
	delete(w.gen.watched, w.key)
	w.n.mu.Unlock()
}

// wait waits for the watch on key and tells every subscription of it,
// unless they all stopped first.
func (n *notifier) wait(g *watchGen, key string, ch <-chan zk.Event) {
	defer g.wg.Done()
	select {
	case <-ch:
	case <-g.quit:
		return
	}
	n.mu.Lock()
	delete(g.watched, key)
	live := n.gen == g
	n.mu.Unlock()
	if live {
		n.announce(key)
	}
}

// announce tells every subscription of a change of key: a watch fired,
// or this Store released or force-released an entry of key.
func (n *notifier) announce(key string) {
	n.mu.Lock()
	fns := make([]func(string), 0, len(n.subs))
	for sub := range n.subs {
		fns = append(fns, sub.onRelease)
	}
	n.mu.Unlock()
	for _, fn := range fns {
		fn(key)
	}
}
