// Package memstore is an in-process tasklock store: leases live in a map in
// this process. Use it for tests, examples and programs that run as a single
// process; it coordinates goroutines, not replicas.
//
// # Safety level
//
// Exact within the process: expiry follows the store's Clock, fences
// strictly increase per key for the life of the Store, and releases wake
// waiters through driver.Notifier. Waiting Obtain calls queue in the Store
// (driver.Queuer) and are served first come, first served; concurrent
// obtains and releases are batched (driver.Batcher). Nothing survives the
// process.
//
// It keeps read-write locks and semaphores too (driver.Kinder), by the
// rules of driver.Mode: it is their reference implementation, written to
// be plainly right rather than fast (every grant looks at each of the
// key's entries).
package memstore

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Batcher = (*Store)(nil)

// Clock is the time source of a Store; tasklock.Clock satisfies it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Store is an in-memory driver.Store. The zero value is not usable; call New.
type Store struct {
	clock Clock

	mu     sync.Mutex
	leases map[string]*lease
	fences map[string]uint64
	subs   map[int]func(string)
	nextID int
	queues map[string][]*ticket // waiters per key, first come first served (queue.go)

	// The second namespace: read-write locks and semaphores (kinds.go).
	kinds      map[string]*kindKey
	kindFences map[string]uint64

	ledgerOnce sync.Once
	ledgerSt   *ledgerState // the scheduler's ledger (ledger.go)
}

type lease struct {
	token, owner string
	fence        uint64
	expires      time.Time
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Notifier      = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// New returns an empty Store that measures expiry with clock (nil: the
// system clock).
func New(clock Clock) *Store {
	if clock == nil {
		clock = realClock{}
	}
	return &Store{
		clock:  clock,
		leases: make(map[string]*lease),
		fences: make(map[string]uint64),
		subs:   make(map[int]func(string)),
		queues: make(map[string][]*ticket),

		kinds:      make(map[string]*kindKey),
		kindFences: make(map[string]uint64),
	}
}

// live returns key's lease if it has not expired. Callers hold s.mu.
func (s *Store) live(key string, now time.Time) *lease {
	l := s.leases[key]
	if l != nil && !now.Before(l.expires) {
		delete(s.leases, key)
		return nil
	}
	return l
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	s.mu.Lock()
	var freed []string
	g, err := s.acquire(p, s.clock.Now(), &freed)
	s.announce(freed)
	return g, err
}

// MaxBatch implements driver.Batcher: a batch may carry any number of
// items.
func (s *Store) MaxBatch() int { return math.MaxInt }

// AcquireBatch implements driver.Batcher: the items are granted in order,
// under one hold of the store's mutex.
func (s *Store) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := make([]driver.AcquireResult, len(ps))
	s.mu.Lock()
	var freed []string
	now := s.clock.Now()
	for i, p := range ps {
		res[i].Grant, res[i].Err = s.acquire(p, now, &freed)
	}
	s.announce(freed)
	return res, nil
}

// acquire grants p.Key when it is free, and adds to freed the keys whose
// expired entries it dropped (read-write locks and semaphores). Callers
// hold s.mu.
func (s *Store) acquire(p driver.AcquireParams, now time.Time, freed *[]string) (driver.Grant, error) {
	if p.Mode != driver.ModeMutex {
		g, pruned, err := s.acquireKind(p, now)
		if pruned {
			*freed = append(*freed, p.Key)
		}
		return g, err
	}
	if l := s.live(p.Key, now); l != nil {
		return driver.Grant{}, &driver.HeldError{Owner: l.owner, TTL: l.expires.Sub(now)}
	}
	if t := s.queued(p.Key); t != nil {
		// The key is free but promised to the first waiter: no barging.
		s.wakeHead(p.Key)
		return driver.Grant{}, &driver.HeldError{Owner: t.p.Owner}
	}
	f := s.fences[p.Key] + 1
	s.fences[p.Key] = f
	s.leases[p.Key] = &lease{token: p.Token, owner: p.Owner, fence: f, expires: now.Add(p.TTL)}
	return driver.Grant{Fence: f}, nil
}

// Renew implements driver.Store.
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := make([]error, len(ps))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i, p := range ps {
		if p.Mode != driver.ModeMutex {
			e := s.held(p.Key, p.Token, p.Mode, now)
			if e == nil {
				res[i] = driver.ErrNotHeld
				continue
			}
			e.expires = now.Add(p.TTL)
			continue
		}
		l := s.live(p.Key, now)
		if l == nil || l.token != p.Token {
			res[i] = driver.ErrNotHeld
			continue
		}
		l.expires = now.Add(p.TTL)
	}
	return res, nil
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	errs, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{p})
	if err != nil {
		return err
	}
	return errs[0]
}

// ReleaseBatch implements driver.Batcher: the items are released in order,
// under one hold of the store's mutex, and subscribers are told afterwards.
func (s *Store) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := make([]error, len(ps))
	var freed []string
	s.mu.Lock()
	now := s.clock.Now()
	for i, p := range ps {
		if p.Mode != driver.ModeMutex {
			var gone bool
			gone, res[i] = s.releaseKind(p, now)
			if gone {
				freed = append(freed, p.Key)
			}
			continue
		}
		l := s.live(p.Key, now)
		switch {
		case l == nil || l.token != p.Token:
			res[i] = driver.ErrNotHeld
		case p.KeepFor > 0:
			l.expires = now.Add(p.KeepFor)
		default:
			delete(s.leases, p.Key)
			s.wakeHead(p.Key)
			freed = append(freed, p.Key)
		}
	}
	s.announce(freed)
	return res, nil
}

// announce unlocks s.mu, then tells subscribers of every key in freed.
// Callers hold s.mu.
func (s *Store) announce(freed []string) {
	var subs []func(string)
	if len(freed) > 0 {
		subs = s.subscribers()
	}
	s.mu.Unlock()
	for _, key := range freed {
		for _, f := range subs {
			f(key)
		}
	}
}

// ForceRelease implements driver.ForceReleaser: it deletes key's mutex
// lease and every read-write lock or semaphore entry of key, whoever holds
// them.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	now := s.clock.Now()
	mutex := s.live(key, now) != nil
	k, pruned := s.liveKind(key, now)
	if !mutex && k == nil {
		if pruned {
			s.announce([]string{key})
		} else {
			s.mu.Unlock()
		}
		return driver.ErrNotHeld
	}
	if mutex {
		delete(s.leases, key)
		s.wakeHead(key)
	}
	delete(s.kinds, key)
	s.announce([]string{key})
	return nil
}

func (s *Store) subscribers() []func(string) {
	if len(s.subs) == 0 {
		return nil
	}
	fs := make([]func(string), 0, len(s.subs))
	for _, f := range s.subs {
		fs = append(fs, f)
	}
	return fs
}

// Subscribe implements driver.Notifier. onRelease runs on the releasing
// goroutine.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.subs[id] = onRelease
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}, nil
}

// Leases implements driver.Lister.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []driver.Lease
	for k := range s.leases {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if l := s.live(k, now); l != nil {
			out = append(out, driver.Lease{Key: k, Owner: l.owner, Fence: l.fence, TTL: l.expires.Sub(now)})
		}
	}
	return s.kindLeases(out, prefix, now), nil
}
