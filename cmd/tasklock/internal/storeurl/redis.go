package storeurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redisstore"
)

// redisMode is how a Redis URL reaches its data.
type redisMode int

const (
	redisSingle   redisMode = iota // redis://, rediss://
	redisSentinel                  // redis+sentinel://
	redisCluster                   // redis+cluster://
)

// redisConfig is a checked Redis URL.
type redisConfig struct {
	u        *storeURL
	mode     redisMode
	addrs    []string // the node, the sentinels or the cluster seed nodes
	tls      bool
	caFile   string // rediss: PEM file of the CAs to trust instead of the system's
	username string
	password string
	db       int
	master   string // Sentinel master name

	sentinelUsername string
	sentinelPassword string

	dialTimeout  time.Duration // 0: go-redis's default
	readTimeout  time.Duration
	writeTimeout time.Duration
	poolSize     int

	store redisstore.Options
}

// parseRedis checks a redis://, rediss://, redis+sentinel:// or
// redis+cluster:// URL.
//
// Query parameters, for every mode: prefix (redisstore.Options.Prefix),
// wait_replicas and wait_timeout (Options.WaitReplicas, WaitTimeout),
// dial_timeout, read_timeout, write_timeout (Go durations) and pool_size.
// redis+sentinel:// also takes db, sentinel_username and sentinel_password
// (when the sentinels need their own credentials); rediss:// takes
// tls_ca_file, a PEM file of the CAs to trust instead of the system's.
func parseRedis(u *storeURL) (opener, error) {
	c := &redisConfig{u: u, username: u.user, password: u.password}
	defaultPort := "6379"
	switch u.scheme {
	case "redis":
	case "rediss":
		c.tls = true
		c.caFile, _ = u.query.str("tls_ca_file")
	case "redis+sentinel":
		c.mode = redisSentinel
		defaultPort = "26379"
	case "redis+cluster":
		c.mode = redisCluster
	}
	addrs, err := u.hosts(defaultPort)
	if err != nil {
		return nil, err
	}
	c.addrs = addrs

	switch c.mode {
	case redisSingle:
		if len(addrs) > 1 {
			return nil, u.badf("%s:// takes one host, got %d; use redis+sentinel:// or redis+cluster:// for several", u.scheme, len(addrs))
		}
		if u.path != "" {
			db, err := strconv.Atoi(u.path)
			if err != nil || db < 0 {
				return nil, u.badf("invalid database number %q in the path, want /0, /1, ...", u.path)
			}
			c.db = db
		}
	case redisSentinel:
		switch {
		case u.path == "":
			return nil, u.badf("missing master name: want redis+sentinel://host:port,.../MASTER")
		case strings.Contains(u.path, "/"):
			return nil, u.badf("invalid master name %q: it must not contain '/'", u.path)
		}
		c.master = u.path
		c.db = u.query.nonNegInt("db")
		c.sentinelUsername, _ = u.query.str("sentinel_username")
		c.sentinelPassword, _ = u.query.secretStr("sentinel_password")
	case redisCluster:
		if u.path != "" {
			return nil, u.badf("redis+cluster:// takes no path: a Cluster has only database 0")
		}
	}

	q := u.query
	c.store.Prefix, _ = q.str("prefix")
	if strings.ContainsAny(c.store.Prefix, "{}") {
		return nil, u.badf("query parameter prefix=%q must not contain '{' or '}'", c.store.Prefix)
	}
	c.store.WaitReplicas = q.nonNegInt("wait_replicas")
	c.store.WaitTimeout = q.duration("wait_timeout")
	c.dialTimeout = q.duration("dial_timeout")
	c.readTimeout = q.duration("read_timeout")
	c.writeTimeout = q.duration("write_timeout")
	c.poolSize = q.nonNegInt("pool_size")
	return c, nil
}

// client builds the go-redis client; it does no network I/O. roots, when
// not nil, are the CAs a TLS client trusts.
func (c *redisConfig) client(roots *x509.CertPool) redis.UniversalClient {
	var (
		tlsConfig *tls.Config
		dialer    func(ctx context.Context, network, addr string) (net.Conn, error)
	)
	if c.tls {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
		// go-redis's own TLS dialer ignores ctx: the handshake with a
		// server that never answers would outlast the caller's deadline.
		// tls.Dialer takes the server name from each address.
		d := &tls.Dialer{
			NetDialer: &net.Dialer{Timeout: c.dialTimeout, KeepAlive: 5 * time.Minute},
			Config:    tlsConfig,
		}
		if d.NetDialer.Timeout == 0 {
			d.NetDialer.Timeout = 5 * time.Second // go-redis's default DialTimeout
		}
		dialer = d.DialContext
	}
	// One set of options for every mode; go-redis's Failover, Cluster and
	// Simple take from it what each client has (Cluster has no DB, which
	// is 0 for redis+cluster://; Simple takes the one address).
	o := &redis.UniversalOptions{
		Addrs:                 c.addrs,
		MasterName:            c.master,
		SentinelUsername:      c.sentinelUsername,
		SentinelPassword:      c.sentinelPassword,
		Username:              c.username,
		Password:              c.password,
		DB:                    c.db,
		DialTimeout:           c.dialTimeout,
		ReadTimeout:           c.readTimeout,
		WriteTimeout:          c.writeTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              c.poolSize,
		TLSConfig:             tlsConfig,
		Dialer:                dialer,
	}
	switch c.mode {
	case redisSentinel:
		return redis.NewFailoverClient(o.Failover())
	case redisCluster:
		return redis.NewClusterClient(o.Cluster())
	default:
		return redis.NewClient(o.Simple())
	}
}

// open implements opener: it builds the client and the store, and PINGs.
func (c *redisConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	var roots *x509.CertPool
	if c.caFile != "" {
		var err error
		if roots, err = c.u.certPool("tls_ca_file", c.caFile); err != nil {
			return nil, nil, err
		}
	}
	client := c.client(roots)
	store, err := redisstore.New(client, &c.store)
	if err != nil {
		_ = client.Close()
		return nil, nil, c.u.badOption("", err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		if c.mode == redisSentinel {
			if bad := c.sentinelMistake(ctx); bad != nil {
				return nil, nil, bad
			}
		}
		return nil, nil, err
	}
	return store, client.Close, nil
}

// sentinelMistake asks every sentinel of a redis+sentinel:// URL whose
// open failed for the master's address (SENTINEL GET-MASTER-ADDR-BY-NAME),
// to tell a mistake in the URL from a store that is down: go-redis reports
// both as "all sentinels specified in configuration are unreachable". It
// returns an error wrapping ErrBadURL when the sentinels that answered
// know no master of that name, or are no sentinels (a data node's address:
// "unknown command 'sentinel'"), and none knows it: asking again will not
// help. It returns nil when a sentinel knows the master, or when none
// answered within probeWait: the open's error says why.
func (c *redisConfig) sentinelMistake(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	errs := make([]error, len(c.addrs))
	var wg sync.WaitGroup
	for i, addr := range c.addrs {
		wg.Go(func() {
			sc := redis.NewSentinelClient(&redis.Options{
				Addr: addr, Username: c.sentinelUsername, Password: c.sentinelPassword,
				DialTimeout: c.dialTimeout, ReadTimeout: c.readTimeout, WriteTimeout: c.writeTimeout,
				ContextTimeoutEnabled: true,
			})
			defer sc.Close()
			errs[i] = sc.GetMasterAddrByName(ctx, c.master).Err()
		})
	}
	wg.Wait()
	var unknown, notSentinel []string
	for i, err := range errs {
		var re redis.Error
		switch {
		case err == nil:
			return nil // it knows the master: the failure is elsewhere
		case errors.Is(err, redis.Nil):
			unknown = append(unknown, c.addrs[i])
		case errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "unknown command"):
			notSentinel = append(notSentinel, fmt.Sprintf("%s is not a sentinel (it answered %q)", c.addrs[i], strings.TrimSpace(re.Error())))
		}
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("no sentinel at %s knows a master named %q", strings.Join(unknown, ", "), c.master))
	}
	if len(notSentinel) > 0 {
		msgs = append(msgs, strings.Join(notSentinel, "; ")+
			": redis+sentinel:// takes the sentinels' addresses (port 26379 by default), not the Redis servers'")
	}
	if len(msgs) == 0 {
		return nil
	}
	return c.u.badf("%s", strings.Join(msgs, "; "))
}

// probeWait bounds the questions open asks to explain a failure or to
// check what the store's own check cannot see (a sentinel's masters, a
// RedLock node's run_id): a server that is down or cut off must not hold
// the open much longer than the check it failed.
const probeWait = time.Second

// maxPEM bounds a certificate or key file, in bytes: a bundle of every
// public CA is about 250 KB.
const maxPEM = 4 << 20

// readPEM reads the certificate or key file named by the query parameter
// param: a regular file (a FIFO would block the open until a writer came,
// a device may never end) of at most maxPEM bytes.
func (u *storeURL) readPEM(param, file string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading returns at once, for the
	// check below to refuse it; reads of a regular file ignore it.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, u.badf("query parameter %s: %v", param, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, u.badf("query parameter %s: %v", param, err)
	} else if !fi.Mode().IsRegular() {
		return nil, u.badf("query parameter %s: %s is not a regular file", param, file)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPEM+1))
	switch {
	case err != nil:
		return nil, u.badf("query parameter %s: %v", param, err)
	case len(data) > maxPEM:
		return nil, u.badf("query parameter %s: %s is larger than %d bytes", param, file, maxPEM)
	}
	return data, nil
}

// checkPEMFile refuses, for a file another library reads whole, what
// readPEM refuses: a file of more than maxPEM bytes, or one that is not a
// regular file (a device or a pipe may never end). A file that cannot be
// looked at is left for that library to report.
func (u *storeURL) checkPEMFile(param, file string) error {
	fi, err := os.Stat(file)
	switch {
	case err != nil:
		return nil
	case !fi.Mode().IsRegular():
		return u.badf("query parameter %s: %s is not a regular file", param, file)
	case fi.Size() > maxPEM:
		return u.badf("query parameter %s: %s is larger than %d bytes", param, file, maxPEM)
	}
	return nil
}

// certPool reads a PEM file of CA certificates named by the query
// parameter param.
func (u *storeURL) certPool(param, file string) (*x509.CertPool, error) {
	pem, err := u.readPEM(param, file)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, u.badf("query parameter %s: no PEM certificate in %s", param, file)
	}
	return roots, nil
}
