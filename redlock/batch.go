package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"

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
// call failed as a whole.
func (n *node) acquire(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	if len(ps) == 1 {
		g, err := n.store.Acquire(ctx, ps[0])
		if err != nil && !isHeld(err) {
			return nil, err
		}
		return []driver.AcquireResult{{Grant: g, Err: err}}, nil
	}
	rs, err := n.store.AcquireBatch(ctx, ps)
	if err == nil && len(rs) != len(ps) {
		err = fmt.Errorf("%d results for %d acquires", len(rs), len(ps))
	}
	return rs, err
}

// release releases every lease in ps on the node: a lone lease through
// redisstore's Release, several through its ReleaseBatch (one round trip
// either way). It returns one result per lease, nil or driver.ErrNotHeld or
// that lease's own failure; an error when the call failed as a whole.
func (n *node) release(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	if len(ps) == 1 {
		err := n.store.Release(ctx, ps[0])
		if err != nil && !errors.Is(err, driver.ErrNotHeld) {
			return nil, err
		}
		return []error{err}, nil
	}
	errs, err := n.store.ReleaseBatch(ctx, ps)
	if err == nil && len(errs) != len(ps) {
		err = fmt.Errorf("%d results for %d releases", len(errs), len(ps))
	}
	return errs, err
}

// raise runs raise.lua on the node for every fence counter in counters
// with the fence of the same index in fences, in one round trip: one
// script call for a lone counter, a pipeline for several (EVALSHA, and
// EVAL again for the calls the node did not have the script for; raising
// is idempotent). It returns one error per counter, and the first of them.
func (n *node) raise(ctx context.Context, counters, fences []string) ([]error, error) {
	if len(counters) == 1 {
		err := raiseScript.Run(ctx, n.client, counters, fences[0]).Err()
		return []error{err}, err
	}
	cmds := make([]*redis.Cmd, len(counters))
	pending := make([]int, len(counters))
	for k := range pending {
		pending[k] = k
	}
	for _, eval := range []bool{false, true} {
		pipe := n.client.Pipeline()
		for _, k := range pending {
			if eval {
				cmds[k] = raiseScript.Eval(ctx, pipe, counters[k:k+1], fences[k])
			} else {
				cmds[k] = raiseScript.EvalSha(ctx, pipe, counters[k:k+1], fences[k])
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !anyErr(cmds, pending) {
			// The pipeline failed without a reply to any command.
			errs := make([]error, len(counters))
			for k := range errs {
				errs[k] = err
			}
			return errs, err
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
	errs := make([]error, len(counters))
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
