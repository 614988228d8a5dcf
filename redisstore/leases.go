package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

// scanCount is the COUNT hint of each SCAN call, and so the most keys read
// back in one pipeline.
const scanCount = 1000

// Leases implements driver.Lister: it SCANs for the lock keys whose user key
// starts with prefix (on every master of a Cluster), and reads each lease's
// value and PTTL in one pipeline per page of keys. Leases that expire during
// the scan are left out. The result is sorted by key. It costs a full
// keyspace scan of each node, so it is meant for the CLI and the dashboard,
// not for hot paths.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	// Lock keys are prefix{key}; fence keys, prefix{key}:fence, end in
	// "fence" and never match a pattern ending in '}'.
	match := globEscape(s.prefix) + "{" + globEscape(prefix) + "*}"
	var (
		mu  sync.Mutex
		out []driver.Lease
	)
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
			if err != nil {
				return err
			}
			leases, err := s.readLeases(ctx, c, prefix, keys)
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, leases...)
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return scan(ctx, c)
		})
	} else {
		err = scan(ctx, s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: list leases: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// readLeases reads the value and PTTL of lock keys in one pipeline.
func (s *Store) readLeases(ctx context.Context, c redis.UniversalClient, prefix string, lockKeys []string) ([]driver.Lease, error) {
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
	if err := execPipe(ctx, pipe); err != nil {
		return nil, err
	}
	leases := make([]driver.Lease, 0, len(reads))
	for _, r := range reads {
		v, err := r.val.Result()
		if err == redis.Nil {
			continue // expired since the SCAN
		}
		if err != nil {
			return nil, err
		}
		if err := r.pttl.Err(); err != nil {
			return nil, err
		}
		fence, owner, ok := parseValue(v)
		if !ok {
			continue // not a lease value
		}
		ttl := r.pttl.Val()
		if ttl < 0 {
			ttl = 0 // -1 no expiry, -2 gone: unknown
		}
		leases = append(leases, driver.Lease{Key: r.key, Owner: owner, Fence: fence, TTL: ttl})
	}
	return leases, nil
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
