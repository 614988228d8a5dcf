package redisstore

import (
	"context"
	"fmt"
	"math"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.KindBatcher = (*Store)(nil)

// BatchesKinds implements driver.KindBatcher: a batch carries read-write
// locks and semaphores as one script call each, in the batch's pipeline.
func (s *Store) BatchesKinds() bool { return s.waitReplicas == 0 }

// MaxBatch implements driver.Batcher. With Options.WaitReplicas it is 1:
// WAIT confirms the writes of one connection, so each acquire goes alone.
// Otherwise a batch may carry any number of items, split into script calls
// of at most 500.
func (s *Store) MaxBatch() int {
	if s.waitReplicas > 0 {
		return 1
	}
	return math.MaxInt
}

// AcquireBatch implements driver.Batcher. Like Renew it runs acquire.lua
// once per Cluster hash slot (or per 500 items on one node), all in one
// pipeline: one round trip per node, and one script call, not one per key.
// A key named twice goes to its first item. With Options.WaitReplicas each
// item is an Acquire of its own, run concurrently (see MaxBatch).
func (s *Store) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	if s.waitReplicas > 0 {
		return driver.AcquireEach(ctx, ps, s.Acquire), nil
	}
	res := make([]driver.AcquireResult, len(ps))
	valid := make([]int, 0, len(ps)) // the items acquire.lua gets
	var kinds []*scriptCall          // one call of kinds_acquire.lua per other item
	for i, p := range ps {
		if p.Mode != driver.ModeMutex {
			mode, err := checkKind(p)
			if err != nil {
				res[i].Err = err
				continue
			}
			c := s.kindsAcquireCall(p, mode)
			c.idx = []int{i}
			kinds = append(kinds, c)
			continue
		}
		if res[i].Err = checkAcquire(p); res[i].Err == nil {
			valid = append(valid, i)
		}
	}
	calls := s.groupCalls(acquireScript, len(valid), func(j int) string { return s.lockKey(ps[valid[j]].Key) })
	for _, c := range calls {
		c.keys = make([]string, 0, 2*len(c.idx))
		c.args = make([]any, 0, 3*len(c.idx))
		for k, j := range c.idx {
			i := valid[j]
			c.idx[k] = i
			lk, fk := s.lockKeys(ps[i].Key)
			c.keys = append(c.keys, lk, fk)
			c.args = append(c.args, ps[i].Token, millis(ps[i].TTL), ps[i].Owner)
		}
	}
	if err := s.runCalls(ctx, append(calls, kinds...), nil); err != nil {
		return nil, fmt.Errorf("redisstore: acquire %d keys: %w", len(ps), err)
	}
	for _, c := range kinds {
		i := c.idx[0]
		r, err := c.cmd.Result()
		if err != nil {
			res[i].Err = fmt.Errorf("redisstore: acquire %q: %w", ps[i].Key, err)
			continue
		}
		res[i].Grant, res[i].Err = kindsReply(ps[i].Key, ps[i].Limit, r)
	}
	for _, c := range calls {
		replies, err := callReplies(c)
		for k, i := range c.idx {
			if err != nil {
				res[i].Err = fmt.Errorf("redisstore: acquire %q: %w", ps[i].Key, err)
				continue
			}
			res[i].Grant, res[i].Err = acquireReply(ps[i].Key, replies[k])
		}
	}
	return res, nil
}

// ReleaseBatch implements driver.Batcher: release.lua once per Cluster hash
// slot (or per 500 items on one node), all in one pipeline.
func (s *Store) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	errs := make([]error, len(ps))
	mutexes := make([]int, 0, len(ps))
	var kinds []*scriptCall // as in AcquireBatch
	for i, p := range ps {
		if p.Mode != driver.ModeMutex {
			c, err := s.kindsReleaseCall(p)
			if err != nil {
				errs[i] = err
				continue
			}
			c.idx = []int{i}
			kinds = append(kinds, c)
			continue
		}
		mutexes = append(mutexes, i)
	}
	calls := s.groupCalls(releaseScript, len(mutexes), func(j int) string { return s.lockKey(ps[mutexes[j]].Key) })
	for _, c := range calls {
		c.keys = make([]string, 0, len(c.idx))
		c.args = make([]any, 0, 4*len(c.idx))
		for k, j := range c.idx {
			i := mutexes[j]
			c.idx[k] = i
			c.keys = append(c.keys, s.lockKey(ps[i].Key))
			c.args = s.appendReleaseArgv(c.args, ps[i])
		}
	}
	if err := s.runCalls(ctx, append(calls, kinds...), nil); err != nil {
		return nil, fmt.Errorf("redisstore: release %d keys: %w", len(ps), err)
	}
	for _, c := range kinds {
		n, err := c.cmd.Int64()
		errs[c.idx[0]] = releaseReply(ps[c.idx[0]].Key, n, err)
	}
	for _, c := range calls {
		replies, err := callReplies(c)
		for k, i := range c.idx {
			var n int64
			if err == nil {
				n, _ = replies[k].(int64)
			}
			errs[i] = releaseReply(ps[i].Key, n, err)
		}
	}
	return errs, nil
}

// callReplies returns the per-item replies of a call of acquire.lua,
// release.lua or renew.lua: the script returns a lone item's reply as it is, and the
// replies of several as an array.
func callReplies(c *scriptCall) ([]any, error) {
	r, err := c.cmd.Result()
	if err != nil {
		return nil, err
	}
	if len(c.idx) == 1 {
		return []any{r}, nil
	}
	rs, ok := r.([]any)
	if !ok || len(rs) != len(c.idx) {
		return nil, fmt.Errorf("unexpected reply %v for %d items", r, len(c.idx))
	}
	return rs, nil
}
