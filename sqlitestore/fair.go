package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.FairQueuer = (*Store)(nil)

// Polling of a fair Ticket's Wait: from fairPollMin, doubling to
// fairPollMax, jittered, and never past the next renewal of the entry nor
// the mutex holder's end.
const (
	fairPollMin = 2 * time.Millisecond
	fairPollMax = 100 * time.Millisecond
)

// queueSQL makes the fair queue's statements; locks is the quoted lock
// table. ?1 is the key, ?2 the token, ?3 the entry's TTL in µs.
func (k *kindsSQL) queueSQL(locks string) {
	q := k.queue
	live := `expires_at > ` + nowUS
	// A token enqueued again (a retry whose answer was lost) keeps its place.
	k.enqueue = `INSERT INTO ` + q + ` ("key", token, expires_at) VALUES (?1, ?2, ` + nowUS + ` + ?3)
ON CONFLICT ("key", token) DO UPDATE SET expires_at = excluded.expires_at
RETURNING seq`
	k.queueRenew = `UPDATE ` + q + ` SET expires_at = ` + nowUS + ` + ?3
WHERE "key" = ?1 AND token = ?2 AND ` + live + `
RETURNING seq`
	k.queueHead = `SELECT seq FROM ` + q + ` WHERE "key" = ?1 AND ` + live + ` ORDER BY seq LIMIT 1`
	// One row, read without the write lock: the head of the live queue
	// (NULL when empty), whether the token's entry is live, and the
	// mutex's holder and remaining lease in µs (NULL when free).
	k.queuePoll = `SELECT (` + k.queueHead + `),
  EXISTS (SELECT 1 FROM ` + q + ` WHERE "key" = ?1 AND token = ?2 AND ` + live + `),
  l.owner, l.expires_at - ` + nowUS + `
FROM (SELECT 1) LEFT JOIN ` + locks + ` AS l ON l."key" = ?1 AND l.` + live
	// Deletes the granted entry, and the dead ones of its key.
	k.queueGrant = `DELETE FROM ` + q + ` WHERE "key" = ?1 AND (token = ?2 OR expires_at <= ` + nowUS + `)`
	k.queueLeave = `DELETE FROM ` + q + ` WHERE "key" = ?1 AND token = ?2`
}

// EnqueueFair implements driver.FairQueuer with one INSERT: an entry for
// p.Token at the back of p.Key's queue, a lease of p.TTL by SQLite's clock
// that the Ticket's Wait renews while it runs. Only a mutex waits in a
// fair queue.
func (s *Store) EnqueueFair(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if err := checkAcquire(p); err != nil {
		return nil, err
	}
	if p.Mode != driver.ModeMutex {
		return nil, fmt.Errorf("sqlitestore: enqueue %q: %w: only a mutex waits in a fair queue, not a %v hold", p.Key, driver.ErrUnsupported, p.Mode)
	}
	t := &ticket{s: s, p: p, ttl: micros(p.TTL)}
	sent := time.Now()
	err := s.write(ctx, func(ctx context.Context) error {
		return s.db.QueryRowContext(ctx, s.kinds.enqueue, p.Key, p.Token, t.ttl).Scan(&t.seq)
	})
	if err != nil {
		return nil, wrap(ctx, "enqueue", p.Key, err)
	}
	t.renewed = sent
	return t, nil
}

// ticket is an entry in a fair queue (driver.Ticket). Its state is used
// by one call at a time (the Locker's); mu guards it against misuse.
type ticket struct {
	s   *Store
	p   driver.AcquireParams
	ttl int64 // the entry's and the grant's lease, µs
	seq int64 // the entry's place in the queue

	mu      sync.Mutex
	renewed time.Time // when the last renewal of the entry was sent
	holder  *driver.HeldError
	granted bool
	fence   uint64
}

// Holder implements driver.Ticket: the mutex's holder when Wait last
// looked, nil when it was free or unknown.
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holder == nil {
		return nil
	}
	h := *t.holder
	return &h
}

// Wait implements driver.Ticket. It looks at the queue and the mutex with
// one read (no write lock), and takes the write lock only to renew the
// entry (at least every third of its TTL) or, when the entry is the head
// of the live queue and the mutex is free, to grant: one transaction that
// renews the entry, checks again that it is the head, takes the mutex
// with Acquire's statement (the next fence) and deletes the entry. It
// polls with jittered backoff, and is woken at once by releases of the
// key made through this Store; waiters in other processes see them at
// their next poll. SQLITE_BUSY is retried for as long as the entry could
// live; after that the entry is taken as gone (driver.ErrNotHeld).
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.granted {
		return driver.Grant{Fence: t.fence}, nil
	}
	wake := make(chan struct{}, 1)
	t.s.wake.add(t.p.Key, wake)
	defer t.s.wake.remove(t.p.Key, wake)
	delay := fairPollMin
	for {
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err
		}
		// EnqueueFair does not acquire: the first look may grant.
		sleep, try := delay, false
		head, live, rest, err := t.poll(ctx)
		switch {
		case err != nil && !isBusy(err):
			return driver.Grant{}, wrap(ctx, "wait", t.p.Key, err)
		case err == nil && !live:
			return driver.Grant{}, fmt.Errorf("sqlitestore: wait %q: %w: the queue entry is gone", t.p.Key, driver.ErrNotHeld)
		case err == nil && head == t.seq && t.holder == nil:
			try = true
		case err == nil && rest > 0:
			sleep = min(sleep, rest+time.Millisecond)
		}
		if try || !time.Now().Before(t.renewed.Add(p3(t.p.TTL))) {
			g, granted, err := t.step(ctx, try)
			switch {
			case granted:
				return g, nil
			case errors.Is(err, driver.ErrNotHeld):
				return driver.Grant{}, err
			case err != nil && !isBusy(err):
				return driver.Grant{}, wrap(ctx, "wait", t.p.Key, err)
			case err != nil && !time.Now().Before(t.renewed.Add(t.p.TTL)):
				// Not renewed within its TTL: the entry has expired.
				return driver.Grant{}, fmt.Errorf("sqlitestore: wait %q: %w: the queue entry could not be renewed in time: %w", t.p.Key, driver.ErrNotHeld, err)
			}
		}
		sleep = min(sleep, max(time.Until(t.renewed.Add(p3(t.p.TTL))), 0))
		timer := time.NewTimer(sleep + rand.N(sleep/4+time.Millisecond))
		select {
		case <-wake:
			delay = fairPollMin
		case <-timer.C:
			delay = min(2*delay, fairPollMax)
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// p3 is a third of d: how often a queue entry is renewed.
func p3(d time.Duration) time.Duration { return d / 3 }

// poll reads the head of the key's live queue, whether the entry is live,
// and the mutex's holder, which it records; it returns the holder's
// remaining lease (0 when the mutex is free).
func (t *ticket) poll(ctx context.Context) (head int64, live bool, rest time.Duration, err error) {
	var (
		h     sql.NullInt64
		owner sql.NullString
		us    sql.NullInt64
	)
	if err := t.s.db.QueryRowContext(stmtCtx(ctx), t.s.kinds.queuePoll, t.p.Key, t.p.Token).Scan(&h, &live, &owner, &us); err != nil {
		return 0, false, 0, err
	}
	t.setHolder(owner, us)
	return h.Int64, live, t.holderTTL(), nil
}

// setHolder records the mutex's holder as read (none when owner is NULL).
func (t *ticket) setHolder(owner sql.NullString, rest sql.NullInt64) {
	if !owner.Valid {
		t.holder = nil
		return
	}
	t.holder = &driver.HeldError{Owner: owner.String, TTL: max(time.Duration(rest.Int64)*time.Microsecond, 0)}
}

func (t *ticket) holderTTL() time.Duration {
	if t.holder == nil {
		return 0
	}
	return t.holder.TTL
}

// step renews the entry in one write transaction and, when try is set and
// the entry is the head of the live queue, takes the mutex with Acquire's
// statement and deletes the entry (granted). driver.ErrNotHeld means the
// entry is gone.
func (t *ticket) step(ctx context.Context, try bool) (driver.Grant, bool, error) {
	k := t.s.kinds
	var (
		g       driver.Grant
		granted bool
		gone    bool
	)
	sent := time.Now()
	err := t.s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var seq int64
		err := tx.QueryRowContext(ctx, k.queueRenew, t.p.Key, t.p.Token, t.ttl).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			gone = true
			return nil
		}
		if err != nil || !try {
			return err
		}
		var head int64
		if err := tx.QueryRowContext(ctx, k.queueHead, t.p.Key).Scan(&head); err != nil || head != seq {
			return err
		}
		err = readRows(tx.StmtContext(ctx, t.s.st.acquire).QueryContext(ctx, acquireArgs(make([]any, 0, 4), t.p)...))(func(rows *sql.Rows) error {
			var err error
			g, err = scanFence(rows)
			granted = true
			return err
		})
		if err != nil {
			return err
		}
		if !granted {
			var (
				owner sql.NullString
				rest  sql.NullInt64
			)
			err := tx.QueryRowContext(ctx, t.s.holderSQL, t.p.Key).Scan(&owner, &rest)
			if errors.Is(err, sql.ErrNoRows) {
				err = nil
			}
			t.setHolder(owner, rest)
			return err
		}
		_, err = tx.ExecContext(ctx, k.queueGrant, t.p.Key, t.p.Token)
		return err
	})
	switch {
	case err != nil:
		return driver.Grant{}, false, err
	case gone:
		return driver.Grant{}, false, driver.ErrNotHeld
	}
	t.renewed = sent
	if granted {
		t.granted, t.fence, t.holder = true, g.Fence, nil
	}
	return g, granted, nil
}

// Leave implements driver.Ticket with one DELETE of the entry, which wakes
// this Store's waiters on the key. When the removal cannot be confirmed it
// is retried in the background until the entry would have expired. After
// a grant, Leave releases the mutex.
func (t *ticket) Leave(ctx context.Context) error {
	t.mu.Lock()
	granted, until := t.granted, t.renewed.Add(t.p.TTL)
	t.mu.Unlock()
	if granted {
		return t.s.Release(ctx, driver.ReleaseParams{Key: t.p.Key, Token: t.p.Token})
	}
	err := t.leave(ctx)
	if err == nil {
		return nil
	}
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), until)
		defer cancel()
		for delay := fairPollMin; ; delay = min(2*delay, fairPollMax) {
			timer := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			if t.leave(ctx) == nil {
				return
			}
		}
	}()
	return err
}

// leave deletes the entry, and wakes the key's other waiters here.
func (t *ticket) leave(ctx context.Context) error {
	err := t.s.write(ctx, func(ctx context.Context) error {
		_, err := t.s.db.ExecContext(ctx, t.s.kinds.queueLeave, t.p.Key, t.p.Token)
		return err
	})
	if err != nil {
		return wrap(ctx, "leave", t.p.Key, err)
	}
	t.s.wake.wake(t.p.Key)
	return nil
}

// wakeups are the fair Tickets waiting in this Store, by key, each with a
// channel that a release of the key through this Store signals. They only
// hasten a waiter: one that misses a wake-up sees the release at its next
// poll, as waiters in other processes do.
type wakeups struct {
	n  atomic.Int64 // channels registered; wake does nothing while 0
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
}

func (w *wakeups) add(key string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]map[chan struct{}]struct{})
	}
	if w.m[key] == nil {
		w.m[key] = make(map[chan struct{}]struct{})
	}
	w.m[key][ch] = struct{}{}
	w.n.Add(1)
}

func (w *wakeups) remove(key string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m[key], ch)
	if len(w.m[key]) == 0 {
		delete(w.m, key)
	}
	w.n.Add(-1)
}

// wake signals every Ticket waiting on key here; it never blocks.
func (w *wakeups) wake(key string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.m[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
