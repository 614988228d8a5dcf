package redlock

import (
	"context"
	"sync"
)

// Health is what Check found: how many nodes the store has, how many must
// agree, and the nodes that did not answer.
type Health struct {
	Nodes  int          // how many nodes the store has
	Quorum int          // how many of them a lock call needs: Nodes/2 + 1
	Failed []*NodeError // the nodes that did not answer PING, and why; none when all did
}

// Spare is how many more nodes may fail before no lock call can reach a
// quorum: 0 means the next node lost stops every lock.
func (h Health) Spare() int { return max(h.Nodes-len(h.Failed)-h.Quorum, 0) }

// Check PINGs every node at once, each until ctx ends, and reports the
// nodes that did not answer. A lock call that reaches a quorum succeeds
// and says nothing of the minority that failed it, so an operator cannot
// tell from the locks alone that a node is down or refuses the password,
// and that fewer failures now stop every lock: Check is how a tool tells
// (tasklock locks list and show warn with it).
func (s *Store) Check(ctx context.Context) Health {
	errs := make([]error, len(s.nodes))
	var wg sync.WaitGroup
	for i, n := range s.nodes {
		wg.Go(func() { errs[i] = n.client.Ping(ctx).Err() })
	}
	wg.Wait()
	h := Health{Nodes: len(s.nodes), Quorum: s.quorum}
	for i, err := range errs {
		if err != nil {
			h.Failed = append(h.Failed, &NodeError{Addr: s.nodes[i].addr, Err: err})
		}
	}
	return h
}
