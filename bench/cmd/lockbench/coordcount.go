package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

// reqCounter counts the requests one client sends to its store, by kind,
// and the bytes its connections send and receive. What a request is
// depends on the store:
//
//   - etcd: a unary gRPC call (every attempt: the interceptor runs inside
//     clientv3's retry interceptor) or a message sent on a stream
//     (a LeaseKeepAlive, a watch request);
//   - ZooKeeper: a request packet on the wire (the session's pings
//     included, the connect handshake not), read from the client's own
//     framing by a counting net.Conn;
//   - Redis: a command sent alone or a pipeline, per node (a go-redis hook).
//
// Each request gets its answer from the server: requests are round trips,
// though a client may have several under way at once.
type reqCounter struct {
	total      atomic.Int64
	byOp       sync.Map // string → *atomic.Int64
	sent, recv atomic.Int64
}

func (c *reqCounter) add(op string) {
	c.total.Add(1)
	v, ok := c.byOp.Load(op)
	if !ok {
		v, _ = c.byOp.LoadOrStore(op, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// reqs is a snapshot of a reqCounter, or the difference of two.
type reqs struct {
	total      int64
	byOp       map[string]int64
	sent, recv int64
}

func (c *reqCounter) snapshot() reqs {
	r := reqs{total: c.total.Load(), byOp: map[string]int64{}, sent: c.sent.Load(), recv: c.recv.Load()}
	c.byOp.Range(func(k, v any) bool {
		r.byOp[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return r
}

func (a reqs) sub(b reqs) reqs {
	d := reqs{total: a.total - b.total, byOp: map[string]int64{}, sent: a.sent - b.sent, recv: a.recv - b.recv}
	for k, v := range a.byOp {
		if v -= b.byOp[k]; v != 0 {
			d.byOp[k] = v
		}
	}
	return d
}

func (a reqs) add(b reqs) reqs {
	s := reqs{total: a.total + b.total, byOp: maps.Clone(a.byOp), sent: a.sent + b.sent, recv: a.recv + b.recv}
	if s.byOp == nil {
		s.byOp = map[string]int64{}
	}
	for k, v := range b.byOp {
		s.byOp[k] += v
	}
	return s
}

// perPair returns the requests per pair and, by kind, what describe says
// of them per pair ("none" when no pair was made).
func (a reqs) perPair(pairs int64) (float64, string) {
	if pairs <= 0 {
		return 0, "none"
	}
	return float64(a.total) / float64(pairs), a.describe(1 / float64(pairs))
}

// describe lists the requests by kind, the most frequent first, each
// scaled by f: "LeaseTimeToLive 3.0, LeaseKeepAlive 3.0"; kinds that
// scale to less than 0.05 are left out.
func (a reqs) describe(f float64) string {
	var ops []string
	for op, n := range a.byOp {
		if float64(n)*f >= 0.05 {
			ops = append(ops, op)
		}
	}
	slices.SortFunc(ops, func(x, y string) int {
		if a.byOp[x] != a.byOp[y] {
			return int(a.byOp[y] - a.byOp[x])
		}
		return strings.Compare(x, y)
	})
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = fmt.Sprintf("%s %.1f", op, float64(a.byOp[op])*f)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// byteConn counts the bytes of a connection into a reqCounter.
type byteConn struct {
	net.Conn
	c *reqCounter
}

func (b *byteConn) Read(p []byte) (int, error) {
	n, err := b.Conn.Read(p)
	b.c.recv.Add(int64(n))
	return n, err
}

func (b *byteConn) Write(p []byte) (int, error) {
	n, err := b.Conn.Write(p)
	b.c.sent.Add(int64(n))
	return n, err
}

// --- etcd --------------------------------------------------------------

// grpcOptions returns the dial options that make a clientv3 client count
// into c: a unary and a stream interceptor, and a dialer that counts bytes.
func (c *reqCounter) grpcOptions() []grpc.DialOption {
	short := func(method string) string { return method[strings.LastIndexByte(method, '/')+1:] }
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.add(short(method))
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &countedStream{ClientStream: s, c: c, op: short(method)}, nil
		}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &byteConn{Conn: conn, c: c}, nil
		}),
	}
}

// countedStream counts every message sent on a gRPC stream as a request.
type countedStream struct {
	grpc.ClientStream
	c  *reqCounter
	op string
}

func (s *countedStream) SendMsg(m any) error {
	s.c.add(s.op)
	return s.ClientStream.SendMsg(m)
}

// --- ZooKeeper ---------------------------------------------------------

// zkOps names ZooKeeper's request opcodes (zookeeper.jute, ZooDefs.OpCode).
var zkOps = map[int32]string{
	1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData", 6: "getACL", 7: "setACL",
	8: "getChildren", 9: "sync", 11: "ping", 12: "getChildren2", 13: "check", 14: "multi",
	15: "create2", 16: "reconfig", 17: "checkWatches", 18: "removeWatches", 19: "createContainer",
	20: "deleteContainer", 21: "createTTL", 22: "multiRead", 100: "auth", 101: "setWatches",
	102: "sasl", 103: "getEphemerals", 104: "getAllChildrenNumber", 105: "setWatches2",
	106: "addWatch", -10: "createSession", -11: "closeSession",
}

// zkDialer returns a zk.Dialer whose connections count into c.
func (c *reqCounter) zkDialer() func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &zkConn{byteConn: byteConn{Conn: conn, c: c}}, nil
	}
}

// zkConn reads the client's framing as it writes: each packet is a 4-byte
// length and the packet; after the connect request (which has no header)
// each starts with its xid and opcode.
type zkConn struct {
	byteConn
	mu        sync.Mutex
	buf       []byte // a packet's start not yet complete
	skip      int    // bytes of the current packet still to pass over
	handshake bool   // the connect request has been passed over
}

func (z *zkConn) Write(p []byte) (int, error) {
	z.mu.Lock()
	z.parse(p)
	z.mu.Unlock()
	return z.byteConn.Write(p)
}

func (z *zkConn) parse(p []byte) {
	for len(p) > 0 {
		if z.skip > 0 {
			n := min(z.skip, len(p))
			z.skip -= n
			p = p[n:]
			continue
		}
		// Gather the length and, after the handshake, the header.
		need := 4
		if z.handshake {
			need = 12
		}
		n := min(need-len(z.buf), len(p))
		z.buf = append(z.buf, p[:n]...)
		p = p[n:]
		if len(z.buf) < need {
			return
		}
		size := int(binary.BigEndian.Uint32(z.buf[:4]))
		if !z.handshake {
			z.handshake = true
		} else {
			op := int32(binary.BigEndian.Uint32(z.buf[8:12]))
			name, ok := zkOps[op]
			if !ok {
				name = fmt.Sprintf("op %d", op)
			}
			z.c.add(name)
		}
		z.skip = 4 + size - len(z.buf)
		z.buf = z.buf[:0]
	}
}

// --- Redis -------------------------------------------------------------

// redisHook counts one node's round trips: a command sent alone, by name,
// or a pipeline ("pipeline"); and the bytes of its connections.
type redisHook struct{ c *reqCounter }

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &byteConn{Conn: conn, c: h.c}, nil
	}
}

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.add("pipeline")
		return next(ctx, cmds)
	}
}
