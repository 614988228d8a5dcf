package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

// scanCount is the COUNT hint of each SCAN call, and so the most keys read
// back in one pipeline.
const scanCount = 1000

// nodeLease is one node's copy of a lease.
type nodeLease struct {
	key, token, owner string
	fence             uint64
	ttl               time.Duration
}

// Leases implements driver.Lister. It scans every node for the lock keys
// whose user key starts with prefix (SCAN, then GET and PTTL in one pipeline
// per page), all nodes at once, and lists a lease when a majority of the
// nodes hold the same token for the key: its fence is the highest of those
// nodes' fences, its TTL the time until fewer than a majority will hold it.
// A copy on fewer than a majority (a failed grant being undone, a node that
// missed a release) is not a lock and is left out. Every node gets a second
// to answer, and after that the call stops waiting as soon as a majority has
// answered; otherwise only ctx bounds it. When fewer than a majority of the
// nodes answer, it returns a *QuorumError. The
// result is sorted by key. It costs a full keyspace scan of every node, so
// it is meant for the CLI and the dashboard.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	match := globEscape(s.prefix) + "{" + globEscape(prefix) + "*}"
	// A scan takes as long as the keyspace is large: every node gets a
	// second, and after that the call stops waiting once a majority has
	// answered; otherwise only ctx bounds it.
	w := wait{nodeTimeout: patience, quorum: s.quorum}
	calls, cancel := context.WithCancel(ctx)
	defer cancel() // scans still under way are of no use
	rs := fanOut(ctx, calls, w, s.nodes, func(ctx context.Context, n *node) ([]nodeLease, error) {
		return s.scan(ctx, n.client, match, prefix)
	}, succeeded, nil, nil)
	var failed []*NodeError
	type holder struct{ key, token string }
	copies := make(map[holder][]nodeLease)
	for i, r := range rs {
		if r.err != nil {
			failed = append(failed, &NodeError{Addr: s.nodes[i].addr, Err: r.err})
			continue
		}
		for _, l := range r.val {
			h := holder{l.key, l.token}
			copies[h] = append(copies[h], l)
		}
	}
	if len(s.nodes)-len(failed) < s.quorum {
		return nil, s.quorumError("list leases", "", "", failed)
	}
	var out []driver.Lease
	for _, cs := range copies {
		if len(cs) < s.quorum {
			continue
		}
		le := driver.Lease{Key: cs[0].key, Owner: cs[0].owner}
		ttls := make([]time.Duration, len(cs))
		for i, c := range cs {
			le.Fence = max(le.Fence, c.fence)
			ttls[i] = c.ttl
		}
		// Held by a majority until the quorum-th longest copy expires.
		slices.Sort(ttls)
		le.TTL = ttls[len(ttls)-s.quorum]
		out = append(out, le)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// scan lists one node's copies of the leases whose lock keys match.
func (s *Store) scan(ctx context.Context, c *redis.Client, match, prefix string) ([]nodeLease, error) {
	var out []nodeLease
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		ls, err := s.read(ctx, c, prefix, keys)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
		if next == 0 {
			return out, nil
		}
		cursor = next
	}
}

// read reads the value and PTTL of lock keys in one pipeline.
func (s *Store) read(ctx context.Context, c *redis.Client, prefix string, lockKeys []string) ([]nodeLease, error) {
	type read struct {
		key  string
		val  *redis.StringCmd
		pttl *redis.DurationCmd
	}
	reads := make([]read, 0, len(lockKeys))
	pipe := c.Pipeline()
	for _, lk := range lockKeys {
		key, ok := s.userKey(lk)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		reads = append(reads, read{key: key, val: pipe.Get(ctx, lk), pttl: pipe.PTTL(ctx, lk)})
	}
	if len(reads) == 0 {
		return nil, nil
	}
	// GET answers redis.Nil for a key that expired since the SCAN, which
	// is read per command below. Any other error fails the node: go-redis
	// sets no error on the commands when it cannot reach the server at all.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	out := make([]nodeLease, 0, len(reads))
	for _, r := range reads {
		v, err := r.val.Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since the SCAN
		}
		if err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		if err := r.pttl.Err(); err != nil {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		l, ok := parseValue(v)
		if !ok {
			continue // not a lease value
		}
		l.key = r.key
		l.ttl = max(r.pttl.Val(), 0) // -1 no expiry, -2 gone: unknown
		out = append(out, l)
	}
	return out, nil
}

// userKey returns the user key of a lock key Prefix{K}, and false when lk
// is not one.
func (s *Store) userKey(lk string) (string, bool) {
	if len(lk) < len(s.prefix)+2 || !strings.HasPrefix(lk, s.prefix) || lk[len(s.prefix)] != '{' || lk[len(lk)-1] != '}' {
		return "", false
	}
	return lk[len(s.prefix)+1 : len(lk)-1], true
}

// parseValue splits a redisstore lease value token:fence:owner.
func parseValue(v string) (nodeLease, bool) {
	token, rest, ok := strings.Cut(v, ":")
	if !ok {
		return nodeLease{}, false
	}
	f, owner, ok := strings.Cut(rest, ":")
	if !ok {
		return nodeLease{}, false
	}
	fence, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		return nodeLease{}, false
	}
	return nodeLease{token: token, owner: owner, fence: fence}, true
}

// globEscape quotes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
