package testserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// registerScript is fence.Register's rule kept in Redis: a write is
// accepted only when its fence is at least the highest accepted, and every
// accepted write is logged as writer:fence.
const registerScript = `
local h = tonumber(redis.call('GET', KEYS[1]) or '0')
local f = tonumber(ARGV[1])
if f < h then redis.call('INCR', KEYS[2]) return 0 end
redis.call('SET', KEYS[1], f)
redis.call('RPUSH', KEYS[3], ARGV[2] .. ':' .. ARGV[1])
return 1`

var registerKeys = []string{"reg:highest", "reg:rejected", "reg:log"}

// RedisRegister is a fenced register kept in the Redis server at Addr, one
// that the fault under test does not touch, so that helper processes and the
// test write to the same one: the oracle that counts stale writes across
// processes. It speaks RESP itself (a connection per call), so that the
// tests that use it need no Redis client.
type RedisRegister struct{ Addr string }

// Write records a write by writer under fence and reports whether the
// register accepted it.
func (r RedisRegister) Write(ctx context.Context, fence uint64, writer string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	args := append([]string{"EVAL", registerScript, strconv.Itoa(len(registerKeys))}, registerKeys...)
	reply, err := respDo(r.Addr, append(args, strconv.FormatUint(fence, 10), writer)...)
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("testserver: register: EVAL replied %v", reply)
	}
	return n == 1, nil
}

// Accepted returns the accepted writes, in order, as writer:fence.
func (r RedisRegister) Accepted(t testing.TB) []string {
	t.Helper()
	reply, err := respDo(r.Addr, "LRANGE", "reg:log", "0", "-1")
	if err != nil {
		t.Fatal(err)
	}
	items, _ := reply.([]any)
	log := make([]string, 0, len(items))
	for _, it := range items {
		s, _ := it.(string)
		log = append(log, s)
	}
	return log
}

// Rejected returns how many writes the register refused.
func (r RedisRegister) Rejected(t testing.TB) int {
	t.Helper()
	reply, err := respDo(r.Addr, "GET", "reg:rejected")
	if err != nil {
		t.Fatal(err)
	}
	if reply == nil {
		return 0
	}
	n, err := strconv.Atoi(fmt.Sprint(reply))
	if err != nil {
		t.Fatalf("testserver: register: reg:rejected = %v", reply)
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
