package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// Fair queues (driver.FairQueuer): a waiter's entry in <Table>_queue is a
// lease its Ticket renews with every attempt; an attempt grants the mutex
// only to the live queue's head. See the package documentation.

var _ driver.FairQueuer = (*Store)(nil)

// Polling of a waiting Ticket: it tries again (and so renews its entry) at
// least every TTL/3, and at least every pollListening while the store's
// notifications reach it (pollAlone while they do not).
const (
	pollListening = time.Second
	pollAlone     = 250 * time.Millisecond
)

// listenTimeout bounds the start of the LISTEN that wakes Tickets, and
// listenRetry is how long after a failed start the next Ticket tries.
const (
	listenTimeout = 2 * time.Second
	listenRetry   = time.Second
)

// queueSQL is what a fair grant adds to a grant statement: CTEs before it
// (pre), the condition to try it at all (gate: the token's live entry is
// the queue's head), CTEs after it that serve or keep the entry (post,
// given whether it granted), and reply columns (cols).
type queueSQL struct {
	pre, gate, cols string
	post            func(granted string) string
}

// newQueueSQL builds queueSQL for queue with the key, token and ttl µs as
// $1, $2 and $4, and the channel as parameter channel. pruned deletes the
// expired entries of others, locking them in token order and rechecking
// each on its latest version (an entry its waiter just renewed is not
// dead, and counts); gate is the token's live entry, head when no live
// entry precedes it.
func newQueueSQL(queue, channel string) *queueSQL {
	others := fmt.Sprintf(`SELECT 1 FROM %[1]s o WHERE o.key = $1 AND o.token <> $2 AND o.expires_at > now()
			AND o.token NOT IN (SELECT token FROM pruned)`, queue)
	return &queueSQL{
		pre: fmt.Sprintf(`pruned AS (
	DELETE FROM %[1]s AS d
	USING (
		SELECT x.token FROM %[1]s x
		WHERE x.key = $1 AND x.token <> $2 AND x.expires_at <= now()
		ORDER BY x.token FOR UPDATE
	) AS x
	WHERE d.key = $1 AND d.token = x.token
	RETURNING d.token
), gate AS MATERIALIZED (
	SELECT NOT EXISTS (
		SELECT 1 FROM %[1]s o
		WHERE o.key = $1 AND o.seq < me.seq AND o.token NOT IN (SELECT token FROM pruned)
	) AS head
	FROM %[1]s me WHERE me.key = $1 AND me.token = $2 AND me.expires_at > now()
), `, queue),
		gate: `EXISTS (SELECT 1 FROM gate WHERE gate.head)`,
		post: func(granted string) string {
			return fmt.Sprintf(`served AS (
	DELETE FROM %[1]s q WHERE q.key = $1 AND q.token = $2 AND %[2]s
	RETURNING 1
), kept AS (
	UPDATE %[1]s q SET expires_at = %[3]s
	WHERE q.key = $1 AND q.token = $2 AND q.expires_at > now() AND NOT %[2]s
	RETURNING 1
), `, queue, granted, leaseEnd("$4::bigint"))
		},
		// Whether the entry is still queued, and a NOTIFY when it was
		// served with others behind it: they look again at once, and
		// the next one's attempt marks the key as waited for.
		cols: fmt.Sprintf(`,
	EXISTS (SELECT 1 FROM kept),
	CASE WHEN EXISTS (SELECT 1 FROM served) AND EXISTS (%[1]s) THEN pg_notify(%[2]s, $1) END`, others, channel),
	}
}

// buildFair adds the fair queue's statements.
func buildFair(st *statements, tb tables) {
	// The entry, and the key's holder as the statement sees it, for
	// Holder until the first attempt.
	st.enqueue = fmt.Sprintf(`WITH ins AS (
	INSERT INTO %[1]s (key, token, owner, expires_at) VALUES ($1, $2, $3, %[3]s)
	ON CONFLICT (key, token) DO UPDATE SET expires_at = EXCLUDED.expires_at
	RETURNING 1
)
SELECT (SELECT count(*) FROM ins), l.owner, %[4]s
FROM (SELECT 1) one
LEFT JOIN %[2]s l ON l.key = $1 AND l.token IS NOT NULL AND l.token <> $2 AND l.expires_at > now()`,
		tb.queue, tb.locks, leaseEnd("$4::bigint"), fmt.Sprintf(remainingMicros, "l"))

	// Lease mode: the acquire upsert, given a row only when the entry is
	// the head. The reply is acquire's, from the row the upsert returned,
	// or else the key's live holder: the fence when that is the token (a
	// retried attempt whose answer was lost), else the holder.
	q := newQueueSQL(tb.queue, "$5")
	st.serve = fmt.Sprintf(`WITH %[2]sup AS (
%[3]s
RETURNING l.token, l.fence, l.owner, l.expires_at
), %[4]scur AS (
	SELECT up.token, up.fence, up.owner, up.expires_at FROM up
	UNION ALL
	SELECT l.token, l.fence, l.owner, l.expires_at FROM %[1]s l
	WHERE l.key = $1 AND l.token IS NOT NULL AND l.expires_at > now() AND NOT EXISTS (SELECT 1 FROM up)
)
SELECT %[5]s%[6]s
FROM (SELECT 1) one LEFT JOIN cur ON true`,
		tb.locks, q.pre,
		acquireUpsert(tb.locks, `SELECT $1, $2, $3, 1, now(), `+leaseEnd("$4::bigint")+`, NULL, false FROM gate WHERE gate.head`),
		q.post(`EXISTS (SELECT 1 FROM up WHERE up.token = $2)`),
		acquireReply("cur", "$2"), q.cols)

	// Connection mode: acquireConn, trying the advisory lock only for the
	// head.
	st.serveConn = acquireConnSQL(tb.locks, newQueueSQL(tb.queue, "$7"))

	st.leave = fmt.Sprintf(`WITH gone AS (
	DELETE FROM %[1]s WHERE key = $1 AND token = $2
	RETURNING 1
)
SELECT count(*), CASE WHEN count(*) > 0 THEN pg_notify($3, $1) END FROM gone`, tb.queue)
}

// EnqueueFair implements driver.FairQueuer: one INSERT of the entry, a
// lease of p.TTL by the database's clock. When its outcome is unknown it
// deletes the entry (waiting at most a second; otherwise the entry
// expires by its TTL, and the queue's next attempts drop it).
func (s *Store) EnqueueFair(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if p.Mode != driver.ModeMutex {
		return nil, fmt.Errorf("pgstore: enqueue %q: %w: only a mutex waits in a fair queue, not a %v hold", p.Key, driver.ErrUnsupported, p.Mode)
	}
	t := &ticket{s: s, p: p}
	var owner *string
	var ttl *int64
	if err := s.pool.QueryRow(ctx, s.sql.enqueue, p.Key, p.Token, p.Owner, micros(p.TTL)).Scan(nil, &owner, &ttl); err != nil {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = t.Leave(lctx)
		return nil, s.wrap("enqueue", p.Key, err)
	}
	if owner != nil {
		t.holder = heldError(owner, ttl)
	}
	return t, nil
}

// ticket is one waiter's entry in a fair queue.
type ticket struct {
	s *Store
	p driver.AcquireParams

	mu      sync.Mutex
	holder  *driver.HeldError // as the last attempt saw it
	granted bool
}

// errQueued is an attempt's answer while the entry waits.
var errQueued = errors.New("queued")

// Wait implements driver.Ticket: it makes an attempt (which also renews
// the entry), and until one grants, waits for a release of the key
// announced by the store, or for the next attempt due (TTL/3 after the
// last one was sent, and no later than a second).
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	var w *wakeup
	defer func() {
		if w != nil {
			t.s.wake.remove(w)
		}
	}()
	renewEvery := t.p.TTL / 3
	var timer *time.Timer
	for {
		sent := time.Now()
		g, err := t.attempt(ctx)
		switch {
		case err == nil:
			return g, nil
		case !errors.Is(err, errQueued):
			if ctx.Err() != nil {
				return driver.Grant{}, ctx.Err()
			}
			return driver.Grant{}, err
		case w == nil:
			// Listen, then look again at once: a release announced
			// before the LISTEN began is not missed.
			w = t.s.wake.add(ctx, t.p.Key)
			continue
		}
		poll := pollAlone
		if w.listening {
			poll = pollListening
		}
		d := min(time.Until(sent.Add(renewEvery)), poll)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-w.ch:
		case <-timer.C:
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		}
	}
}

// attempt renews the entry and grants the key when the entry heads the
// live queue and the key is free. It returns errQueued while the entry
// waits, and ErrNotHeld when the entry is gone.
func (t *ticket) attempt(ctx context.Context) (driver.Grant, error) {
	s, p := t.s, t.p
	var queued bool
	var g driver.Grant
	var err error
	if s.conns != nil {
		g, err = s.acquireConn(ctx, p, s.sql.serveConn, append(s.acquireConnArgs(p), s.o.channel), &queued, nil)
	} else {
		g, err = s.serve(ctx, p, &queued)
	}
	var he *driver.HeldError
	switch {
	case err == nil:
		t.mu.Lock()
		t.granted = true
		t.mu.Unlock()
		return g, nil
	case errors.As(err, &he):
		if he.Owner != "" {
			t.mu.Lock()
			t.holder = he
			t.mu.Unlock()
		}
		if queued {
			return driver.Grant{}, errQueued
		}
		return driver.Grant{}, driver.ErrNotHeld
	}
	return driver.Grant{}, err
}

// serve is a lease-mode attempt: one statement.
func (s *Store) serve(ctx context.Context, p driver.AcquireParams, queued *bool) (driver.Grant, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return driver.Grant{}, s.wrap("wait", p.Key, err)
	}
	defer c.Release()
	var r acquireRow
	err = c.Conn().QueryRow(ctx, s.sql.serve, p.Key, p.Token, p.Owner, micros(p.TTL), s.o.channel).
		Scan(append(r.dest(), queued, nil)...)
	if err != nil {
		return driver.Grant{}, s.wrap("wait", p.Key, err)
	}
	return r.result()
}

// Holder implements driver.Ticket: the key's holder as the last attempt
// saw it.
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder
}

// Leave implements driver.Ticket: it deletes the entry and announces it,
// so that the entries behind it look again. After a grant it releases the
// key instead. When it fails the entry ends by its TTL, and the next
// attempt of any waiter behind it deletes it.
func (t *ticket) Leave(ctx context.Context) error {
	t.mu.Lock()
	granted := t.granted
	t.mu.Unlock()
	if granted {
		return t.s.Release(ctx, driver.ReleaseParams{Key: t.p.Key, Token: t.p.Token})
	}
	var n int64
	if err := t.s.pool.QueryRow(ctx, t.s.sql.leave, t.p.Key, t.p.Token, t.s.o.channel).Scan(&n, nil); err != nil {
		return t.s.wrap("leave", t.p.Key, err)
	}
	return nil
}

// wakeups passes the store's release notifications on to the Tickets
// waiting in its fair queues, through one LISTEN (Subscribe) that runs
// while any Ticket waits.
type wakeups struct {
	s *Store

	mu       sync.Mutex
	byKey    map[string]map[*wakeup]struct{}
	n        int
	stop     func()    // ends the LISTEN; nil while none runs
	failedAt time.Time // when the LISTEN last failed to start
}

// wakeup is one waiting Ticket's registration.
type wakeup struct {
	key       string
	ch        chan struct{} // capacity 1: a wake-up is never lost
	listening bool          // the LISTEN was running when it registered
}

// add registers a Ticket waiting on key, starting the LISTEN if none
// runs (bounded by listenTimeout; after a failure the next Ticket tries
// again a second later, and meanwhile Tickets poll).
func (wk *wakeups) add(ctx context.Context, key string) *wakeup {
	w := &wakeup{key: key, ch: make(chan struct{}, 1)}
	wk.mu.Lock()
	defer wk.mu.Unlock()
	if wk.byKey == nil {
		wk.byKey = map[string]map[*wakeup]struct{}{}
	}
	if wk.byKey[key] == nil {
		wk.byKey[key] = map[*wakeup]struct{}{}
	}
	wk.byKey[key][w] = struct{}{}
	wk.n++
	if wk.stop == nil && time.Since(wk.failedAt) >= listenRetry {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenTimeout)
		stop, err := wk.s.Subscribe(lctx, wk.notify)
		cancel()
		if err != nil {
			wk.failedAt = time.Now()
		} else {
			wk.stop = stop
		}
	}
	w.listening = wk.stop != nil
	return w
}

// remove unregisters w, and stops the LISTEN when no Ticket waits.
func (wk *wakeups) remove(w *wakeup) {
	wk.mu.Lock()
	delete(wk.byKey[w.key], w)
	if len(wk.byKey[w.key]) == 0 {
		delete(wk.byKey, w.key)
	}
	wk.n--
	var stop func()
	if wk.n == 0 {
		stop, wk.stop = wk.stop, nil
	}
	wk.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// notify wakes every Ticket waiting on key.
func (wk *wakeups) notify(key string) {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	for w := range wk.byKey[key] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}
