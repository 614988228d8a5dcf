package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fanOut's rules, on nodes whose calls the test answers itself: every
// answer in time is kept; a silent minority costs the node timeout and its
// answer goes to late; a slow majority is waited for past the node timeout
// until a quorum of definite answers is in; the limit and ctx end the wait.
func TestFanOut(t *testing.T) {
	nodes := []*node{{addr: "a"}, {addr: "b"}, {addr: "c"}}
	index := func(n *node) int {
		for i, m := range nodes {
			if m == n {
				return i
			}
		}
		panic("unknown node")
	}
	ok := func(v int, err error) bool { return err == nil }
	errNode := errors.New("node failed")

	t.Run("AllAnswer", func(t *testing.T) {
		w := wait{nodeTimeout: time.Hour, limit: time.Hour, quorum: 2}
		rs := fanOut(context.Background(), context.Background(), w, nodes, func(_ context.Context, n *node) (int, error) {
			if i := index(n); i != 1 {
				return 10 + i, nil
			}
			return 0, errNode
		}, ok, nil, nil)
		for i, r := range rs {
			if !r.answered {
				t.Errorf("node %d: no answer", i)
			}
		}
		if rs[0].val != 10 || rs[2].val != 12 || rs[0].err != nil || !errors.Is(rs[1].err, errNode) {
			t.Errorf("results %+v", rs)
		}
	})

	t.Run("SilentMinority", func(t *testing.T) {
		release := make(chan struct{})
		lateGot := make(chan int, 1)
		w := wait{nodeTimeout: 20 * time.Millisecond, limit: time.Hour, quorum: 2}
		start := time.Now()
		rs := fanOut(context.Background(), context.Background(), w, nodes, func(_ context.Context, n *node) (int, error) {
			if i := index(n); i == 2 {
				<-release
				return 42, nil
			}
			return 1, nil
		}, ok, nil, func(i, v int, err error) { lateGot <- v })
		if d := time.Since(start); d < w.nodeTimeout {
			t.Errorf("returned after %v, before the node timeout", d)
		}
		if !rs[0].answered || !rs[1].answered || rs[2].answered || !errors.Is(rs[2].err, context.DeadlineExceeded) {
			t.Errorf("results %+v, want the third without an answer, DeadlineExceeded", rs)
		}
		close(release)
		if v := <-lateGot; v != 42 {
			t.Errorf("late answer %d, want 42", v)
		}
	})

	t.Run("SlowMajority", func(t *testing.T) {
		second := make(chan struct{})
		silent := make(chan struct{})
		defer close(silent)
		returned := make(chan []result[int])
		w := wait{nodeTimeout: time.Millisecond, limit: time.Hour, quorum: 2}
		go func() {
			returned <- fanOut(context.Background(), context.Background(), w, nodes, func(_ context.Context, n *node) (int, error) {
				switch index(n) {
				case 0:
					return 0, nil
				case 1:
					<-second
					return 1, nil
				}
				<-silent
				return 2, nil
			}, ok, nil, nil)
		}()
		// Well past the node timeout, one definite answer is not a
		// quorum: fanOut waits on.
		select {
		case rs := <-returned:
			t.Fatalf("returned with one definite answer: %+v", rs)
		case <-time.After(50 * time.Millisecond):
		}
		close(second)
		rs := <-returned
		if !rs[0].answered || !rs[1].answered || rs[2].answered || !errors.Is(rs[2].err, context.DeadlineExceeded) {
			t.Errorf("results %+v", rs)
		}
	})

	t.Run("FailuresAreNotAQuorum", func(t *testing.T) {
		w := wait{nodeTimeout: time.Millisecond, limit: 30 * time.Millisecond, quorum: 2}
		calls, cancelCalls := context.WithCancel(context.Background())
		defer cancelCalls()
		rs := fanOut(context.Background(), calls, w, nodes, func(ctx context.Context, n *node) (int, error) {
			if index(n) == 0 {
				return 0, errNode
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}, ok, nil, nil)
		if !errors.Is(rs[0].err, errNode) || rs[1].answered || !errors.Is(rs[1].err, context.DeadlineExceeded) {
			t.Errorf("results %+v, want the limit's DeadlineExceeded for the silent nodes", rs)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls, cancelCalls := context.WithCancel(context.Background())
		defer cancelCalls()
		started := make(chan struct{}, len(nodes))
		returned := make(chan []result[int])
		go func() {
			returned <- fanOut(ctx, calls, wait{nodeTimeout: time.Hour, limit: time.Hour, quorum: 2}, nodes, func(ctx context.Context, n *node) (int, error) {
				started <- struct{}{}
				<-ctx.Done()
				return 0, ctx.Err()
			}, ok, nil, nil)
		}()
		for range nodes {
			<-started
		}
		cancel()
		rs := <-returned
		for i, r := range rs {
			if r.answered || !errors.Is(r.err, context.Canceled) {
				t.Errorf("node %d: %+v, want no answer, Canceled", i, r)
			}
		}
	})
}
