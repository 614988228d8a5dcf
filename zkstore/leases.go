package zkstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
)

// keyState is what the children of one key node say about it.
type keyState struct {
	holder  *node   // the live lock node with the lowest sequence number
	keeps   []*node // live MinHold nodes
	expired []*node // lock and MinHold nodes whose lease ended
}

// readKey reads every lock and MinHold node of the key node kp and sorts
// them out by the server's time now (ms). A missing key node is an empty
// state.
func (s *Store) readKey(kp string, now int64) (keyState, error) {
	var st keyState
	kids, _, err := s.conn.Children(kp)
	if errors.Is(err, zk.ErrNoNode) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	names := kids[:0:0]
	for _, k := range kids {
		if _, ok := lockSeq(k); ok || strings.HasSuffix(k, keepSuffix) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return st, nil
	}
	for _, n := range s.readNodes(kp, names) {
		switch {
		case errors.Is(n.err, zk.ErrNoNode):
		case n.err != nil:
			return st, n.err
		case n.expired(now):
			st.expired = append(st.expired, n)
		case n.keep:
			st.keeps = append(st.keeps, n)
		case st.holder == nil || n.seq < st.holder.seq:
			st.holder = n
		}
	}
	return st, nil
}

// serverNow returns the server's time (ms since the epoch) by touching
// Root's data: ZooKeeper has no read of its clock, but every write stamps
// the node it changes.
func (s *Store) serverNow() (int64, error) {
	st, err := s.conn.Set(s.root, nil, -1)
	if err != nil {
		return 0, err
	}
	return st.Mtime, nil
}

// Leases implements driver.Lister: it lists Root's key nodes and, for each
// key starting with prefix, reads its lock and MinHold nodes (pipelined, 16
// keys at a time). A key's lease is its live lock node with the lowest
// sequence number (fence: the node's czxid), or else a live MinHold node
// (fence: that of the lock it keeps); TTL is what is left of it by the
// server's clock, which Leases reads by writing Root's (empty) data. Nodes
// whose lease has expired are left out, and deleted if they are still the
// versions read. The result is sorted by key. It costs two round trips per
// key, so it is meant for the CLI and the dashboard.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	out, err := call(ctx, func() ([]driver.Lease, error) { return s.listLeases(prefix) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: list leases: %w", err)
	}
	return out, nil
}

func (s *Store) listLeases(prefix string) ([]driver.Lease, error) {
	kids, _, err := s.conn.Children(s.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, k := range kids {
		if key, ok := unescapeName(k); ok && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	now, err := s.serverNow()
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []driver.Lease
		errs []error
	)
	parallel(len(keys), func(i int) {
		kp := s.keyPath(keys[i])
		st, err := s.readKey(kp, now)
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", kp, err))
			mu.Unlock()
			return
		}
		s.deleteNodes(kp, st.expired)
		var le *driver.Lease
		switch {
		case st.holder != nil:
			n := st.holder
			le = &driver.Lease{Key: keys[i], Owner: n.data.Owner, Fence: uint64(n.stat.Czxid), TTL: n.remaining(now)}
		case len(st.keeps) > 0:
			n := st.keeps[0]
			le = &driver.Lease{Key: keys[i], Owner: n.data.Owner, Fence: n.data.Fence, TTL: n.remaining(now)}
		}
		if le != nil {
			mu.Lock()
			out = append(out, *le)
			mu.Unlock()
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it deletes the key's live
// lock node with the lowest sequence number (whoever's it is) and its live
// MinHold nodes, and any expired ones (version-checked), in four round
// trips. The holder learns at its next renewal (TTL/3 at the latest), and
// waiters' watches fire at once. It returns ErrNotHeld when nothing live
// was there.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.forceRelease(key) }, nil)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("zkstore: force release %q: %w", key, err)
	}
	return err
}

func (s *Store) forceRelease(key string) error {
	now, err := s.serverNow()
	if errors.Is(err, zk.ErrNoNode) {
		return driver.ErrNotHeld // no Root: nothing was ever held
	}
	if err != nil {
		return err
	}
	kp := s.keyPath(key)
	st, err := s.readKey(kp, now)
	if err != nil {
		return err
	}
	live := st.keeps
	if st.holder != nil {
		live = append(live, st.holder)
	}
	if len(live) == 0 {
		s.deleteNodes(kp, st.expired)
		return driver.ErrNotHeld
	}
	var (
		mu      sync.Mutex
		deleted bool
		errs    []error
	)
	all := append(live, st.expired...)
	parallel(len(all), func(i int) {
		if i >= len(live) {
			_ = s.conn.Delete(kp+"/"+all[i].name, all[i].stat.Version)
			return
		}
		err := s.conn.Delete(kp+"/"+all[i].name, -1)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			deleted = true
		case !errors.Is(err, zk.ErrNoNode):
			errs = append(errs, err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !deleted {
		return driver.ErrNotHeld
	}
	return nil
}
