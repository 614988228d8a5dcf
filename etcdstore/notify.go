package etcdstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
)

// Re-watch backoff of a broken subscription.
const (
	watchRetryMin = 50 * time.Millisecond
	watchRetryMax = 2 * time.Second
)

// Subscribe implements driver.Notifier with one etcd watch on the Store's
// lock entries (its prefix, less the ledger's keys) that reports deletions
// only (WithFilterPut): every release,
// expiry, reaped deadline and forced release of a lock deletes its key (a
// read-write lock's or semaphore's entry, a writer's waiting entry too),
// and onRelease gets the lock key of each. It returns once etcd confirmed
// the watch. The watch runs on a watcher of its own
// (clientv3.NewWatcher) and requires a leader, so a member cut off from the
// cluster ends it instead of keeping it silent; one goroutine passes
// events on and re-watches with backoff from the next revision after a
// failure (from the current one when that was compacted, and then waiters'
// polls cover what was missed). stop cancels the watch, closes the watcher
// and returns once every goroutine has exited.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	w := clientv3.NewWatcher(s.c)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	ch := w.Watch(wctx, s.prefix, clientv3.WithRange(s.locksEnd()), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	var rev int64
	select {
	case resp, ok := <-ch:
		switch {
		case !ok:
			err = fmt.Errorf("watch closed")
		case resp.Err() != nil:
			err = resp.Err()
		case !resp.Created:
			err = fmt.Errorf("watch answered %+v before it was created", resp.Header)
		}
		if err == nil {
			rev = resp.Header.Revision
		}
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return nil, fmt.Errorf("etcdstore: subscribe %s: %w", s.prefix, err)
	}
	done := make(chan struct{})
	go s.watchLoop(wctx, w, ch, rev, onRelease, done)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			_ = w.Close()
			<-done
		})
	}, nil
}

func (s *Store) watchLoop(ctx context.Context, w clientv3.Watcher, ch clientv3.WatchChan, rev int64, onRelease func(string), done chan<- struct{}) {
	defer close(done)
	wait := watchRetryMin
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		for resp := range ch {
			if resp.CompactRevision != 0 {
				rev = 0 // deletions were missed: waiters' polls cover them
				break
			}
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				rev = ev.Kv.ModRevision
				if ev.Type != mvccpb.DELETE {
					continue
				}
				if key, ok := s.lockOf(ev.Kv.Key); ok {
					onRelease(key)
				}
			}
			wait = watchRetryMin
		}
		if ctx.Err() != nil {
			return
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait = min(wait*2, watchRetryMax)
		opts := []clientv3.OpOption{clientv3.WithRange(s.locksEnd()), clientv3.WithFilterPut()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		ch = w.Watch(ctx, s.prefix, opts...)
	}
}

// locksEnd is the end of the Store's lock entries: the ledger's keys
// (ledger.go) start there, and are neither watched nor listed.
func (s *Store) locksEnd() string { return s.prefix + ledgerMark }

// Leases implements driver.Lister: the held locks whose key starts with
// prefix, sorted by key (a read-write lock's or a semaphore's entries
// after a mutex of the same name, each of its entries a Lease, a writer's
// waiting entry with Waiting set), from one linearizable Txn of two range
// reads plus one LeaseTimeToLive per holder's lease (one per holding
// Store, not per lock). TTL is how long the key can live at most if its
// holder stops: its lease's remaining TTL (etcd rounds it up to seconds),
// capped by the lock TTL the holder asked for when it obtained the lock.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	from, kfrom := s.prefix+escape(prefix), s.kindsRoot()+escape(prefix)
	resp, err := s.c.Txn(ctx).Then(
		clientv3.OpGet(from, clientv3.WithRange(min(clientv3.GetPrefixRangeEnd(from), s.kindsRoot()))),
		clientv3.OpGet(kfrom, clientv3.WithRange(clientv3.GetPrefixRangeEnd(kfrom))),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: list leases: %w", err)
	}
	// found is one lease as read: its entry, and the lock TTL asked for.
	type found struct {
		kv      *mvccpb.KeyValue
		lease   driver.Lease
		lockTTL time.Duration
	}
	var all []found
	heads := map[string]int{} // by mutex key: its holder's index in all
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		key, _, ok := s.parseKey(kv.Key)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		_, owner, lockTTL := parseValue(kv.Value)
		f := found{kv: kv, lease: driver.Lease{Key: key, Owner: owner, Fence: uint64(kv.CreateRevision)}, lockTTL: lockTTL}
		if i, ok := heads[key]; !ok {
			heads[key] = len(all)
			all = append(all, f)
		} else if kv.CreateRevision < all[i].kv.CreateRevision {
			all[i] = f
		}
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	fences := map[string]int64{} // by kinds key: the counter's mod revision
	for _, kv := range kvs {
		if key, sub, _, ok := s.parseKindKey(kv.Key); ok && sub == subFence {
			fences[key] = kv.ModRevision
		}
	}
	for _, kv := range kvs {
		key, sub, _, ok := s.parseKindKey(kv.Key)
		if !ok || sub == subFence || !strings.HasPrefix(key, prefix) {
			continue
		}
		_, _, lockTTL := parseKindValue(kv.Value)
		all = append(all, found{kv: kv, lease: kindLease(key, sub, kv, fences[key]), lockTTL: lockTTL})
	}

	left := map[int64]time.Duration{} // remaining per lease; < 0: gone
	out := make([]driver.Lease, 0, len(all))
	for _, f := range all {
		rem, ok := left[f.kv.Lease]
		if !ok {
			rem = -1
			if f.kv.Lease != 0 {
				r, err := s.c.TimeToLive(ctx, clientv3.LeaseID(f.kv.Lease))
				if err != nil {
					return nil, fmt.Errorf("etcdstore: list leases: %w", err)
				}
				if r.TTL >= 0 {
					rem = time.Duration(r.TTL) * time.Second
				}
			}
			left[f.kv.Lease] = rem
		}
		if rem < 0 {
			continue // expired since the read
		}
		if f.lockTTL > 0 && f.lockTTL < rem {
			rem = f.lockTTL
		}
		f.lease.TTL = rem
		out = append(out, f.lease)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		if a.Mode != b.Mode {
			return a.Mode < b.Mode
		}
		return !a.Waiting && b.Waiting
	})
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it deletes the mutex
// holder's entry, the oldest under key's prefix, whoever holds it, and
// every entry of the read-write lock or semaphore named key (its holders
// and waiting writers; the counter stays): a read of the mutex's head, then
// one Txn that deletes them all, the head only if it was not replaced
// meanwhile. The holders learn at their next renewal; the first waiter in
// the mutex's queue, or a watching waiter, is woken. It returns ErrNotHeld
// when nothing was there.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	resp, err := s.c.Get(ctx, s.keyPrefix(key), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return fmt.Errorf("etcdstore: force release %q: %w", key, err)
	}
	kp := s.kindPrefix(key)
	kinds := []clientv3.Op{clientv3.OpDelete(kp+subPermit, clientv3.WithRange(clientv3.GetPrefixRangeEnd(kp)))} // every entry, not the counter
	txn := s.c.Txn(ctx)
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(append(kinds, clientv3.OpDelete(string(kv.Key)))...).
			Else(kinds...)
	} else {
		txn = txn.Then(kinds...)
	}
	tr, err := txn.Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: force release %q: %w", key, err)
	}
	var deleted int64
	for _, r := range tr.Responses {
		deleted += r.GetResponseDeleteRange().GetDeleted()
	}
	if deleted == 0 {
		return driver.ErrNotHeld // released meanwhile, or never held
	}
	return nil
}
