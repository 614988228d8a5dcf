package zkstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
)

// keyState is what the children of one key node say about it.
type keyState struct {
	holder  *node   // the lock node with the lowest sequence number
	keeps   []*node // live MinHold nodes
	expired []*node // MinHold nodes whose time ended
}

// readKey reads the key node kp's lowest lock node and its MinHold nodes,
// and sorts the MinHold nodes out by the server's time now (ms). A missing
// key node is an empty state.
func (s *Store) readKey(kp string, now int64) (keyState, error) {
	for round := 0; ; round++ {
		var st keyState
		kids, _, err := s.conn.Children(kp)
		if errors.Is(err, zk.ErrNoNode) {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		preds, names := blockersOf(kids, "", math.MaxInt64)
		if len(preds) > 0 {
			names = append([]string{preds[0]}, names...)
		}
		if len(names) == 0 {
			return st, nil
		}
		gone := false
		for _, n := range s.readNodes(kp, names) {
			switch {
			case errors.Is(n.err, zk.ErrNoNode):
				gone = gone || !n.keep
			case n.err != nil:
				return st, n.err
			case !n.keep:
				st.holder = n
			case n.expired(now):
				st.expired = append(st.expired, n)
			default:
				st.keeps = append(st.keeps, n)
			}
		}
		if !gone || round == 3 {
			return st, nil
		}
		// The lowest lock node went meanwhile: the next one holds now.
	}
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
// key starting with prefix, its lowest lock node and its MinHold nodes
// (pipelined, 16 keys at a time). A key's lease is its lowest lock node
// (fence: the node's czxid; TTL: the lease length it was granted with, as
// its holder's Store ends it at most that long after its last renewal),
// or else a live MinHold node (fence: that of the lock it keeps; TTL: what
// is left of it by the server's clock, which Leases reads by writing Root's
// (empty) data). Expired MinHold nodes are left out, and deleted if they are
// still the versions read. The lowest lock node may be a waiter that is at
// the head of the queue and about to be granted. Read-write locks and
// semaphores are listed as one Lease per entry (a waiting writer's claim
// with Waiting set), with the fence, TTL, mode and limit of each. The
// result is sorted by key, then mode, then fence. It costs two round trips
// per key, plus one per MinHold node, plus one per kinds key and one per
// entry, so it is meant for the CLI and the dashboard.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	out, err := call(ctx, func() ([]driver.Lease, error) { return s.listLeases(prefix) }, nil)
	if err != nil {
		return nil, fmt.Errorf("zkstore: list leases: %w", err)
	}
	return out, nil
}

func (s *Store) listLeases(prefix string) ([]driver.Lease, error) {
	out, err := s.listLocks(prefix)
	if err != nil {
		return nil, err
	}
	kinds, err := s.listKinds(prefix)
	if err != nil {
		return nil, err
	}
	out = append(out, kinds...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Key != b.Key {
			return a.Key < b.Key
		}
		if a.Mode != b.Mode {
			return a.Mode < b.Mode
		}
		return a.Fence < b.Fence
	})
	return out, nil
}

// keysUnder lists the keys whose nodes are children of parent (Root, or
// Root/%kinds) and start with prefix; children that are no key's node
// (%kinds, %ledger, the marker) are left out.
func (s *Store) keysUnder(parent, prefix string) ([]string, error) {
	kids, _, err := s.conn.Children(parent)
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
	return keys, nil
}

// listLocks lists the mutexes whose key starts with prefix.
func (s *Store) listLocks(prefix string) ([]driver.Lease, error) {
	keys, err := s.keysUnder(s.root, prefix)
	if err != nil {
		return nil, err
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
			le = &driver.Lease{Key: keys[i], Owner: n.data.Owner, Fence: uint64(n.stat.Czxid), TTL: n.ttl()}
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
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it deletes the key's
// lowest lock node (whoever's it is) and its MinHold nodes. The lock node is
// deleted in a multi that also raises the version of the marker node
// Root/%force-released and appends the node's path to the marker's data,
// so that the holder's Store learns of it at its next renewal (TTL/3 at the
// latest) without reading its nodes (see Renew); the waiter behind it is
// woken at once by its watch. Five round trips (the server's time, the
// children, the lowest node, the marker, the multi), more when the key or
// the marker changes meanwhile. It also deletes every entry of the key's
// read-write lock or semaphore (forceKinds). It returns ErrNotHeld when
// nothing live was there.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.forceRelease(key) }, nil)
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("zkstore: force release %q: %w", key, err)
	}
	return err
}

func (s *Store) forceRelease(key string) error {
	lockErr := s.forceLock(key)
	if lockErr != nil && !errors.Is(lockErr, driver.ErrNotHeld) {
		return lockErr
	}
	kinds, err := s.forceKinds(key)
	switch {
	case err != nil:
		return err
	case kinds:
		s.note.announce(key)
		return nil
	}
	return lockErr
}

// forceLock force-releases key's mutex: its lowest lock node and its
// MinHold nodes.
func (s *Store) forceLock(key string) error {
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
	deleted := false
	if len(st.keeps)+len(st.expired) > 0 {
		all := append(st.keeps, st.expired...)
		errs := make([]error, len(all))
		parallel(len(all), func(i int) {
			v := all[i].stat.Version
			if i < len(st.keeps) {
				v = -1
			}
			errs[i] = s.conn.Delete(kp+"/"+all[i].name, v)
		})
		for i, err := range errs {
			switch {
			case i >= len(st.keeps) || errors.Is(err, zk.ErrNoNode):
			case err != nil:
				return err
			default:
				deleted = true
			}
		}
	}
	for round := 0; st.holder != nil; round++ {
		path := kp + "/" + st.holder.name
		data, mst, err := s.readMarker()
		if err != nil {
			return err
		}
		resp, err := s.conn.Multi(
			&zk.DeleteRequest{Path: path, Version: -1},
			&zk.SetDataRequest{Path: s.marker, Data: markerData(data, path), Version: mst.Version},
		)
		switch {
		case err == nil:
			return nil
		case round == 4 || len(resp) != 2:
			return err
		case errors.Is(resp[0].Error, zk.ErrNoNode):
			// Released meanwhile: the next node may hold now.
			if st, err = s.readKey(kp, now); err != nil {
				return err
			}
			st.keeps = nil
		case errors.Is(resp[1].Error, zk.ErrBadVersion):
			// Another force release came between: read the marker again.
		default:
			return err
		}
	}
	if !deleted {
		return driver.ErrNotHeld
	}
	return nil
}
