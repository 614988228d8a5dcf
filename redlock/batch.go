package redlock

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Batcher = (*Store)(nil)

// MaxBatch implements driver.Batcher: a batch may carry any number of
// items (each node's redisstore splits them into script calls of 500).
func (s *Store) MaxBatch() int { return math.MaxInt }

// AcquireBatch implements driver.Batcher. It sends each node the whole
// batch as one redisstore AcquireBatch call (one pipelined round trip per
// node), all nodes at once, waiting as Acquire does for the shortest TTL in
// the batch, and then decides every item by Acquire's rules: granted when a
// majority of the nodes granted it and TTL − elapsed − drift > 0, elapsed
// being the time the whole batch took; its fence is the highest of its
// granting nodes' fences, and the counters of the granting nodes below it
// are raised first (one more round trip to those nodes, for every such
// item at once). A node whose call failed counts as failed for every item.
// An item that is not granted is released again on every node (one
// ReleaseBatch per node for all such items) and gets the error Acquire
// would have returned: a *driver.HeldError, a *QuorumError, or an error
// wrapping ErrTooSlow or ErrSplitVote. An item with an invalid key or TTL gets its error
// without being sent. A key named twice goes to its first item. The call as
// a whole fails only when ctx has ended before anything was sent.
func (s *Store) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: acquire %d keys: %w", len(ps), err)
	}
	out := make([]driver.AcquireResult, len(ps))
	valid := make([]int, 0, len(ps))
	for j, p := range ps {
		if out[j].Err = checkAcquire(p); out[j].Err == nil {
			valid = append(valid, j)
		}
	}
	switch len(valid) {
	case 0:
		return out, nil
	case len(ps):
		s.acquire(ctx, ps, out)
		return out, nil
	}
	vps := make([]driver.AcquireParams, len(valid))
	for k, j := range valid {
		vps[k] = ps[j]
	}
	vout := make([]driver.AcquireResult, len(valid))
	s.acquire(ctx, vps, vout)
	for k, j := range valid {
		out[j] = vout[k]
	}
	return out, nil
}

// ReleaseBatch implements driver.Batcher: one redisstore ReleaseBatch call
// per node, all nodes at once, waiting as Release does, and each lease's
// result by Release's rules (nil, driver.ErrNotHeld or a *QuorumError). A
// node whose call failed counts as failed for every lease. The call as a
// whole never fails.
func (s *Store) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	if len(ps) == 0 {
		return []error{}, nil
	}
	return s.release(ctx, ps), nil
}

// acquire asks the node to grant every request in ps: a lone request
// through redisstore's Acquire, several through its AcquireBatch (one
// round trip either way). It returns one result per request, each a grant
// or a *driver.HeldError or that request's own failure; an error when the
// call failed as a whole. A lone request's result goes in one (of length
// 1), which it returns.
func (n *node) acquire(ctx context.Context, ps []driver.AcquireParams, one []driver.AcquireResult) ([]driver.AcquireResult, error) {
	if len(ps) == 1 {
		g, err := n.store.Acquire(ctx, ps[0])
		if err != nil && !isHeld(err) {
			return nil, err
		}
		one[0] = driver.AcquireResult{Grant: g, Err: err}
		return one, nil
	}
	rs, err := n.store.AcquireBatch(ctx, ps)
	if err == nil && len(rs) != len(ps) {
		err = fmt.Errorf("%d results for %d acquires", len(rs), len(ps))
	}
	return rs, err
}

// Flags of a release item (release.lua).
const (
	// publishRelease wakes waiters when the lease is deleted: a lock (or
	// a grant others may have seen as one) ended.
	publishRelease = 1
	// rollBackFence takes back the grant's INCR of the fence counter: the
	// grant never became a lock.
	rollBackFence = 2
)

// releaseItem is one lease to end on a node, and how.
type releaseItem struct {
	p     driver.ReleaseParams
	flags int
}

// releaseChunk is how many items one script call carries, as redisstore's.
const releaseChunk = 500

// releaseOn ends every lease in items on node n with release.lua (see
// releaseCalls and node.release).
func (s *Store) releaseOn(ctx context.Context, n *node, items []releaseItem) ([]error, error) {
	return n.release(ctx, s.releaseCalls(items), len(items))
}

// releaseCalls returns release.lua's calls for items, one per 500; every
// node can be sent the same calls.
func (s *Store) releaseCalls(items []releaseItem) []scriptCall {
	if len(items) == 1 {
		return s.loneReleaseCall(items[0])
	}
	calls := make([]scriptCall, 0, (len(items)+releaseChunk-1)/releaseChunk)
	for lo := 0; lo < len(items); lo += releaseChunk {
		part := items[lo:min(lo+releaseChunk, len(items))]
		c := scriptCall{keys: make([]string, 0, 2*len(part)), args: make([]any, 0, 1+4*len(part))}
		c.args = append(c.args, s.channel)
		for _, it := range part {
			fk := s.prefix + "{" + it.p.Key + "}:fence"
			var keep int64
			if it.p.KeepFor > 0 {
				keep = driver.Units(it.p.KeepFor, time.Millisecond)
			}
			c.keys = append(c.keys, fk[:len(fk)-len(":fence")], fk)
			c.args = append(c.args, it.p.Token, keep, it.flags, it.p.Key)
		}
		c.cmd = evalshaArgs(releaseScript, c.keys, c.args)
		calls = append(calls, c)
	}
	return calls
}

// loneRelease is release.lua's call for one lease: its keys, arguments
// and EVALSHA command in one allocation.
type loneRelease struct {
	calls [1]scriptCall
	keys  [2]string
	strs  [2]string // token and key, boxed in place
	args  [5]any
	cmd   [3 + 2 + 5]any
}

// inPlace returns *p as an interface without copying it to the heap: an
// interface holding a string is a pointer to the type and a pointer to
// the value, and p's string never changes afterwards. Hooks see an
// ordinary string (redisstore's oneCall does the same).
func inPlace(p *string) any {
	v := any("")
	(*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1] = unsafe.Pointer(p)
	return v
}

// releaseSHA is release.lua's SHA1, boxed once.
var releaseSHA any = releaseScript.Hash()

// loneReleaseCall is releaseCalls for one item.
func (s *Store) loneReleaseCall(it releaseItem) []scriptCall {
	r := new(loneRelease)
	fk := s.prefix + "{" + it.p.Key + "}:fence"
	var keep int64
	if it.p.KeepFor > 0 {
		keep = driver.Units(it.p.KeepFor, time.Millisecond)
	}
	r.keys = [2]string{fk[:len(fk)-len(":fence")], fk}
	r.strs = [2]string{it.p.Token, it.p.Key}
	r.args = [5]any{s.channel, inPlace(&r.strs[0]), keep, it.flags, inPlace(&r.strs[1])}
	r.cmd = [10]any{"evalsha", releaseSHA, 2, inPlace(&r.keys[0]), inPlace(&r.keys[1]), r.args[0], r.args[1], r.args[2], r.args[3], r.args[4]}
	r.calls[0] = scriptCall{keys: r.keys[:], args: r.args[:], cmd: r.cmd[:]}
	return r.calls[:]
}

// release runs calls, release.lua's for items leases, on the node in one
// round trip. It returns one result per lease, nil or driver.ErrNotHeld or
// that lease's own failure; an error when the call failed as a whole.
//
// A lone lease's result is one of two shared slices (released, notHeld),
// which callers only read.
func (n *node) release(ctx context.Context, calls []scriptCall, items int) ([]error, error) {
	if items == 1 {
		// Slice, not Int64Slice: the reply as it was read, without a copy.
		rs, err := n.runOne(ctx, releaseScript, &calls[0]).Slice()
		switch {
		case err != nil:
			return nil, err
		case len(rs) != 1:
			return nil, fmt.Errorf("%d results for 1 release", len(rs))
		}
		switch r, ok := rs[0].(int64); {
		case !ok:
			return nil, fmt.Errorf("release result %v (%T), want an integer", rs[0], rs[0])
		case r == 1:
			return released, nil
		}
		return notHeld, nil
	}
	cmds, err := n.runScript(ctx, releaseScript, calls)
	if err != nil {
		return nil, err
	}
	out := make([]error, 0, items)
	for k, cmd := range cmds {
		want := min(releaseChunk, items-k*releaseChunk)
		rs, err := cmd.Int64Slice()
		if err == nil && len(rs) != want {
			err = fmt.Errorf("%d results for %d releases", len(rs), want)
		}
		if err != nil {
			if len(cmds) == 1 {
				return nil, err
			}
			for range want {
				out = append(out, err)
			}
			continue
		}
		for _, r := range rs {
			if r == 1 {
				out = append(out, nil)
			} else {
				out = append(out, driver.ErrNotHeld)
			}
		}
	}
	return out, nil
}

// released and notHeld are node.release's results for a lone lease.
var (
	released = []error{nil}
	notHeld  = []error{driver.ErrNotHeld}
)

// scriptCall is the keys and arguments of one script call.
type scriptCall struct {
	keys []string
	args []any
	// cmd is the whole EVALSHA command, when made once for every node (a
	// release's calls are the same on each): go-redis only reads a
	// command's arguments, so the nodes' calls may share it. Nil: runScript
	// makes it.
	cmd []any
}

// evalshaArgs returns the arguments of an EVALSHA of script with keys and
// args, as go-redis's EvalSha builds them.
func evalshaArgs(script *redis.Script, keys []string, args []any) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// runScript runs script once per call in calls on the node, in one round
// trip: one call alone, several in a pipeline (EVALSHA, and EVAL again for
// the calls the node did not have the script for). It returns the
// commands, each with its own reply or error, or an error when the round
// trip failed without a reply to any of them.
func (n *node) runScript(ctx context.Context, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	if len(calls) == 1 {
		return []*redis.Cmd{n.runOne(ctx, script, &calls[0])}, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls))
	for k := range pending {
		pending[k] = k
	}
	for _, eval := range []bool{false, true} {
		pipe := n.client.Pipeline()
		for _, k := range pending {
			if eval {
				cmds[k] = script.Eval(ctx, pipe, calls[k].keys, calls[k].args...)
			} else {
				cmds[k] = script.EvalSha(ctx, pipe, calls[k].keys, calls[k].args...)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !anyErr(cmds, pending) {
			return nil, err // no reply to any command
		}
		var retry []int
		for _, k := range pending {
			if !eval && redis.HasErrorPrefix(cmds[k].Err(), "NOSCRIPT") {
				retry = append(retry, k)
			}
		}
		if len(retry) == 0 {
			break
		}
		pending = retry
	}
	return cmds, nil
}

// runOne runs script for c on the node, as one command (EVAL again when
// the node did not have the script), and returns it with its reply or
// error.
func (n *node) runOne(ctx context.Context, script *redis.Script, c *scriptCall) *redis.Cmd {
	args := c.cmd
	if args == nil {
		args = evalshaArgs(script, c.keys, c.args)
	}
	cmd := n.client.Do(ctx, args...)
	// redis.HasErrorPrefix allocates even for a nil error.
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = script.Eval(ctx, n.client, c.keys, c.args...)
	}
	return cmd
}

// raise runs raise.lua on the node for every fence counter in counters
// with the fence of the same index in fences, in one round trip (see
// runScript; raising is idempotent). It returns one error per counter, and
// the first of them.
func (n *node) raise(ctx context.Context, counters, fences []string) ([]error, error) {
	calls := make([]scriptCall, len(counters))
	for k := range calls {
		calls[k] = scriptCall{keys: counters[k : k+1], args: []any{fences[k]}}
	}
	errs := make([]error, len(counters))
	cmds, err := n.runScript(ctx, raiseScript, calls)
	if err != nil {
		for k := range errs {
			errs[k] = err
		}
		return errs, err
	}
	var first error
	for k, c := range cmds {
		if errs[k] = c.Err(); first == nil {
			first = errs[k]
		}
	}
	return errs, first
}

// anyErr reports whether any of the commands cmds[k], k in ks, failed.
func anyErr(cmds []*redis.Cmd, ks []int) bool {
	for _, k := range ks {
		if cmds[k].Err() != nil {
			return true
		}
	}
	return false
}
