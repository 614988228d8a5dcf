package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.FairQueuer = (*Store)(nil)

// Polling of a fair waiter (see ticket.Wait): from fairPollMin doubling to
// fairPollMax, plus up to an eighth at random, so that the waiters of one
// key do not ask in step.
const (
	fairPollMin = 5 * time.Millisecond
	fairPollMax = 250 * time.Millisecond
)

// EnqueueFair implements driver.FairQueuer: it adds an entry for p.Token
// at the back of p.Key's queue, a row of the queue table whose lease of
// p.TTL the Ticket's Wait renews while it waits, in one INSERT. A waiter
// that dies, or stops waiting without Leave, leaves the queue when that
// lease ends. Only mutexes wait in a fair queue. In connection mode the
// queue is the same; the head's grant is a GET_LOCK, as Acquire's.
func (s *Store) EnqueueFair(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if err := checkAcquire(p); err != nil {
		return nil, err
	}
	if p.Mode != driver.ModeMutex {
		return nil, fmt.Errorf("%w: mysqlstore: enqueue %q: only a mutex waits in a fair queue, not a %v hold", driver.ErrUnsupported, p.Key, p.Mode)
	}
	b := make([]byte, 0, 200+2*len(p.Key)+2*len(p.Token)+2*len(p.Owner))
	b = append(b, "INSERT INTO "...)
	b = append(b, s.qQueue...)
	b = append(b, " (lock_key, token, owner, expires_at) VALUES ("...)
	b = appendHex(b, p.Key)
	b = append(b, ", "...)
	b = appendHex(b, p.Token)
	b = append(b, ", "...)
	b = appendText(b, p.Owner)
	b = append(b, ", "...)
	b = appendExpiry(b, p.TTL)
	b = append(b, ')')
	sent := time.Now()
	res, err := s.db.ExecContext(ctx, string(b))
	var seq int64
	if err == nil {
		seq, err = res.LastInsertId()
	}
	if err != nil {
		// The entry may have been made: take it out, or it ends with its
		// lease.
		b = append(b[:0], "DELETE FROM "...)
		b = append(b, s.qQueue...)
		b = append(b, " WHERE "...)
		b = appendPairFilter(b, "", []leasePair{{p.Key, p.Token}})
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, _ = s.db.ExecContext(cctx, string(b))
		cancel()
		return nil, s.wrap(fmt.Sprintf("enqueue %q", p.Key), err)
	}
	return &ticket{s: s, p: p, seq: uint64(seq), renewed: sent}, nil
}

// ticket is one entry of a key's fair queue.
type ticket struct {
	s   *Store
	p   driver.AcquireParams
	seq uint64 // the entry's row

	// renewed is when the entry's lease was last set (its INSERT or
	// renewal sent), on the monotonic clock. Wait renews it every TTL/3.
	renewed time.Time

	mu      sync.Mutex
	holder  *driver.HeldError // as the last look saw it
	granted bool
}

// Wait implements driver.Ticket. Each round renews the entry when a third
// of its TTL has passed since it was last set (one UPDATE, which also
// tells that the entry is gone: driver.ErrNotHeld), and either tries the
// grant or looks at the queue:
//
//   - The grant is Acquire's statement asking only while the entry is the
//     head of the key's live queue (the live entry with the lowest seq),
//     so the key is taken exactly as Acquire takes it, with the next
//     fence, and only by the head (see grant). The first round tries it at
//     once; an entry granted is then deleted, with the key's expired
//     entries (one DELETE).
//   - The look is one SELECT of the entry's remaining lease, the head's
//     seq, and the key's holder and remaining lease. The next round tries
//     the grant when the entry is the head and the key free; otherwise
//     Wait sleeps 5 ms doubling to 250 ms (jittered), no longer than the
//     holder's lease has to run when the entry is the head (when the store
//     knows it), nor past the entry's next renewal.
//
// mysqlstore has no notifications: the head finds the key free within
// one sleep of its release. When ctx ends before Wait has seen the key's
// holder, it looks once more, for at most half a second, so that Holder
// can name it.
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	g, err := t.wait(ctx)
	if err != nil && ctx.Err() != nil && t.Holder() == nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
		if st, err := t.look(cctx); err == nil {
			t.setHolder(st.holder)
		}
		cancel()
	}
	return g, err
}

// wait is Wait but for its last look.
func (t *ticket) wait(ctx context.Context) (driver.Grant, error) {
	op := fmt.Sprintf("wait in the queue of %q", t.p.Key)
	try, tried := true, false
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		if time.Since(t.renewed) >= t.p.TTL/3 {
			if err := t.renew(ctx); err != nil {
				return driver.Grant{}, err
			}
		}
		if try {
			fence, err := t.grant(ctx)
			if err != nil {
				return driver.Grant{}, err
			}
			if fence != 0 {
				t.dequeue(ctx)
				return driver.Grant{Fence: fence}, nil
			}
		}
		st, err := t.look(ctx)
		if err != nil {
			return driver.Grant{}, t.s.wrap(op, err)
		}
		if st.left <= 0 {
			return driver.Grant{}, fmt.Errorf("%w: mysqlstore: the queue entry for %q is gone", driver.ErrNotHeld, t.p.Key)
		}
		t.setHolder(st.holder)
		head := st.head == t.seq
		try, tried = head && st.holder == nil, try
		if try && !tried {
			continue
		}
		d := min(fairPollMin<<min(attempt-1, 10), fairPollMax)
		if head && st.holder != nil && st.holder.TTL > 0 && st.holder.TTL+time.Millisecond < d {
			d = st.holder.TTL + time.Millisecond
		}
		d += rand.N(d/8 + time.Millisecond)
		d = max(min(d, time.Until(t.renewed.Add(t.p.TTL/3))), 0)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		}
	}
}

// setHolder records the holder a look saw.
func (t *ticket) setHolder(h *driver.HeldError) {
	t.mu.Lock()
	t.holder = h
	t.mu.Unlock()
}

// renew extends the entry's lease by its TTL from now, in one UPDATE of
// its row while that lease runs. No row changed: driver.ErrNotHeld.
func (t *ticket) renew(ctx context.Context) error {
	b := make([]byte, 0, 200+2*len(t.p.Token))
	b = append(b, "UPDATE "...)
	b = append(b, t.s.qQueue...)
	b = append(b, " SET expires_at = "...)
	b = appendExpiry(b, t.p.TTL)
	b = t.appendSelf(b)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	sent := time.Now()
	n, err := t.s.execRows(ctx, string(b))
	if err != nil {
		return t.s.wrap(fmt.Sprintf("renew the queue entry for %q", t.p.Key), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: mysqlstore: the queue entry for %q is gone", driver.ErrNotHeld, t.p.Key)
	}
	t.renewed = sent
	return nil
}

// appendSelf appends " WHERE seq = <the entry's> AND token = <its token>".
func (t *ticket) appendSelf(b []byte) []byte {
	b = append(b, " WHERE seq = "...)
	b = strconv.AppendUint(b, t.seq, 10)
	b = append(b, " AND token = "...)
	return appendHex(b, t.p.Token)
}

// appendHeadSQL appends the SQL expression of the seq of the head of the
// key's live queue (NULL when the queue is empty).
func (t *ticket) appendHeadSQL(b []byte) []byte {
	b = append(b, "(SELECT q.seq FROM "...)
	b = append(b, t.s.qQueue...)
	b = append(b, " q WHERE q.lock_key = "...)
	b = appendHex(b, t.p.Key)
	return append(b, " AND q.expires_at > UTC_TIMESTAMP(6) ORDER BY q.seq LIMIT 1)"...)
}

// grant takes the key for the entry's token as Acquire would, in one
// statement, if the entry is the head of the key's live queue, and returns
// the grant's fence; 0 when the entry is not the head or the key is held.
// In lease mode:
//
//	INSERT INTO t (...) SELECT key, token, owner, LAST_INSERT_ID(1), now, now + ttl
//	FROM DUAL WHERE (SELECT seq FROM queue WHERE lock_key = key AND expires_at > now
//	                 ORDER BY seq LIMIT 1) = <the entry's seq>
//	ON DUPLICATE KEY UPDATE  -- as Acquire's (see leaseAcquire)
//
// The WHERE makes no row when the entry is not the head, and then no
// LAST_INSERT_ID(expr) runs: the insert id is 0. In connection mode it is
// connection mode's Acquire with the head as its guard (see
// connAcquireIf): GET_LOCK is asked for only by the head.
func (t *ticket) grant(ctx context.Context) (uint64, error) {
	p := t.p
	head := t.appendHeadSQL(nil)
	head = append(head, " = "...)
	head = strconv.AppendUint(head, t.seq, 10)
	var fence uint64
	if t.s.mode == ModeConnection {
		g, err := t.s.connAcquireIf(ctx, p, head)
		var he *driver.HeldError
		switch {
		case errors.As(err, &he):
			return 0, nil
		case err != nil:
			return 0, err
		}
		fence = g.Fence
	} else {
		tok := appendHex(nil, p.Token)
		b := make([]byte, 0, 1200+4*len(p.Key)+6*len(p.Token)+4*len(p.Owner))
		b = t.s.appendAcquireInsert(b)
		b = append(b, "SELECT "...)
		b = appendAcquireRow(b, p)
		b = appendExpiry(b, p.TTL)
		b = append(b, " FROM DUAL WHERE "...)
		b = append(b, head...)
		b = append(b, " ON DUPLICATE KEY UPDATE fence = IF("+acquireExpired+", LAST_INSERT_ID(fence + 1), IF(token = "...)
		b = append(b, tok...)
		b = append(b, ", LAST_INSERT_ID(fence), fence + 0 * LAST_INSERT_ID(0)))"...)
		b = appendAcquireTakeover(b, tok, appendText(nil, p.Owner), appendExpiry(nil, p.TTL))
		res, err := t.s.db.ExecContext(ctx, string(b))
		var id int64
		if err == nil {
			id, err = res.LastInsertId()
		}
		if err != nil {
			return 0, t.s.wrap(fmt.Sprintf("acquire %q at the head of its queue", p.Key), err)
		}
		fence = uint64(id)
	}
	if fence != 0 {
		t.mu.Lock()
		t.granted = true
		t.mu.Unlock()
	}
	return fence, nil
}

// dequeue deletes the granted entry, and the key's expired entries, whose
// waiters are gone or will find their entries gone. It waits at most a
// second, whatever ctx says: an entry it cannot delete ends with its
// lease, within its TTL.
func (t *ticket) dequeue(ctx context.Context) {
	b := make([]byte, 0, 200+2*len(t.p.Key))
	b = append(b, "DELETE FROM "...)
	b = append(b, t.s.qQueue...)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, t.p.Key)
	b = append(b, " AND (seq = "...)
	b = strconv.AppendUint(b, t.seq, 10)
	b = append(b, " OR expires_at <= UTC_TIMESTAMP(6))"...)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = t.s.db.ExecContext(cctx, string(b))
}

// queueState is what Wait's look at the queue saw.
type queueState struct {
	left   int64             // µs left of the entry's lease; <= 0: gone
	head   uint64            // the seq of the head of the live queue; 0: none
	holder *driver.HeldError // the key's live holder; nil: the key is free
}

// look reads the entry's remaining lease, the head of the key's live
// queue and the key's holder, in one SELECT. In connection mode the key is
// held while its GET_LOCK is in use (its remaining lease unknown: 0) or
// its row keeps it (see connBlocked).
func (t *ticket) look(ctx context.Context) (queueState, error) {
	var start string
	if t.s.mode == ModeConnection {
		var err error
		if start, err = t.s.startSQL(ctx); err != nil {
			return queueState{}, err
		}
	}
	b := make([]byte, 0, 2000+6*len(t.p.Key)+2*len(t.p.Token))
	b = append(b, "SELECT (SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM "...)
	b = append(b, t.s.qQueue...)
	b = t.appendSelf(b)
	b = append(b, "), "...)
	b = t.appendHeadSQL(b)
	// The holder's owner where the key is held, and its remaining lease.
	held, left := " AND expires_at > UTC_TIMESTAMP(6)", "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)"
	if t.s.mode == ModeConnection {
		blocked := connBlocked(start)
		held = " AND (IS_USED_LOCK(" + string(t.s.lockName([]byte("lock_key"))) + ") IS NOT NULL OR " + blocked + " > 0)"
		left = "GREATEST(" + blocked + ", 0)"
	}
	for _, col := range []string{"owner", left} {
		b = append(b, ", (SELECT "...)
		b = append(b, col...)
		b = append(b, " FROM "...)
		b = append(b, t.s.qt...)
		b = append(b, " WHERE lock_key = "...)
		b = appendHex(b, t.p.Key)
		b = append(b, held...)
		b = append(b, ')')
	}
	var (
		mine, head, us sql.NullInt64
		owner          sql.NullString
	)
	if err := t.s.db.QueryRowContext(ctx, string(b)).Scan(&mine, &head, &owner, &us); err != nil {
		return queueState{}, err
	}
	st := queueState{left: mine.Int64, head: uint64(head.Int64)}
	if owner.Valid {
		st.holder = &driver.HeldError{Owner: owner.String, TTL: fromMicros(us.Int64)}
	}
	return st, nil
}

// Holder implements driver.Ticket: the key's holder as Wait saw it last.
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder
}

// Leave implements driver.Ticket: it deletes the entry in one statement.
// When that fails, the entry ends with its lease, within its TTL of its
// last renewal, and the waiters behind it move up then. After a granted
// Wait it releases the key.
func (t *ticket) Leave(ctx context.Context) error {
	t.mu.Lock()
	granted := t.granted
	t.mu.Unlock()
	if granted {
		return t.s.Release(ctx, driver.ReleaseParams{Key: t.p.Key, Token: t.p.Token})
	}
	b := make([]byte, 0, 200+2*len(t.p.Token))
	b = append(b, "DELETE FROM "...)
	b = append(b, t.s.qQueue...)
	b = t.appendSelf(b)
	if _, err := t.s.db.ExecContext(ctx, string(b)); err != nil {
		return t.s.wrap(fmt.Sprintf("leave the queue of %q", t.p.Key), err)
	}
	return nil
}
