package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tasklock/tasklock/driver"
)

// Reconnect backoff of a broken subscription.
const (
	listenRetryMin = 50 * time.Millisecond
	listenRetryMax = 2 * time.Second
)

// Subscribe implements driver.Notifier with LISTEN on one connection taken
// out of the pool for the subscription's lifetime. It returns once the
// LISTEN is active. One goroutine waits for notifications and passes each
// payload (the released key) to onRelease; when the connection breaks (a
// server restart) it reconnects with backoff, and releases announced
// meanwhile are missed, which waiters cover by polling. stop cancels the
// wait, closes the connection and returns once the goroutine has exited.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	conn, err := s.listen(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: subscribe %s: %w", s.o.channel, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go s.listenLoop(lctx, conn, onRelease, done)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

// listen takes a connection out of the pool and LISTENs on it.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	c := pc.Hijack()
	if _, err := c.Exec(ctx, "LISTEN "+s.channel); err != nil {
		closeConn(c)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, err
	}
	tuneTCP(c)
	return c, nil
}

func (s *Store) listenLoop(ctx context.Context, conn *pgx.Conn, onRelease func(string), done chan<- struct{}) {
	defer close(done)
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			if n != nil {
				onRelease(n.Payload)
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		closeConn(conn)
		conn = nil
		if conn = s.relisten(ctx); conn == nil {
			return // stopped
		}
	}
}

// relisten reconnects with backoff until it succeeds or ctx ends (nil).
func (s *Store) relisten(ctx context.Context) *pgx.Conn {
	wait := listenRetryMin
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c, err := s.listen(ctx)
		if err == nil {
			return c
		}
		wait = min(wait*2, listenRetryMax)
		t.Reset(wait)
	}
}

// closeConn closes a connection taken out of the pool.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.Close(ctx)
}

// Leases implements driver.Lister: the keys starting with prefix whose lease
// has not expired by the database's clock, sorted by key (byte order). In
// connection mode a row counts only while its holder's session still holds
// the key's advisory lock, so a crashed holder is not listed. A read-write
// lock or semaphore is listed as one Lease per live hold (and writer's
// claim, Waiting), after the mutex of the same name.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	rows, err := s.pool.Query(ctx, s.sql.leases, prefix, s.o.seed)
	if err != nil {
		return nil, s.wrap("list leases", "", err)
	}
	var out []driver.Lease
	var l driver.Lease
	var fence, ttl int64
	var mode int16
	var permits int32
	_, err = pgx.ForEachRow(rows, []any{&l.Key, &l.Owner, &fence, &ttl, &mode, &permits, &l.Waiting}, func() error {
		l.Fence = uint64(fence)
		l.TTL = max(time.Duration(ttl)*time.Microsecond, 0)
		l.Mode, l.Limit = driver.Mode(mode), int(permits)
		out = append(out, l)
		return nil
	})
	if err != nil {
		return nil, s.wrap("list leases", "", err)
	}
	return out, nil
}

// ForceRelease implements driver.ForceReleaser: it ends key's mutex lease
// whoever holds it and deletes every hold and claim of the read-write lock
// or semaphore of that name (the fence counters stay), and announces the
// release, in one round trip. In connection mode it also terminates the
// mutex holder's session (pg_terminate_backend), which needs the same
// database role as the holder, or membership in pg_signal_backend. The
// holders learn of it at their next renewal. It returns ErrNotHeld when
// neither is held.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	var n, terminated int64
	err := s.underKeyLock(ctx, key, s.sql.forceRelease, []any{key, s.o.channel, s.o.seed}, &n, nil, &terminated)
	if err != nil {
		return s.wrap("force release", key, err)
	}
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}
