// Package proxy is a TCP proxy between clients and one server, inside the
// test process (toxiproxy used as a library, no toxiproxy-server), that
// blackholes or delays the traffic: the network faults of the fault tests.
// It lives in the systest module because the library module must not
// require toxiproxy (see systest/doc.go).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/tasklock/tasklock/internal/leakcheck"
)

// proxySeq names proxies uniquely within the test binary.
var proxySeq atomic.Int64

// Proxy is a TCP proxy between clients and one upstream server, running
// inside the test process (toxiproxy used as a library, no toxiproxy-server),
// that injects network faults.
type Proxy struct {
	p    *toxiproxy.Proxy
	addr string
}

// Start starts a proxy that listens on a free 127.0.0.1 port and forwards
// every connection to upstream ("host:port"). It is stopped, closing every
// connection through it, at t.Cleanup.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	name := fmt.Sprintf("proxy-%d", proxySeq.Add(1))
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("proxy: start proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	p.Lock()
	addr := p.Listen
	p.Unlock()
	return &Proxy{p: p, addr: addr}
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.addr }

// addToxic adds a toxic, replacing one of the same name.
func (p *Proxy) addToxic(t testing.TB, name, typ, stream, attrs string) {
	t.Helper()
	_ = p.p.Toxics.RemoveToxic(context.Background(), name)
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		t.Fatalf("proxy: proxy %s: add %s toxic: %v", p.addr, typ, err)
	}
}

// Blackhole stops traffic in both directions while keeping connections, and
// new ones, open: writes succeed, nothing arrives, so clients see timeouts
// rather than errors (toxiproxy's "timeout" toxic with timeout 0, upstream and
// downstream). [Proxy.Restore] ends it.
func (p *Proxy) Blackhole(t testing.TB) {
	t.Helper()
	p.addToxic(t, "blackhole_upstream", "timeout", "upstream", `{"timeout":0}`)
	p.addToxic(t, "blackhole_downstream", "timeout", "downstream", `{"timeout":0}`)
}

// Latency delays data flowing from the server to the client by d (rounded
// to milliseconds), so every request/response round trip takes about d
// longer. A later call replaces the delay; d <= 0 removes it.
func (p *Proxy) Latency(t testing.TB, d time.Duration) {
	t.Helper()
	const name = "latency_downstream"
	if d <= 0 {
		if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			t.Fatalf("proxy: proxy %s: remove latency: %v", p.addr, err)
		}
		return
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	p.addToxic(t, name, "latency", "downstream", fmt.Sprintf(`{"latency":%d,"jitter":0}`, ms))
}

// Restore removes every fault. Connections that were blackholed are closed
// by the proxy when the blackhole is removed (toxiproxy's behaviour), so
// clients reconnect; connections that were only delayed stay open.
func (p *Proxy) Restore(t testing.TB) {
	t.Helper()
	p.p.Toxics.ResetToxics(context.Background())
}

// IgnoreToxics tells a leak check (testserver.Main, leakcheck.Find) that
// toxiproxy's per-toxic goroutines are not leaks: toxiproxy winds them down
// on its own after a proxy stops.
var IgnoreToxics = leakcheck.IgnoreFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run")
