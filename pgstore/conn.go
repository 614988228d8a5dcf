package pgstore

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tasklock/tasklock/driver"
)

// Connection mode: every held lock owns one connection, taken out of the
// pool (Hijack) when its grant succeeds, parked for a later grant by
// Release, and closed when it is found broken or its lock ended without
// Release.

// maxPings bounds the renewal pings a Renew call runs at once.
const maxPings = 16

// TCP settings of the holders' connections: a peer that stops answering
// turns an in-flight renewal into an error within holderUserTimeout, and an
// idle connection is probed every holderKeepAlive. See the package
// documentation.
const (
	holderKeepAlive   = time.Second
	holderKeepCount   = 3
	holderUserTimeout = 5 * time.Second
)

// closeTimeout bounds the Terminate message sent when a connection is
// closed.
const closeTimeout = time.Second

// sweepEvery is how often Acquire looks for connections of locks that
// ended without Release (expired, MaxHold, stalled, lost): the server has
// ended their sessions by then; the client side of the socket still needs
// closing.
const sweepEvery = time.Second

// Released locks' connections are parked, clean (advisory lock given back,
// idle_session_timeout parkedIdle), for the next grant: a grant then costs
// no new connection. At most maxParked are kept, each for at most parkFor;
// the server ends a parked session idle for parkedIdle, in case the Store is
// dropped with connections parked (their sockets close when collected).
const (
	maxParked  = 4
	parkFor    = 30 * time.Second
	parkedIdle = time.Minute
)

// heldConn is the connection of one held lock.
type heldConn struct {
	key, token string

	// ops bounds every statement on conn besides its caller's ctx (see
	// opContext); abort ends it, so that a statement under way (a renewal
	// that the server does not answer) fails at once and its caller
	// closes conn. Release calls abort when its ctx ends before it could
	// use conn; closing or parking conn calls it too.
	ops   context.Context
	abort context.CancelFunc

	mu       sync.Mutex // serializes use of conn
	conn     *pgx.Conn  // nil once closed
	deadline time.Time  // local: after it the server has ended the session
}

// newHeldConn returns the heldConn of the lock (key, token) granted on c,
// whose session the server ends after deadline.
func newHeldConn(key, token string, c *pgx.Conn, deadline time.Time) *heldConn {
	ops, abort := context.WithCancel(context.Background())
	return &heldConn{key: key, token: token, ops: ops, abort: abort, conn: c, deadline: deadline}
}

// opContext returns ctx, also ended by abort. Call its CancelFunc when the
// statement is done.
func (h *heldConn) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.ops, cancel)
	return ctx, func() { stop(); cancel() }
}

// closeLocked closes the connection. Callers hold h.mu.
func (h *heldConn) closeLocked() {
	if h.conn == nil {
		return
	}
	closeConn(h.conn)
	h.conn = nil
	h.abort()
}

// registry holds the connections of held locks, by token (unique per
// grant).
type registry struct {
	mu        sync.Mutex
	byToken   map[string]*heldConn
	parked    []parkedConn
	lastSweep time.Time
}

type parkedConn struct {
	conn  *pgx.Conn
	since time.Time
}

// park keeps a clean connection for a later grant, or closes it.
func (r *registry) park(c *pgx.Conn) {
	r.mu.Lock()
	if len(r.parked) < maxParked && !c.IsClosed() {
		r.parked = append(r.parked, parkedConn{c, time.Now()})
		c = nil
	}
	r.mu.Unlock()
	if c != nil {
		closeConn(c)
	}
}

// unpark returns the most recently parked connection, or nil.
func (r *registry) unpark() *pgx.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n := len(r.parked); n > 0; n = len(r.parked) {
		p := r.parked[n-1]
		r.parked[n-1] = parkedConn{}
		r.parked = r.parked[:n-1]
		if !p.conn.IsClosed() {
			return p.conn
		}
	}
	return nil
}

func newRegistry() *registry { return &registry{byToken: make(map[string]*heldConn)} }

func (r *registry) add(h *heldConn) {
	r.mu.Lock()
	r.byToken[h.token] = h
	r.mu.Unlock()
}

func (r *registry) get(key, token string) *heldConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.byToken[token]; h != nil && h.key == key {
		return h
	}
	return nil
}

// take removes and returns the connection of (key, token).
func (r *registry) take(key, token string) *heldConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.byToken[token]
	if h == nil || h.key != key {
		return nil
	}
	delete(r.byToken, token)
	return h
}

func (r *registry) remove(h *heldConn) {
	r.mu.Lock()
	if r.byToken[h.token] == h {
		delete(r.byToken, h.token)
	}
	r.mu.Unlock()
}

// len returns how many connections the registry holds.
func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byToken)
}

// sweep closes, at most once per sweepEvery, the connections whose local
// deadline passed more than sweepEvery ago and that nobody is using.
func (r *registry) sweep() {
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.lastSweep) < sweepEvery {
		r.mu.Unlock()
		return
	}
	r.lastSweep = now
	var stale []*heldConn
	var old []*pgx.Conn
	keep := r.parked[:0]
	for _, p := range r.parked {
		if now.Sub(p.since) > parkFor {
			old = append(old, p.conn)
		} else {
			keep = append(keep, p)
		}
	}
	clear(r.parked[len(keep):])
	r.parked = keep
	for tok, h := range r.byToken {
		if !h.mu.TryLock() {
			continue
		}
		if now.Sub(h.deadline) > sweepEvery {
			delete(r.byToken, tok)
			stale = append(stale, h)
			continue // still locked: closed below
		}
		h.mu.Unlock()
	}
	r.mu.Unlock()
	for _, c := range old {
		closeConn(c)
	}
	for _, h := range stale {
		h.closeLocked()
		h.mu.Unlock()
	}
}

// acquireConn runs a connection-mode grant statement (sql with args:
// acquireConn's, or a fair queue's serveConn, whose extra columns go to
// extra) on a parked or pooled connection and, when granted, keeps that
// connection.
func (s *Store) acquireConn(ctx context.Context, p driver.AcquireParams, sql string, args []any, extra ...any) (driver.Grant, error) {
	s.conns.sweep()
	if c := s.conns.unpark(); c != nil {
		g, held, err := tryConn(ctx, c, sql, args, extra)
		switch {
		case err == nil && held == nil:
			s.keep(c, p)
			return g, nil
		case err == nil:
			s.conns.park(c)
			return driver.Grant{}, held
		}
		closeConn(c)
		if ctx.Err() != nil {
			return driver.Grant{}, s.wrap("acquire", p.Key, err)
		}
		// The server ended that parked session: go on with a pooled one.
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return driver.Grant{}, s.wrap("acquire", p.Key, err)
	}
	g, held, err := tryConn(ctx, pc.Conn(), sql, args, extra)
	switch {
	case err != nil:
		// The session may hold the advisory lock (a session lock survives
		// a failed statement): it must never go back to the pool.
		closeConn(pc.Hijack())
		return driver.Grant{}, s.wrap("acquire", p.Key, err)
	case held != nil:
		pc.Release()
		return driver.Grant{}, held
	}
	s.keep(pc.Hijack(), p)
	return g, nil
}

// acquireConnArgs are the arguments of the connection-mode acquire.
func (s *Store) acquireConnArgs(p driver.AcquireParams) []any {
	return []any{p.Key, p.Token, p.Owner, micros(p.TTL), s.o.seed, idleTimeout(p.TTL)}
}

// tryConn runs a connection-mode grant statement on c.
func tryConn(ctx context.Context, c *pgx.Conn, sql string, args, extra []any) (driver.Grant, *driver.HeldError, error) {
	var fence, ttl *int64
	var owner *string
	err := c.QueryRow(ctx, sql, args...).Scan(append([]any{&fence, nil, &owner, &ttl}, extra...)...)
	switch {
	case err != nil:
		return driver.Grant{}, nil, err
	case fence == nil:
		return driver.Grant{}, heldError(owner, ttl), nil
	}
	return driver.Grant{Fence: uint64(*fence)}, nil, nil
}

// keep registers c as the connection of the lock just granted.
func (s *Store) keep(c *pgx.Conn, p driver.AcquireParams) {
	tuneTCP(c)
	s.conns.add(newHeldConn(p.Key, p.Token, c, time.Now().Add(p.TTL)))
}

// renewConns pings each lease's connection with its renewal, in parallel.
// A lease whose connection is gone, broken, or whose row is no longer its
// own is not held: its connection is closed (which frees the advisory lock
// if the session still had it) and the result is ErrNotHeld.
func (s *Store) renewConns(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.wrap("renew", "", err)
	}
	res := make([]error, len(ps))
	if len(ps) == 1 {
		res[0] = s.renewOne(ctx, ps[0])
		return res, nil
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(len(ps), maxPings) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				res[i] = s.renewOne(ctx, ps[i])
			}
		}()
	}
	for i := range ps {
		work <- i
	}
	close(work)
	wg.Wait()
	return res, nil
}

func (s *Store) renewOne(ctx context.Context, p driver.RenewParams) error {
	h := s.conns.get(p.Key, p.Token)
	if h == nil {
		return driver.ErrNotHeld
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return driver.ErrNotHeld
	}
	ctx, cancel := h.opContext(ctx)
	defer cancel()
	var n int64
	err := h.conn.QueryRow(ctx, s.sql.renewConn, p.Key, p.Token, micros(p.TTL), idleTimeout(p.TTL)).Scan(&n, nil)
	if err == nil && n == 1 {
		h.deadline = time.Now().Add(p.TTL)
		return nil
	}
	s.conns.remove(h)
	h.closeLocked()
	if err != nil {
		return fmt.Errorf("%w: its connection failed and was closed: %w", driver.ErrNotHeld, err)
	}
	return driver.ErrNotHeld
}

// releaseConn ends the lease on its own connection, which then gives the
// advisory lock back, and parks that connection for a later grant. When
// ctx ends while another call uses the connection (a renewal that the
// server does not answer), it aborts that call, which fails at once and
// closes the connection, and returns ctx's error: it never waits for the
// other call's own deadline. A closed connection ends the session, and the
// advisory lock with it, as soon as the server runs again.
func (s *Store) releaseConn(ctx context.Context, p driver.ReleaseParams) error {
	h := s.conns.take(p.Key, p.Token)
	if h == nil {
		return driver.ErrNotHeld
	}
	stop := context.AfterFunc(ctx, h.abort)
	h.mu.Lock()
	defer h.mu.Unlock()
	stop()
	if err := ctx.Err(); err != nil {
		h.closeLocked() // ends the session: the advisory lock goes with it
		return s.wrap("release", p.Key, fmt.Errorf("its connection was closed: %w", err))
	}
	if h.conn == nil {
		return driver.ErrNotHeld
	}
	var n int64
	err := h.conn.QueryRow(ctx, s.sql.releaseConn, p.Key, p.Token, micros(p.KeepFor), s.o.seed, s.o.channel, idleTimeout(parkedIdle)).
		Scan(&n, nil, nil, nil)
	if err != nil {
		h.closeLocked() // ends the session: the advisory lock goes with it
		if ctx.Err() != nil {
			return s.wrap("release", p.Key, err)
		}
		return fmt.Errorf("%w: its connection failed and was closed: %w", driver.ErrNotHeld, err)
	}
	s.conns.park(h.conn)
	h.conn = nil
	h.abort()
	if n == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// tuneTCP sets keepalive probes and TCP_USER_TIMEOUT on a holder's
// connection, when it is TCP (possibly under TLS).
func tuneTCP(c *pgx.Conn) {
	nc := c.PgConn().Conn()
	for {
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		nc = u.NetConn()
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{
		Enable: true, Idle: holderKeepAlive, Interval: holderKeepAlive, Count: holderKeepCount,
	})
	_ = setUserTimeout(tc, holderUserTimeout)
}
