package testserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// registerScript is fence.Register's rule kept in Redis: a write is
// accepted only when its fence is at least the highest accepted, and every
// accepted write is logged as writer:fence.
var registerScript = redis.NewScript(`
local h = tonumber(redis.call('GET', KEYS[1]) or '0')
local f = tonumber(ARGV[1])
if f < h then redis.call('INCR', KEYS[2]) return 0 end
redis.call('SET', KEYS[1], f)
redis.call('RPUSH', KEYS[3], ARGV[2] .. ':' .. ARGV[1])
return 1`)

var registerKeys = []string{"reg:highest", "reg:rejected", "reg:log"}

// RedisRegister is a fenced register kept in a Redis server that the fault
// under test does not touch, so that helper processes and the test write to
// the same one: the oracle that counts stale writes across processes.
type RedisRegister struct{ C *redis.Client }

// Write records a write by writer under fence and reports whether the
// register accepted it.
func (r RedisRegister) Write(ctx context.Context, fence uint64, writer string) (bool, error) {
	n, err := registerScript.Run(ctx, r.C, registerKeys, fence, writer).Int()
	return n == 1, err
}

// Accepted returns the accepted writes, in order, as writer:fence.
func (r RedisRegister) Accepted(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log, err := r.C.LRange(ctx, "reg:log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// Rejected returns how many writes the register refused.
func (r RedisRegister) Rejected(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := r.C.Get(ctx, "reg:rejected").Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// AcceptedAfter returns the writes by writer in log accepted after the first
// accepted write by after.
func AcceptedAfter(log []string, after, writer string) []string {
	var out []string
	seen := false
	for _, e := range log {
		switch {
		case strings.HasPrefix(e, after+":"):
			seen = true
		case seen && strings.HasPrefix(e, writer+":"):
			out = append(out, e)
		}
	}
	return out
}
