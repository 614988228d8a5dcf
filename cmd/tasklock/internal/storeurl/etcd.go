package storeurl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/etcdstore"
)

// defaultEtcdDialTimeout bounds how long Open waits for an etcd cluster to
// answer when the URL has no dial_timeout.
const defaultEtcdDialTimeout = 5 * time.Second

// closeTimeout bounds what a store's close function sends to the server
// (etcdstore's revoke of its session lease).
const closeTimeout = 5 * time.Second

// etcdConfig is a checked etcd:// or etcds:// URL.
type etcdConfig struct {
	u         *storeURL
	endpoints []string // http://host:port, or https:// for etcds
	username  string
	password  string
	tls       bool
	caFile    string // etcds: PEM file of the CAs to trust instead of the system's
	certFile  string // etcds: client certificate (PEM), with keyFile
	keyFile   string

	dialTimeout time.Duration
	store       etcdstore.Options
}

// parseEtcd checks an etcd:// or etcds:// URL:
//
//	etcd://[user:pass@]h1:p1,h2:p2[/prefix][?session_ttl=10s&dial_timeout=5s]
//
// The path is etcdstore.Options.Prefix, with a leading '/' and, when
// missing, a trailing one (etcd://h/app is the prefix /app/); without a
// path it is etcdstore.DefaultPrefix. A missing port is 2379. The user and
// password go to clientv3's Username and Password (etcd's own
// authentication). etcds:// talks TLS and also takes tls_ca_file,
// tls_cert_file and tls_key_file.
func parseEtcd(u *storeURL) (opener, error) {
	c := &etcdConfig{u: u, username: u.user, password: u.password, tls: u.scheme == "etcds"}
	addrs, err := u.hosts("2379")
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	q := u.query
	if c.tls {
		scheme = "https://"
		c.caFile, _ = q.str("tls_ca_file")
		c.certFile, _ = q.str("tls_cert_file")
		c.keyFile, _ = q.str("tls_key_file")
		if (c.certFile == "") != (c.keyFile == "") {
			return nil, u.badf("query parameters tls_cert_file and tls_key_file go together")
		}
	}
	for _, a := range addrs {
		c.endpoints = append(c.endpoints, scheme+a)
	}
	switch {
	case u.user != "" && !u.hasPassword, u.user == "" && u.hasPassword:
		// clientv3 authenticates only with both, and would ignore one.
		return nil, u.badf("%s:// takes a user name and a password together (user:pass@) or neither", u.scheme)
	}
	if u.path != "" {
		c.store.Prefix = "/" + u.path
		if !strings.HasSuffix(c.store.Prefix, "/") {
			c.store.Prefix += "/"
		}
	}
	if v, ok := q.str("session_ttl"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, u.badf("query parameter session_ttl=%q: want whole seconds, at least 1s (10s, 1m)", v)
		}
		c.store.SessionTTL = d
	}
	c.dialTimeout = q.duration("dial_timeout")
	if c.dialTimeout == 0 {
		c.dialTimeout = defaultEtcdDialTimeout
	}
	// New only checks the options (the prefix): no client is used.
	if _, err := etcdstore.New(new(clientv3.Client), &c.store); err != nil {
		return nil, u.badOption("the path is not a valid key prefix", err)
	}
	return c, nil
}

// prefix is the store's key prefix.
func (c *etcdConfig) prefix() string {
	if c.store.Prefix == "" {
		return etcdstore.DefaultPrefix
	}
	return c.store.Prefix
}

// tlsConfig reads the etcds:// certificate files; nil for etcd://.
func (c *etcdConfig) tlsConfig() (*tls.Config, error) {
	if !c.tls {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		roots, err := c.u.certPool("tls_ca_file", c.caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = roots
	}
	if c.certFile != "" {
		certPEM, err := c.u.readPEM("tls_cert_file", c.certFile)
		if err != nil {
			return nil, err
		}
		keyPEM, err := c.u.readPEM("tls_key_file", c.keyFile)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, c.u.badf("query parameters tls_cert_file and tls_key_file: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// open implements opener: it creates the client (which authenticates when
// the URL has a user), reads the prefix linearizably, which needs a leader
// and the right to read there, and builds the store. Closing the store
// closes it (revoking its session lease when no lock is held) and then the
// client.
func (c *etcdConfig) open(ctx context.Context) (driver.Store, func() error, error) {
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	// clientv3.New authenticates within DialTimeout and the client's own
	// context, which must outlive ctx: base ends with ctx only until the
	// store is open.
	base, cancelBase := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancelBase)
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   c.endpoints,
		DialTimeout: c.dialTimeout,
		Username:    c.username,
		Password:    c.password,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
		Context:     base,
	})
	if err != nil {
		stop()
		cancelBase()
		return nil, nil, c.noAnswer(ctx, tlsConfig, err)
	}
	closeClient := func() error {
		err := client.Close()
		cancelBase()
		return err
	}
	store, err := etcdstore.New(client, &c.store)
	if err != nil { // checked by parseEtcd already
		stop()
		_ = closeClient()
		return nil, nil, c.u.badOption("", err)
	}
	gctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	_, err = client.Get(gctx, c.prefix(), clientv3.WithCountOnly())
	cancel()
	if !stop() && err == nil {
		err = ctx.Err() // base has ended with ctx: the client is unusable
	}
	if err != nil {
		_ = store.Close(context.Background()) // no session yet: no I/O
		_ = closeClient()
		return nil, nil, c.noAnswer(ctx, tlsConfig, err)
	}
	return store, func() error {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		return errors.Join(store.Close(cctx), closeClient())
	}, nil
}

// noAnswer says which wait ran out when err is a deadline. clientv3 then
// tells no more (its calls wait for a connection until then), so it dials
// every endpoint once to find out why.
func (c *etcdConfig) noAnswer(ctx context.Context, tlsConfig *tls.Config, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		why := ""
		if failed := c.probe(tlsConfig); len(failed) > 0 {
			why = " (" + failed.Error() + ")"
		}
		return fmt.Errorf("no answer from %s within dial_timeout %v%s: %w", strings.Join(c.endpoints, ","), c.dialTimeout, why, err)
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// probeTimeout bounds each connection of probe.
const probeTimeout = time.Second

// probe connects to every endpoint at once, with a TLS handshake for
// etcds://, and returns the failures.
func (c *etcdConfig) probe(tlsConfig *tls.Config) nodeErrors {
	errs := make([]error, len(c.endpoints))
	var wg sync.WaitGroup
	for i, ep := range c.endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, addr, _ := strings.Cut(ep, "://")
			d := &net.Dialer{Timeout: probeTimeout}
			var conn net.Conn
			var err error
			if tlsConfig != nil {
				cfg := tlsConfig.Clone()
				cfg.NextProtos = []string{"h2"}
				td := &tls.Dialer{NetDialer: d, Config: cfg} // the server name comes from addr
				ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
				conn, err = td.DialContext(ctx, "tcp", addr)
				cancel()
			} else {
				conn, err = d.Dial("tcp", addr)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", addr, err)
				return
			}
			conn.Close()
		}()
	}
	wg.Wait()
	var failed nodeErrors
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}
