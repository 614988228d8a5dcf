package redisstore

import (
	"context"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one script call in a pipeline.
type scriptCall struct {
	script *luaScript
	keys   []string
	args   []any
	idx    []int // the caller's items this call carries
	cmd    *redis.Cmd
}

// runCalls sends every call, and whatever extra adds, in one pipeline (the
// Cluster client splits it per node), and sends the calls the server did
// not know the script of (NOSCRIPT) once more with EVAL in a second one.
// evalshaArgs returns the arguments of an EVALSHA of c, as luaScript.run
// takes them.
func (c *scriptCall) evalshaArgs() []any {
	args := make([]any, 0, 3+len(c.keys)+len(c.args))
	args = append(args, "evalsha", c.script.sha, len(c.keys))
	for _, k := range c.keys {
		args = append(args, k)
	}
	return append(args, c.args...)
}

// Per-call errors are left in each call's cmd.
func (s *Store) runCalls(ctx context.Context, calls []*scriptCall, extra func(redis.Pipeliner)) error {
	pending := calls
	for _, eval := range []bool{false, true} {
		pipe := s.client.Pipeline()
		if !eval && extra != nil {
			extra(pipe)
		}
		for _, c := range pending {
			if eval {
				c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
			} else {
				c.cmd = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			}
		}
		if err := execPipe(ctx, pipe); err != nil {
			return err
		}
		var retry []*scriptCall
		for _, c := range pending {
			if !eval && isNoScript(c.cmd.Err()) {
				retry = append(retry, c)
			}
		}
		if len(retry) == 0 {
			return nil
		}
		pending = retry
	}
	return nil
}

// groupCalls splits items 0..n-1 into calls of script: on a Cluster one
// call per hash slot of key(i), on one node chunks in order; never more
// than scriptChunk items a call. The caller fills in keys and args.
func (s *Store) groupCalls(script *luaScript, n int, key func(i int) string) []*scriptCall {
	var calls []*scriptCall
	add := func(c *scriptCall, i int) *scriptCall {
		if c == nil || len(c.idx) == scriptChunk {
			c = &scriptCall{script: script}
			calls = append(calls, c)
		}
		c.idx = append(c.idx, i)
		return c
	}
	if s.cluster == nil {
		var c *scriptCall
		for i := range n {
			c = add(c, i)
		}
		return calls
	}
	bySlot := make(map[uint16]*scriptCall)
	for i := range n {
		sl := slot(key(i))
		bySlot[sl] = add(bySlot[sl], i)
	}
	return calls
}

// oneCall holds the arguments of one lone script call (acquire.lua,
// release.lua or extend.lua for one item) together with the values they
// hold, in one allocation, where putting each string or large integer in
// an []any would be an allocation of its own; with the bytes of its lock
// key (and fence key) when they fit, and a one-lease result for Renew.
type oneCall struct {
	args [8]any
	strs [4]string
	num  int64
	res  [1]error
	keys [oneCallKeyBytes]byte
}

// oneCallKeyBytes is the room oneCall has for the bytes of its keys: a
// lock key (and fence key) longer than that is allocated on its own.
const oneCallKeyBytes = 96

// lockKeys returns s's lock key and fence key of key, as Store.lockKeys
// does, in c's own bytes when they fit.
func (c *oneCall) lockKeys(s *Store, key string) (lk, fk string) {
	n := len(s.prefix) + len(key) + len("{}:fence")
	if n > len(c.keys) {
		return s.lockKeys(key)
	}
	b := append(append(append(append(c.keys[:0], s.prefix...), '{'), key...), "}:fence"...)
	fk = unsafe.String(&b[0], n) // c.keys is never written again
	return fk[:n-len(":fence")], fk
}

// str stores v as the i-th string and returns it as an argument.
func (c *oneCall) str(i int, v string) any {
	c.strs[i] = v
	return inPlace(any(""), unsafe.Pointer(&c.strs[i]))
}

// int stores v as the call's integer and returns it as an argument.
func (c *oneCall) int(v int64) any {
	c.num = v
	return inPlace(any(int64(0)), unsafe.Pointer(&c.num))
}

// inPlace returns an interface of zero's dynamic type whose value is the
// one at p, which must be of that type and never change afterwards. It is
// what converting *p to an interface does, save the allocation and the
// copy: an interface holding a string or an int64 is a pointer to the type
// and a pointer to the value. Hooks and the Cluster client, which reads a
// command's key from its arguments, see an ordinary string or int64.
func inPlace(zero any, p unsafe.Pointer) any {
	(*[2]unsafe.Pointer)(unsafe.Pointer(&zero))[1] = p
	return zero
}
