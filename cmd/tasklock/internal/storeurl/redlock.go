package storeurl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redlock"
)

// redlockConfig is a checked redlock:// URL.
type redlockConfig struct {
	u     *storeURL
	nodes []*redisConfig // one independent Redis server each
	store redlock.Options
}

// parseRedlock checks a redlock:// URL:
//
//	redlock://[user:pass@]h1:p1,h2:p2,h3:p3[/db][?prefix=...&node_timeout=...]
//
// Each host is one independent Redis server (an odd number, at least 3);
// the user, password and database number apply to every one. A missing
// port is 6379. Query parameters: prefix and node_timeout
// (redlock.Options), and dial_timeout, read_timeout and write_timeout
// (Go durations) for every node's client.
func parseRedlock(u *storeURL) (opener, error) {
	addrs, err := u.hosts("6379")
	if err != nil {
		return nil, err
	}
	if n := len(addrs); n < 3 || n%2 == 0 {
		return nil, u.badf("redlock:// takes an odd number of independent Redis servers, at least 3; got %d", n)
	}
	for i, a := range addrs {
		for _, b := range addrs[:i] {
			if a == b {
				return nil, u.badf("host %s is given twice: the nodes must be independent servers", a)
			}
		}
	}
	db := 0
	if u.path != "" {
		db, err = strconv.Atoi(u.path)
		if err != nil || db < 0 {
			return nil, u.badf("invalid database number %q in the path, want /0, /1, ...", u.path)
		}
	}
	q := u.query
	c := &redlockConfig{u: u}
	c.store.Prefix, _ = q.str("prefix")
	if strings.ContainsAny(c.store.Prefix, "{}") {
		return nil, u.badf("query parameter prefix=%q must not contain '{' or '}'", c.store.Prefix)
	}
	c.store.NodeTimeout = q.duration("node_timeout")
	dialTimeout, readTimeout, writeTimeout := q.duration("dial_timeout"), q.duration("read_timeout"), q.duration("write_timeout")
	for _, a := range addrs {
		c.nodes = append(c.nodes, &redisConfig{
			u: u, addrs: []string{a}, username: u.user, password: u.password, db: db,
			dialTimeout: dialTimeout, readTimeout: readTimeout, writeTimeout: writeTimeout,
		})
	}
	return c, nil
}

// open implements opener: it builds one client per node and the store,
// PINGs every node and refuses two nodes that are one server
// (checkIndependent). A majority answering is enough, as for every call of
// the store: RedLock runs on with a minority of its nodes down. Closing the
// store closes every client.
func (c *redlockConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	clients := make([]redis.UniversalClient, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = n.client(nil)
	}
	closeAll := func() error {
		var errs []error
		for _, cl := range clients {
			errs = append(errs, cl.Close())
		}
		return errors.Join(errs...)
	}
	store, err := redlock.New(clients, &c.store)
	if err != nil {
		_ = closeAll()
		return nil, nil, c.u.badOption("", err)
	}
	if err := pingMajority(ctx, c.nodes, clients); err != nil {
		_ = closeAll()
		return nil, nil, err
	}
	if err := c.checkIndependent(ctx, clients); err != nil {
		_ = closeAll()
		return nil, nil, err
	}
	return store, closeAll, nil
}

// checkIndependent refuses, as a bad URL, two hosts that reach the same
// Redis server (localhost and 127.0.0.1, a DNS alias): that server would
// carry two votes, and its loss or restart would break the quorum's
// promise. parseRedlock refuses a host written twice; only the servers can
// tell two names of one (redlock.CheckIndependent compares their run_id). A
// node that does not answer within probeWait of the majority's PING is not
// compared: RedLock runs on without it, and so does the open.
func (c *redlockConfig) checkIndependent(ctx context.Context, clients []redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	var same *redlock.SameServerError
	if err := redlock.CheckIndependent(ctx, clients); errors.As(err, &same) {
		return c.u.badf("hosts %s and %s are the same Redis server (same run_id %s): the nodes must be independent servers",
			c.nodes[same.First].addrs[0], c.nodes[same.Second].addrs[0], same.RunID)
	}
	return nil
}

// pingMajority PINGs every client at once and returns as soon as a
// majority answered, or enough failed that no majority can.
func pingMajority(ctx context.Context, nodes []*redisConfig, clients []redis.UniversalClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a node that has not answered yet need not
	type result struct {
		addr string
		err  error
	}
	results := make(chan result, len(clients))
	for i, cl := range clients {
		go func() { results <- result{nodes[i].addrs[0], cl.Ping(ctx).Err()} }()
	}
	quorum := len(clients)/2 + 1
	var ok int
	var failed nodeErrors
	for range clients {
		r := <-results
		if r.err == nil {
			if ok++; ok == quorum {
				return nil
			}
			continue
		}
		failed = append(failed, fmt.Errorf("%s: %w", r.addr, r.err))
		if len(failed) > len(clients)-quorum {
			break
		}
	}
	return fmt.Errorf("%d of %d Redis nodes failed, RedLock needs %d to answer: %w", len(failed), len(clients), quorum, failed)
}

// nodeErrors are the errors of several nodes, each naming its node.
type nodeErrors []error

func (e nodeErrors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e nodeErrors) Unwrap() []error { return e }
