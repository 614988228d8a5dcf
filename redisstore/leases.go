package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

// scanCount is the COUNT hint of each SCAN call, and so the most keys read
// back in one pipeline.
const scanCount = 1000

// Leases implements driver.Lister: it SCANs for the lock keys whose user key
// starts with prefix and for the hashes of the read-write locks and
// semaphores (on every master of a Cluster), and per page of keys reads
// each lease's value and PTTL in one pipeline and the other kinds' entries
// in another, listed one Lease per entry (a writer's waiting claim with
// Waiting set). Leases that expire during the scan are
// left out. The result is sorted by key. It costs a full keyspace scan of
// each node, so it is meant for the CLI and the dashboard, not for hot
// paths.
func (s *Store) Leases(ctx context.Context, prefix string) ([]driver.Lease, error) {
	// Lock keys are prefix{key}; the hashes of the other kinds,
	// prefix{key}:kinds, are the only keys ending in "}:kinds". One SCAN
	// matches both and the page is split by suffix: a keyspace pass costs
	// redis-server about a microsecond a key, and every scheduler node
	// lists the node leases every few seconds.
	match := globEscape(s.prefix) + "{" + globEscape(prefix) + "*}*"
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
			var locks, kinds []string
			for _, k := range keys {
				switch {
				case strings.HasSuffix(k, "}"+kindsSuffix):
					kinds = append(kinds, k)
				case strings.HasSuffix(k, "}"):
					locks = append(locks, k)
				}
			}
			leases, err := s.readLeases(ctx, c, prefix, locks)
			if err != nil {
				return err
			}
			more, err := s.readKinds(ctx, c, prefix, kinds)
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(append(out, leases...), more...)
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
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
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

// readKinds reads the entries of the read-write locks and semaphores whose
// hashes are hs in one pipeline, with Redis's clock (TIME on the same
// connection) to tell their remaining TTLs.
func (s *Store) readKinds(ctx context.Context, c redis.UniversalClient, prefix string, hs []string) ([]driver.Lease, error) {
	type read struct {
		key        string
		h          *redis.MapStringStringCmd
		held, wait *redis.ZSliceCmd
	}
	reads := make([]read, 0, len(hs))
	pipe := c.Pipeline()
	now := pipe.Time(ctx)
	for _, h := range hs {
		key, ok := s.kindsUserKey(h)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		k := s.kindsKeys(key)
		reads = append(reads, read{key: key, h: pipe.HGetAll(ctx, k.h),
			held: pipe.ZRangeWithScores(ctx, k.held, 0, -1), wait: pipe.ZRangeWithScores(ctx, k.wait, 0, -1)})
	}
	if len(reads) == 0 {
		return nil, nil
	}
	if err := execPipe(ctx, pipe); err != nil {
		return nil, err
	}
	t, err := now.Result()
	if err != nil {
		return nil, err
	}
	nowMs := t.UnixMilli()
	var leases []driver.Lease
	for _, r := range reads {
		vals, err := r.h.Result()
		if err != nil {
			return nil, err
		}
		limit, _ := strconv.Atoi(vals[":limit"])
		for _, z := range []*redis.ZSliceCmd{r.held, r.wait} {
			entries, err := z.Result()
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				tok, _ := e.Member.(string)
				left := int64(e.Score) - nowMs
				v := vals[tok]
				if left <= 0 || len(v) < 2 || v[1] != ':' {
					continue // expired, or not an entry
				}
				mode, waiting, ok := entryMode(v[0])
				fence, owner, ok2 := parseValue(v)
				if !ok || !ok2 {
					continue
				}
				l := driver.Lease{Key: r.key, Owner: owner, Fence: fence, TTL: time.Duration(left) * time.Millisecond, Mode: mode, Waiting: waiting}
				if mode == driver.ModePermit {
					l.Limit = limit
				}
				leases = append(leases, l)
			}
		}
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
