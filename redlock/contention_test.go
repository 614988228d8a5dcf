package redlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redisstore"
)

// Contention tests: several processes (each its own clients, Store and
// Locker) obtain one key over and over. What a handoff costs is read from
// the servers' own counters (INFO commandstats), not from the clients.

// contenders is how many processes contend, as in issue 16.
const contenders = 5

// hold is how long each holder works under the lock.
const hold = 10 * time.Millisecond

// section is one critical section, in monotonic time since the run began.
type section struct {
	start, end time.Duration
	fence      uint64
	who        int
}

// contend runs contenders goroutines, each obtaining key through its own
// Locker from lockers(i) and releasing it at once, until want acquisitions
// in all, and returns the critical sections in the order they began.
func contend(t *testing.T, key string, want int, lockers func(i int) *tasklock.Locker) []section {
	t.Helper()
	lks := make([]*tasklock.Locker, contenders)
	for i := range lks {
		lks[i] = lockers(i)
	}
	// No deadline (Obtain would then give up on store errors it should
	// report); a watchdog ends a run that hangs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchdog := time.AfterFunc(2*time.Minute, cancel)
	defer watchdog.Stop()

	base := time.Now()
	var (
		mu   sync.Mutex
		log  []section
		wg   sync.WaitGroup
		errs = make(chan error, contenders)
	)
	for i, lk := range lks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := lk.Obtain(ctx, key, nil)
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("contender %d: %w", i, err)
						cancel()
					}
					return
				}
				s := section{start: time.Since(base), fence: l.Fence(), who: i}
				time.Sleep(hold) // the work done under the lock, not synchronisation
				s.end = time.Since(base)
				if err := l.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("contender %d: release: %w", i, err)
					cancel()
					return
				}
				mu.Lock()
				log = append(log, s)
				done := len(log) >= want
				mu.Unlock()
				if done {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(log) < want {
		t.Fatalf("%d acquisitions within the watchdog's 2 minutes, want %d", len(log), want)
	}
	slices.SortFunc(log, func(a, b section) int { return int(a.start - b.start) })
	return log
}

// checkExclusive fails when two critical sections of log overlap.
func checkExclusive(t *testing.T, log []section) {
	t.Helper()
	for i := 1; i < len(log); i++ {
		if prev, s := log[i-1], log[i]; s.start < prev.end {
			t.Fatalf("overlap: contender %d held the lock from %v to %v, contender %d from %v", prev.who, prev.start, prev.end, s.who, s.start)
		}
	}
}

// scriptCalls returns the script calls (EVALSHA and EVAL) every server in
// addrs has carried out so far, by its INFO commandstats.
func scriptCalls(t *testing.T, addrs []string) []int64 {
	t.Helper()
	out := make([]int64, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.Info(ctxT(t), "commandstats").Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("INFO commandstats of %s: %v", a, err)
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			name, stats, ok := strings.Cut(sc.Text(), ":")
			if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
				continue
			}
			for _, f := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					if err != nil {
						t.Fatalf("%s: %q: %v", a, sc.Text(), err)
					}
					out[i] += n
				}
			}
		}
	}
	return out
}

// perAcquisition returns the script calls of each server between before
// and after, per acquisition.
func perAcquisition(before, after []int64, acquisitions int) []float64 {
	out := make([]float64, len(before))
	for i := range before {
		out[i] = float64(after[i]-before[i]) / float64(acquisitions)
	}
	return out
}

// What contention may cost on every node, per acquisition, in script
// calls. One Redis costs a release and one attempt per waiter a release
// wakes: about contenders + 1 per acquisition. RedLock may cost each node
// at most maxVsOneRedis times that (a vote that splits costs its
// contenders one more attempt and one give-back each); before the release
// stopped publishing give-backs it cost 5–6× with these holds.
const maxVsOneRedis = 2

// A contended key costs every node O(1) script calls per waiter and
// handoff, within maxVsOneRedis of one Redis doing the same; each grant's
// fence is one more than the one before; critical sections never overlap.
func TestContentionNoStorm(t *testing.T) {
	srvs := startNodes(t, 3)
	addrs := addrsOf(srvs)
	const want = 150

	// One Redis (the first node, its own prefix) doing the same.
	onePrefix := freshPrefix()
	before := scriptCalls(t, addrs[:1])
	log := contend(t, "k", want, func(i int) *tasklock.Locker {
		st, err := redisstore.New(closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: addrs[0]})), &redisstore.Options{Prefix: onePrefix})
		if err != nil {
			t.Fatal(err)
		}
		return newLocker(t, st, fmt.Sprintf("one-%d", i))
	})
	one := perAcquisition(before, scriptCalls(t, addrs[:1]), len(log))[0]
	checkExclusive(t, log)

	prefix := freshPrefix()
	before = scriptCalls(t, addrs)
	log = contend(t, "k", want, func(i int) *tasklock.Locker {
		return newLocker(t, newStore(t, addrs, &Options{Prefix: prefix}), fmt.Sprintf("rl-%d", i))
	})
	per := perAcquisition(before, scriptCalls(t, addrs), len(log))
	checkExclusive(t, log)
	t.Logf("%d contenders, %d acquisitions: script calls per acquisition: one Redis %.1f, RedLock per node %.1f", contenders, len(log), one, per)
	for i, p := range per {
		if p > maxVsOneRedis*one {
			t.Errorf("node %d: %.1f script calls per acquisition, more than %d× one Redis's %.1f", i, p, maxVsOneRedis, one)
		}
	}
	for i := 1; i < len(log); i++ {
		if prev, s := log[i-1], log[i]; s.fence != prev.fence+1 {
			t.Errorf("grant %d's fence %d follows %d: want one more", i, s.fence, prev.fence)
		}
	}
}

// A lock's release wakes waiters once, when a majority of the nodes have
// published its deletion; a plain key (ForceRelease) wakes at once.
func TestReleasesWakeOnce(t *testing.T) {
	var woken []string
	r := newReleases(3, 2, func(key string) { woken = append(woken, key) })
	want := func(step string, keys ...string) {
		t.Helper()
		if !slices.Equal(woken, keys) {
			t.Fatalf("%s: woken for %q, want %q", step, woken, keys)
		}
	}
	r.from(0, "}t1:k")
	want("one node of three")
	r.from(2, "}t1:k")
	want("a majority", "k")
	r.from(1, "}t1:k")
	want("the last node", "k")
	r.from(1, "}t2:k")
	r.from(1, "}t3:k") // another lease's deletion does not count for t2's
	want("two leases on one node", "k")
	r.from(0, "}t2:k")
	want("t2 on a majority", "k", "k")
	r.from(0, "}t2:k") // node 0 again: t2's lease released anew
	r.from(2, "}t2:k")
	want("t2 again", "k", "k", "k")
	r.from(1, "plain")
	want("a plain key", "k", "k", "k", "plain")
	r.from(1, "}bad")
	want("no key", "k", "k", "k", "plain")
}

// A split vote's give-back wakes nobody and takes its fence back: the
// next grant's fence is one more than the last grant's, however many votes
// split in between. A majority refused as too late is given back with a
// wake-up: others saw it as a holder.
func TestGiveBackWakesNobody(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	tok := token()
	last := mustAcquire(t, s, "k", tok, "a", 10*time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}
	sub := s.nodes[0].client.Subscribe(ctxT(t), s.prefix+"released")
	defer sub.Close()
	if _, err := sub.Receive(ctxT(t)); err != nil { // the confirmation
		t.Fatal(err)
	}

	// Nodes 1 and 2 held by two other owners (leases written as they
	// stand, leaving the counters alone): node 0's grant is given back.
	for i, owner := range map[int]string{1: "x", 2: "y"} {
		if err := s.nodes[i].client.Set(ctxT(t), s.prefix+"{k}", owner+":1:"+owner, 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := counter(t, s, 0, "k")
	for range 5 {
		if _, err := acquire(t, s, "k", token(), "z", 10*time.Second); !errors.Is(err, ErrSplitVote) {
			t.Fatalf("Acquire = %v, want ErrSplitVote", err)
		}
	}
	if c := counter(t, s, 0, "k"); c != before || onNode(t, s, 0, "k") {
		t.Fatalf("after 5 split votes node 0's counter is %d (was %d), lease left: %v", c, before, onNode(t, s, 0, "k"))
	}
	// Nothing was published before this.
	if err := s.nodes[0].client.Publish(ctxT(t), s.prefix+"released", "mark").Err(); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.ReceiveMessage(ctxT(t)); err != nil || m.Payload != "mark" {
		t.Fatalf("first message after the split votes: %v, %v; want the mark", m, err)
	}

	for i := 1; i <= 2; i++ {
		if err := s.nodes[i].store.ForceRelease(ctxT(t), "k"); err != nil {
			t.Fatal(err)
		}
	}
	if f := mustAcquire(t, s, "k", token(), "z", 10*time.Second); f != last+1 {
		t.Fatalf("the grant after the split votes has fence %d, want %d", f, last+1)
	}

	// Too late: a majority granted, and the give-back wakes waiters.
	s2 := newStore(t, addrsOf(startNodes(t, 3)), patient)
	sub2 := s2.nodes[0].client.Subscribe(ctxT(t), s2.prefix+"released")
	defer sub2.Close()
	if _, err := sub2.Receive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	s2.now = func() time.Time {
		if calls.Add(1) == 1 {
			return time.Now()
		}
		return time.Now().Add(time.Hour)
	}
	tok = token()
	if _, err := acquire(t, s2, "k", tok, "a", time.Second); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("Acquire = %v, want ErrTooSlow", err)
	}
	if m, err := sub2.ReceiveMessage(ctxT(t)); err != nil || m.Payload != "}"+tok+":k" {
		t.Fatalf("after a majority's give-back: %v, %v; want its release", m, err)
	}
}

// A lone request that split the vote while holding the first node keeps
// its grants and asks again after a pause, in which the other contenders
// give theirs back: it wins in one more round. One that does not hold the
// first node gives back at once; a keeper whose contenders hold on gives
// back after keeperRounds, taking its fence back.
func TestSplitVoteKeeper(t *testing.T) {
	t.Parallel()
	s := newStore(t, addrsOf(startNodes(t, 3)), patient)
	lk := s.prefix + "{k}"
	hold := func(nodes ...int) {
		t.Helper()
		for _, i := range nodes {
			owner := fmt.Sprintf("other%d", i)
			if err := s.nodes[i].client.Set(ctxT(t), lk, owner+":1:"+owner, 10*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	giveBack := func(nodes ...int) {
		t.Helper()
		for _, i := range nodes {
			if err := s.nodes[i].client.Del(ctxT(t), lk).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pauses := 0

	// The keeper: the others give back during its pause.
	hold(1, 2)
	s.pause = func(time.Duration) { pauses++; giveBack(1, 2) }
	tok := token()
	f, err := acquire(t, s, "k", tok, "z", 10*time.Second)
	if err != nil || pauses != 1 {
		t.Fatalf("keeper: Acquire = %d, %v after %d pauses, want a grant after 1", f, err, pauses)
	}
	if f != 1 {
		t.Fatalf("keeper: fence %d, want 1", f)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
		t.Fatal(err)
	}

	// Not the keeper: node 0 is another's.
	hold(0, 2)
	pauses = 0
	if _, err := acquire(t, s, "k", token(), "z", 10*time.Second); !errors.Is(err, ErrSplitVote) || pauses != 0 {
		t.Fatalf("not the keeper: Acquire = %v after %d pauses, want ErrSplitVote at once", err, pauses)
	}
	if onNode(t, s, 1, "k") || counter(t, s, 1, "k") != 1 {
		t.Fatalf("not the keeper: node 1 still has the grant, or its counter is %d, not 1", counter(t, s, 1, "k"))
	}
	giveBack(0, 2)

	// A keeper whose contenders hold on.
	hold(1, 2)
	s.pause = func(time.Duration) { pauses++ }
	if _, err := acquire(t, s, "k", token(), "z", 10*time.Second); !errors.Is(err, ErrSplitVote) || pauses != keeperRounds {
		t.Fatalf("keeper in vain: Acquire = %v after %d pauses, want ErrSplitVote after %d", err, pauses, keeperRounds)
	}
	if onNode(t, s, 0, "k") || counter(t, s, 0, "k") != 1 {
		t.Fatalf("keeper in vain: node 0 still has the grant, or its counter is %d, not 1", counter(t, s, 0, "k"))
	}
}
