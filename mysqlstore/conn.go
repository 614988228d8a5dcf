package mysqlstore

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/driver"
)

// minHoldFlag marks an insert id that is not a fence: GET_LOCK was granted
// but the row is still under a MinHold lease for (id - minHoldFlag) µs.
const minHoldFlag = 1 << 63

// connParallel bounds the connections one connection-mode call uses at
// once: Renew's pings.
const connParallel = 16

// maxWaitTimeout is the largest wait_timeout MySQL accepts on every
// platform (one year, in seconds).
const maxWaitTimeout = 31536000

// heldConn is the dedicated connection holding one lock in connection mode.
type heldConn struct {
	conn  *sql.Conn
	start string // the connection's server start, an SQL literal (see holdConn)
	key   string
	token string

	// ops bounds every statement on conn besides its caller's ctx (see
	// opContext); abort ends it, so that a statement under way (a ping
	// that the server does not answer) fails at once and its caller
	// closes conn. Release and Close call abort when they cannot wait for
	// conn; drop calls it too.
	ops   context.Context
	abort context.CancelFunc

	mu       sync.Mutex    // guards waitSecs, ttl and deadline; serialises its use
	waitSecs int           // the session's wait_timeout
	ttl      time.Duration // the longest TTL the row records (see connLengthen)
	// deadline is when the lease ends unless renewed: the time the last
	// grant or renewal was sent plus its TTL, on the monotonic clock. The
	// Locker, which counts from before it called the store, has given the
	// lock up by then; the Store then closes the connection (see expire).
	deadline time.Time

	closeOnce sync.Once
}

// drop closes the connection instead of returning it to the pool: the
// session ends, and the server frees every lock it held.
func (hc *heldConn) drop() {
	hc.closeOnce.Do(func() { discard(hc.conn) })
	hc.abort()
}

// opContext returns ctx, also ended by hc.abort. Call its CancelFunc when
// the statement is done.
func (hc *heldConn) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(hc.ops, cancel)
	return ctx, func() { stop(); cancel() }
}

// lockName returns the SQL expression of the GET_LOCK name of the key given
// by the SQL expression keyExpr: "tasklock:" and the first 55 hex digits of
// SHA-256(database NUL table NUL key), 64 characters in all. Hashing keeps
// every name within MySQL's 64-character limit, makes names compare exactly
// whatever the server's rules for lock names, and scopes them to one table
// of one database: GET_LOCK names are global to the server.
func (s *Store) lockName(keyExpr []byte) []byte {
	b := make([]byte, 0, 120+len(keyExpr))
	b = append(b, "CONCAT('tasklock:', LEFT(SHA2(CONCAT_WS(0x00, DATABASE(), '"...)
	b = append(b, s.table...)
	b = append(b, "', "...)
	b = append(b, keyExpr...)
	return append(b, "), 256), 55))"...)
}

// waitSeconds is the session wait_timeout for a lease of ttl: whole seconds,
// rounded up, so that the server ends a silent holder's session (and frees
// its lock) no sooner than ttl after the holder's last command.
func waitSeconds(ttl time.Duration) int {
	n := int(driver.Units(ttl, time.Second))
	return min(max(n, 1), maxWaitTimeout)
}

// maxSpare bounds the connections a Store keeps for its next holds (see
// holdConn); it keeps at most half of db's MaxOpenConns.
const maxSpare = 16

// spareIdle is how long a kept connection may wait for its next hold
// before it is closed (Store.spareIdle, which tests may lengthen): short, so that connections go back to the pool soon
// after a burst, and shorter than every wait_timeout the Store sets (one
// second at least), so that the server never ends a kept session first.
const spareIdle = 500 * time.Millisecond

// spareConn is a connection of db that the Store keeps, holding no lock,
// for its next hold: its session's wait_timeout is already set, and the
// server's start already read on it.
type spareConn struct {
	conn     *sql.Conn
	waitSecs int
	start    string
	idle     time.Time // since when, on the monotonic clock
}

// holdConn returns a connection for a hold of secs seconds' wait_timeout:
// the most recently kept one that has not idled past spareIdle, or a new
// one of db. A new connection is set up in two statements, once: it sets
// the session's wait_timeout and reads the server's start time (see
// connBlocked) as a literal, which holds for the session's whole life, as
// a session never outlives its server. A kept connection whose wait_timeout
// differs takes one statement to set it. The server then never reads its
// status variables in a hold's statements.
func (s *Store) holdConn(ctx context.Context, secs int) (*spareConn, error) {
	var sc *spareConn
	for sc == nil {
		s.mu.Lock()
		if len(s.spare) == 0 {
			s.mu.Unlock()
			break
		}
		c := s.spare[len(s.spare)-1]
		s.spare = s.spare[:len(s.spare)-1]
		s.mu.Unlock()
		// The check database/sql makes of a connection it takes from its
		// pool (go-sql-driver: is the socket still open?), without a round
		// trip: a session ended while kept (a server restart, KILL) is
		// not used.
		if time.Since(c.idle) < s.spareIdle && c.conn.Raw(resetSession) == nil {
			sc = c
		} else {
			discard(c.conn)
		}
	}
	if sc == nil {
		expr, err := s.startSQL(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := s.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		sc = &spareConn{conn: conn}
		var start sql.NullString
		err = conn.QueryRowContext(ctx, "SELECT DATE_FORMAT("+expr+", '%Y-%m-%d %H:%i:%s.%f')").Scan(&start)
		if err == nil && !start.Valid {
			err = errors.New("the server's start time (status variable Uptime) reads as NULL")
		}
		if err != nil {
			discard(conn)
			return nil, err
		}
		sc.start = "CAST('" + start.String + "' AS DATETIME(6))"
	}
	if sc.waitSecs != secs {
		if _, err := sc.conn.ExecContext(ctx, "SET SESSION wait_timeout = "+strconv.Itoa(secs)); err != nil {
			discard(sc.conn)
			return nil, err
		}
		sc.waitSecs = secs
	}
	return sc, nil
}

// resetSession runs a driver connection's session reset, if it has one:
// go-sql-driver's checks that the connection is still open.
func resetSession(dc any) error {
	if r, ok := dc.(sqldriver.SessionResetter); ok {
		return r.ResetSession(context.Background())
	}
	return nil
}

// keepConn keeps sc, which holds no lock, for the next hold, or, when the
// Store keeps enough already or is closed, restores its wait_timeout and
// gives it back to db's pool.
func (s *Store) keepConn(ctx context.Context, sc *spareConn) {
	limit := maxSpare
	if m := s.db.Stats().MaxOpenConnections; m > 0 {
		limit = min(limit, m/2)
	}
	sc.idle = time.Now()
	s.mu.Lock()
	if !s.closed && len(s.spare) < limit {
		s.spare = append(s.spare, sc)
		s.armLocked(sc.idle.Add(s.spareIdle))
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	giveBack(ctx, sc)
}

// giveBack returns sc, which holds no lock, to db's pool with its session's
// wait_timeout restored, so that the caller's other queries never get a
// session the server ends after a lock's TTL; it closes sc when that fails.
func giveBack(ctx context.Context, sc *spareConn) {
	if _, err := sc.conn.ExecContext(ctx, "SET SESSION wait_timeout = DEFAULT"); err != nil {
		discard(sc.conn)
		return
	}
	sc.conn.Close()
}

// connAcquire takes a connection (see holdConn: its wait_timeout is the
// TTL in whole seconds, rounded up, so that the server itself ends the
// session of a holder that falls silent — paused, partitioned, or no
// longer renewing because it lost the lock — and frees the lock) and, in
// one statement, asks for the user-level lock and increments the key's
// durable fence:
//
//	INSERT INTO t (...) SELECT key, token, owner, LAST_INSERT_ID(1), now, now
//	FROM DUAL WHERE GET_LOCK(name, 0) = 1
//	ON DUPLICATE KEY UPDATE fence = IF(expires_at <= now, LAST_INSERT_ID(fence + 1),
//	                                   fence + 0 * LAST_INSERT_ID(2^63 + remaining µs)), ...
//
// The insert id says what happened: 0, another session holds the lock (the
// connection is kept for the next hold and the holder's owner is read); at
// least 2^63, the lock was free but a MinHold lease from a release is
// still running (the connection is closed, which frees the lock);
// otherwise it is the fence. One round trip per grant on a kept
// connection.
func (s *Store) connAcquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	return s.connAcquireIf(ctx, p, nil)
}

// connAcquireIf is connAcquire, asking for the lock only where guard, an
// SQL condition, holds (always when it is nil): a fair waiter's grant asks
// only at the head of the queue (see ticket.grant). Where guard does not
// hold, GET_LOCK is not called, and the answer is a *driver.HeldError.
func (s *Store) connAcquireIf(ctx context.Context, p driver.AcquireParams, guard []byte) (driver.Grant, error) {
	op := fmt.Sprintf("acquire %q", p.Key)
	secs := waitSeconds(p.TTL)
	var sc *spareConn
	var res sql.Result
	var sent time.Time
	var err error
	for try := 0; ; try++ {
		if sc, err = s.holdConn(ctx, secs); err != nil {
			return driver.Grant{}, s.wrap(op, err)
		}
		sent = time.Now()
		res, err = sc.conn.ExecContext(ctx, s.connAcquireSQL(p, sc.start, guard))
		if err == nil || !isBadConn(err) || try > 0 {
			break
		}
		// A kept connection that the server or the network ended while
		// it waited: nothing was sent, so take another.
		discard(sc.conn)
	}
	var id int64
	if err == nil {
		id, err = res.LastInsertId()
	}
	if err != nil {
		// The lock may or may not be ours: closing the session frees it.
		discard(sc.conn)
		return driver.Grant{}, s.wrap(op, err)
	}
	fence := uint64(id)
	switch {
	case fence == 0:
		held := s.connHolder(ctx, sc.conn, p.Key)
		s.keepConn(ctx, sc)
		return driver.Grant{}, held
	case fence >= minHoldFlag:
		discard(sc.conn)
		held := s.connHolder(ctx, nil, p.Key)
		held.TTL = time.Duration(fence-minHoldFlag) * time.Microsecond
		return driver.Grant{}, held
	}
	hc := &heldConn{conn: sc.conn, start: sc.start, key: p.Key, token: p.Token, waitSecs: secs, ttl: p.TTL, deadline: sent.Add(p.TTL)}
	hc.ops, hc.abort = context.WithCancel(context.Background())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		hc.drop()
		return driver.Grant{}, fmt.Errorf("mysqlstore: %s: %w", op, ErrClosed)
	}
	s.held[p.Token] = hc
	s.armLocked(hc.deadline)
	s.mu.Unlock()
	return driver.Grant{Fence: fence}, nil
}

// connAcquireSQL is connAcquire's statement; start is startSQL's
// expression. With a guard, the statement's WHERE is IF(guard,
// GET_LOCK(name, 0), 0) = 1: IF evaluates only the branch it takes, so
// the lock is not asked for unless guard holds. The key's row is taken over when connBlocked (which reads
// token, acquired_at and expires_at) is not positive, or when it already
// carries p's token (a grant whose answer was lost). ON DUPLICATE KEY
// UPDATE assigns left to right, each expression seeing the columns
// assigned before it, so the condition is evaluated in full until token is
// assigned, and from then on "token is p's token" stands for it. A grant
// records acquired_at = now and expires_at = now + TTL: the row's TTL,
// which keeps the key after a server restart (see connBlocked).
func (s *Store) connAcquireSQL(p driver.AcquireParams, start string, guard []byte) string {
	tok := appendHex(nil, p.Token)
	blocked := connBlocked(start)
	free := "(token = " + string(tok) + " OR " + blocked + " <= 0)"
	b := make([]byte, 0, 1600+4*len(p.Key)+6*len(p.Token)+2*len(p.Owner))
	b = s.appendAcquireInsert(b)
	b = append(b, "SELECT "...)
	b = appendAcquireRow(b, p)
	b = appendExpiry(b, p.TTL)
	b = append(b, " FROM DUAL WHERE "...)
	if guard != nil {
		b = append(b, "IF("...)
		b = append(b, guard...)
		b = append(b, ", "...)
	}
	b = append(b, "GET_LOCK("...)
	b = append(b, s.lockName(appendHex(nil, p.Key))...)
	b = append(b, ", 0)"...)
	if guard != nil {
		b = append(b, ", 0)"...)
	}
	b = append(b, " = 1 ON DUPLICATE KEY UPDATE fence = IF("+free+", LAST_INSERT_ID(fence + 1), fence + 0 * LAST_INSERT_ID("...)
	b = strconv.AppendUint(b, minHoldFlag, 10)
	b = append(b, " + "+blocked+")), owner = IF("+free+", "...)
	b = appendText(b, p.Owner)
	b = append(b, ", owner), token = IF("+free+", "...)
	b = append(b, tok...)
	b = append(b, ", token), acquired_at = IF(token = "...)
	b = append(b, tok...)
	b = append(b, ", UTC_TIMESTAMP(6), acquired_at), expires_at = IF(token = "...)
	b = append(b, tok...)
	b = append(b, ", "...)
	b = appendExpiry(b, p.TTL)
	return string(append(b, ", expires_at)"...))
}

// connBlocked is the SQL expression of how long, in µs, a connection-mode
// row keeps its key although no session holds the key's GET_LOCK (positive
// while it does; start is startSQL's expression of the server's start):
//
//   - A released row (token ”): until its expires_at, the MinHold lease
//     the release left.
//   - A row never released whose grant came while this server ran: its
//     session has ended since — its client closed or lost the connection,
//     died, was killed, or was silent past wait_timeout, so its Locker has
//     given the lock up or will find the connection failed at its next
//     renewal — and the key is free at once.
//   - A row never released whose grant came before this server started:
//     the session ended with a restart, and its holder, unaware, goes on
//     until its next renewal fails, at most one TTL after its last renewal,
//     which the old server answered. The key stays unavailable until the
//     row's TTL (expires_at - acquired_at) has passed since the server
//     started.
//
// start is computed from the server's Uptime, in whole seconds, and is up
// to two seconds later than the real start, never earlier (see
// startMariaDB): the third case may last two seconds longer, and a row
// granted in the first two seconds after a restart counts as granted
// before it (its key then stays unavailable for its TTL after the start if
// its session ends).
func connBlocked(start string) string {
	return "IF(token = '', TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), " +
		"IF(acquired_at >= " + start + ", 0, " +
		"TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), " + start + ") + TIMESTAMPDIFF(MICROSECOND, acquired_at, expires_at)))"
}

// Expressions of the server's start time on MariaDB and on MySQL 8, which
// keeps status variables in performance_schema: now minus Uptime, plus a
// second. Uptime is the difference of two times in whole seconds (the
// statement's and the server's start), so now - Uptime is within a second
// of the start either way; adding a second makes the value never earlier
// than the real start, and at most two seconds later.
const (
	startMariaDB = "(SELECT UTC_TIMESTAMP(6) - INTERVAL (VARIABLE_VALUE - 1) SECOND FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME')"
	startMySQL   = "(SELECT UTC_TIMESTAMP(6) - INTERVAL (VARIABLE_VALUE - 1) SECOND FROM performance_schema.global_status WHERE VARIABLE_NAME = 'Uptime')"
)

// startSQL returns the SQL expression of the server's start time that
// connection mode's statements use (see connBlocked), checking on first
// use, with one query (after the one of returning), that the server
// answers it. A failed check is retried by the next call.
func (s *Store) startSQL(ctx context.Context) (string, error) {
	if p := s.start.Load(); p != nil {
		return *p, nil
	}
	mariadb, err := s.returning(ctx)
	if err != nil {
		return "", err
	}
	q, where := startMySQL, "performance_schema.global_status"
	if mariadb {
		q, where = startMariaDB, "information_schema.GLOBAL_STATUS"
	}
	var ok sql.NullBool
	if err := s.db.QueryRowContext(ctx, "SELECT "+q+" IS NOT NULL").Scan(&ok); err != nil {
		return "", fmt.Errorf("read the server's start time (status variable Uptime in %s), which connection mode needs to keep keys through a restart: %w", where, err)
	}
	if !ok.Valid || !ok.Bool {
		return "", fmt.Errorf("the server's status variable Uptime is not readable in %s: connection mode needs it to keep keys through a restart", where)
	}
	s.start.Store(&q)
	return q, nil
}

// connHolder reads the owner recorded for key, on conn when it is not nil.
// The remaining TTL of a connection-held lock is unknown (0). A failed read
// returns a HeldError without details.
func (s *Store) connHolder(ctx context.Context, conn *sql.Conn, key string) *driver.HeldError {
	b := make([]byte, 0, 100+2*len(key))
	b = append(b, "SELECT owner FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, key)
	var row *sql.Row
	if conn != nil {
		row = conn.QueryRowContext(ctx, string(b))
	} else {
		row = s.db.QueryRowContext(ctx, string(b))
	}
	var owner string
	if err := row.Scan(&owner); err != nil {
		return &driver.HeldError{}
	}
	return &driver.HeldError{Owner: owner}
}

// connRenew checks that the connection of every lease is alive: a COM_PING
// per connection, or SET SESSION wait_timeout when the lease's TTL asks for
// a different one (Extend), each one round trip on its own connection, up
// to 16 at a time. A connection that fails is closed and its lease reported
// as driver.ErrNotHeld: its session is gone or, when the call timed out, the
// driver has just closed it, and with it goes the lock.
func (s *Store) connRenew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	out := make([]error, len(ps))
	hcs := make([]*heldConn, len(ps))
	s.mu.Lock()
	for i, p := range ps {
		hc := s.held[p.Token]
		if hc == nil || hc.key != p.Key {
			out[i] = driver.ErrNotHeld
			continue
		}
		hcs[i] = hc
	}
	s.mu.Unlock()

	if len(ps) == 1 {
		if hcs[0] != nil {
			out[0] = s.keepAlive(ctx, hcs[0], ps[0].TTL)
		}
		return out, nil
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, connParallel)
	for i, hc := range hcs {
		if hc == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = s.keepAlive(ctx, hc, ps[i].TTL)
		}()
	}
	wg.Wait()
	return out, nil
}

// keepAlive pings hc's connection, or sets its wait_timeout for ttl. When
// ctx has ended before anything was sent, it returns ctx's error, which the
// Locker takes as transient. A Release that gives up on the connection
// while the ping is under way (see connRelease) makes it fail at once.
func (s *Store) keepAlive(ctx context.Context, hc *heldConn, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mysqlstore: renew %q: %w", hc.key, err)
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	ctx, cancel := hc.opContext(ctx)
	defer cancel()
	sent := time.Now()
	if !sent.Before(hc.deadline) {
		// Expired here before expire got to it: the Locker has given it up.
		s.forget(hc)
		hc.drop()
		return fmt.Errorf("%w: the lease of %q ended before it was renewed", driver.ErrNotHeld, hc.key)
	}
	secs := waitSeconds(ttl)
	var err error
	switch {
	case micros(ttl) > micros(hc.ttl):
		// Extend: the row's TTL keeps the key through a server restart
		// for as long as this holder may go on (see connBlocked).
		err = s.connLengthen(ctx, hc, ttl)
		if err == nil && secs != hc.waitSecs {
			_, err = hc.conn.ExecContext(ctx, "SET SESSION wait_timeout = "+strconv.Itoa(secs))
		}
	case secs != hc.waitSecs:
		_, err = hc.conn.ExecContext(ctx, "SET SESSION wait_timeout = "+strconv.Itoa(secs))
	default:
		err = hc.conn.PingContext(ctx)
	}
	if err != nil {
		s.forget(hc)
		hc.drop()
		return fmt.Errorf("%w: the connection holding %q failed: %v", driver.ErrNotHeld, hc.key, err)
	}
	hc.waitSecs, hc.deadline = secs, sent.Add(ttl)
	hc.ttl = max(hc.ttl, ttl)
	return nil
}

// connLengthen records ttl, longer than the TTL hc's row records, as the
// row's TTL (expires_at = acquired_at + ttl), on hc's connection, while
// this session holds the key's lock. One round trip; a row left unchanged
// means the session has lost the lock.
func (s *Store) connLengthen(ctx context.Context, hc *heldConn, ttl time.Duration) error {
	name := s.lockName(appendHex(nil, hc.key))
	b := make([]byte, 0, 300+len(name)+2*len(hc.key)+2*len(hc.token))
	b = append(b, "UPDATE "...)
	b = append(b, s.qt...)
	b = append(b, " SET expires_at = acquired_at + INTERVAL "...)
	b = strconv.AppendInt(b, micros(ttl), 10)
	b = append(b, " MICROSECOND WHERE lock_key = "...)
	b = appendHex(b, hc.key)
	b = append(b, " AND token = "...)
	b = appendHex(b, hc.token)
	b = append(b, " AND IS_USED_LOCK("...)
	b = append(b, name...)
	b = append(b, ") = CONNECTION_ID()"...)
	n, err := rowsAffected(hc.conn.ExecContext(ctx, string(b)))
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("its row is no longer this lease's")
	}
	return nil
}

// connRelease releases the lock on its own connection in one statement that
// checks the token and that this session holds the lock, shortens the row
// for MinHold, and calls RELEASE_LOCK, so the lock is free when Release
// returns:
//
//	UPDATE t SET token = '', expires_at = now [+ keep],
//	       fence = fence + 0 * COALESCE(RELEASE_LOCK(name), 0)
//	WHERE lock_key = key AND token = ours AND IS_USED_LOCK(name) = CONNECTION_ID()
//
// The connection is then kept for the next hold (see keepConn): one round
// trip. A connection that fails is closed instead, which frees the lock
// too. When ctx ends while another call uses the connection (a renewal's
// ping that the server does not answer), it aborts that call, which fails
// at once, closes the connection and returns ctx's error: it never waits
// for the other call's own deadline. The server frees the lock of a
// closed connection as soon as it runs again.
func (s *Store) connRelease(ctx context.Context, p driver.ReleaseParams) error {
	s.mu.Lock()
	hc := s.held[p.Token]
	if hc == nil || hc.key != p.Key {
		s.mu.Unlock()
		return driver.ErrNotHeld
	}
	delete(s.held, p.Token)
	s.mu.Unlock()

	stop := context.AfterFunc(ctx, hc.abort)
	hc.mu.Lock()
	defer hc.mu.Unlock()
	stop()
	if err := ctx.Err(); err != nil {
		hc.drop()
		return s.wrap(fmt.Sprintf("release %q (its connection was closed, which frees the lock)", p.Key), err)
	}
	name := s.lockName(appendHex(nil, p.Key))
	b := make([]byte, 0, 500+2*len(name)+2*len(p.Key)+2*len(p.Token))
	b = s.appendReleaseUpdate(b, []string{p.Key}, []time.Duration{p.KeepFor})
	b = append(b, ", fence = fence + 0 * COALESCE(RELEASE_LOCK("...)
	b = append(b, name...)
	b = append(b, "), 0) WHERE lock_key = "...)
	b = appendHex(b, p.Key)
	b = append(b, " AND token = "...)
	b = appendHex(b, p.Token)
	b = append(b, " AND IS_USED_LOCK("...)
	b = append(b, name...)
	b = append(b, ") = CONNECTION_ID()"...)
	res, err := hc.conn.ExecContext(ctx, string(b))
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		// Closing the connection frees the lock whatever happened; what
		// is unknown is whether it was still ours.
		hc.drop()
		if ctx.Err() == nil && isConnErr(err) {
			return fmt.Errorf("%w: the connection holding %q failed: %v", driver.ErrNotHeld, p.Key, err)
		}
		return s.wrap(fmt.Sprintf("release %q (its connection was closed, which frees the lock)", p.Key), err)
	case n == 0:
		hc.drop()
		return driver.ErrNotHeld
	}
	// Released: the statement above freed the lock. The connection is
	// kept for the next hold, its wait_timeout as it is.
	hc.closeOnce.Do(func() {
		s.keepConn(ctx, &spareConn{conn: hc.conn, waitSecs: hc.waitSecs, start: hc.start})
	})
	return nil
}

// connForceRelease kills the session holding key's lock, if any, and ends a
// MinHold lease left by a release. It takes up to three round trips.
func (s *Store) connForceRelease(ctx context.Context, key string) error {
	op := fmt.Sprintf("force release %q", key)
	b := append([]byte("SELECT IS_USED_LOCK("), s.lockName(appendHex(nil, key))...)
	b = append(b, ')')
	var id sql.NullInt64
	if err := s.db.QueryRowContext(ctx, string(b)).Scan(&id); err != nil {
		return s.wrap(op, err)
	}
	killed := false
	if id.Valid {
		_, err := s.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id.Int64, 10))
		var me *mysql.MySQLError
		switch {
		case err == nil:
			killed = true
		case errors.As(err, &me) && me.Number == erNoSuchThread:
			// It ended meanwhile.
		default:
			return s.wrap(op, err)
		}
	}
	start, err := s.startSQL(ctx)
	if err != nil {
		return s.wrap(op, err)
	}
	// End a MinHold lease, or the unavailability a restart left (see
	// connBlocked).
	b = append(b[:0], "UPDATE "...)
	b = append(b, s.qt...)
	b = append(b, " SET token = '', expires_at = UTC_TIMESTAMP(6) WHERE lock_key = "...)
	b = appendHex(b, key)
	b = append(b, " AND "+connBlocked(start)+" > 0"...)
	n, err := s.execRows(ctx, string(b))
	if err != nil {
		return s.wrap(op, err)
	}
	if !killed && n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// connLeases lists the keys whose lock some session holds (TTL 0: it lasts
// as long as the session), the MinHold leases left by releases, and the
// keys a server restart keeps unavailable (see connBlocked).
func (s *Store) connLeases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	start, err := s.startSQL(ctx)
	if err != nil {
		return nil, s.wrap("list leases", err)
	}
	b := make([]byte, 0, 1000+4*len(prefix))
	b = append(b, "SELECT lock_key, owner, fence, "+connBlocked(start)+", IS_USED_LOCK("...)
	b = append(b, s.lockName([]byte("lock_key"))...)
	b = append(b, ") IS NOT NULL, 0, 0, 0 FROM "...)
	b = append(b, s.qt...)
	b = append(b, " WHERE TRUE"...)
	b = appendPrefixFilter(b, prefix)
	b = append(b, " ORDER BY lock_key"...)
	return s.queryLeases(ctx, string(b))
}

// forget removes hc from the held map if it is still there.
func (s *Store) forget(hc *heldConn) {
	s.mu.Lock()
	if s.held[hc.token] == hc {
		delete(s.held, hc.token)
	}
	s.mu.Unlock()
}

// armLocked makes sure expire runs no later than at. Callers hold s.mu.
func (s *Store) armLocked(at time.Time) {
	if s.timer != nil && !s.timerAt.IsZero() && !at.Before(s.timerAt) {
		return
	}
	s.timerAt = at
	d := time.Until(at)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
	} else {
		s.timer.Reset(d)
	}
}

// expire closes the connections of leases past their deadline: leases the
// Locker has given up without releasing them (lost, MaxHold reached,
// NoRenew run out). Closing frees their locks at once, instead of after the
// server's wait_timeout, and returns the connections. It runs on one timer
// per Store, re-armed for the earliest deadline; a connection in use by a
// renewal or release is left to that call.
func (s *Store) expire() {
	now := time.Now()
	var stale []*heldConn
	s.mu.Lock()
	s.timerAt = time.Time{}
	var next time.Time
	for tok, hc := range s.held {
		if !hc.mu.TryLock() {
			if next.IsZero() || now.Add(50*time.Millisecond).Before(next) {
				next = now.Add(50 * time.Millisecond)
			}
			continue
		}
		if !now.Before(hc.deadline) {
			delete(s.held, tok)
			stale = append(stale, hc)
		} else if next.IsZero() || hc.deadline.Before(next) {
			next = hc.deadline
		}
		hc.mu.Unlock()
	}
	// Kept connections idle past spareIdle go back to the pool: the oldest
	// are first.
	n := 0
	for n < len(s.spare) && now.Sub(s.spare[n].idle) >= s.spareIdle {
		n++
	}
	idle := append([]*spareConn(nil), s.spare[:n]...)
	s.spare = append(s.spare[:0], s.spare[n:]...)
	if len(s.spare) > 0 {
		if at := s.spare[0].idle.Add(s.spareIdle); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if !next.IsZero() && !s.closed {
		s.armLocked(next)
	}
	s.mu.Unlock()
	for _, hc := range stale {
		hc.drop()
	}
	// They go back to the pool, where a sparse user (a lock a minute)
	// finds a connection already open, as before they were kept.
	for _, sc := range idle {
		ctx, cancel := context.WithTimeout(context.Background(), spareGiveBack)
		giveBack(ctx, sc)
		cancel()
	}
}

// spareGiveBack bounds the statement that restores a kept connection's
// wait_timeout before it goes back to the pool.
const spareGiveBack = 5 * time.Second

// Close ends the locks this Store still holds in connection mode by closing
// their connections, which frees them at the server, and makes later
// Acquire calls fail with ErrClosed. Close the Lockers that use the Store
// first (they release their locks properly), then the Store, then db. In
// lease mode Close does nothing: leases live in rows and expire by
// themselves. It never closes db.
func (s *Store) Close() error {
	if s.mode != ModeConnection {
		return nil
	}
	s.mu.Lock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	held := s.held
	s.held = make(map[string]*heldConn)
	spare := s.spare
	s.spare = nil
	s.mu.Unlock()
	for _, sc := range spare {
		discard(sc.conn)
	}
	for _, hc := range held {
		hc.abort() // a renewal under way fails at once
		hc.mu.Lock()
		hc.drop()
		hc.mu.Unlock()
	}
	return nil
}

// discard closes c instead of returning it to the pool: the session ends,
// and the server frees every lock it held. Raw's function returning
// driver.ErrBadConn is how database/sql is told not to reuse a connection.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = c.Close()
}

// isBadConn reports whether err is database/sql's driver.ErrBadConn.
func isBadConn(err error) bool { return errors.Is(err, sqldriver.ErrBadConn) }
