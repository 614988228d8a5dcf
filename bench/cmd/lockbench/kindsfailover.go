package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/pgstore"
)

// failover-redis, failover-postgres, failover-etcd: a leader process is
// SIGKILLed and a follower in lockbench's process, campaigning meanwhile,
// measures kill → elected. The leader is lockbench itself, started again
// with -failover-child: one process leads every election of a repeat (one
// per store and implementation, each on a key of its own), so one SIGKILL
// ends them all at once and each follower measures its own store.

// Roles of the leader process: one election each.
const (
	roleRedis        = "redis"
	rolePostgres     = "postgres"
	roleEtcdTasklock = "etcd-tasklock"
	roleEtcdElection = "etcd-election"
)

// failoverEtcdPrefix is the etcdstore prefix of the leader's and the
// follower's Stores: they must share it to see each other's keys.
const failoverEtcdPrefix = "/lockbench/failover/tasklock/"

// failoverStore is one election measured: its kills' results.
type failoverStore struct {
	id, store, impl, role, note string
	addr                        string
	times                       []time.Duration // kill → follower elected
	errs                        []string        // repeats that gave no time
	err                         error           // could not run at all
}

// failoverResult is the whole failover measurement.
type failoverResult struct {
	ttl     time.Duration
	repeats int
	stores  []*failoverStore
}

// failoverImpls lists the elections measured, by -only id.
func failoverImpls(e *kindsEnv) []*failoverStore {
	var addr = func(s *server) string {
		if s == nil {
			return ""
		}
		return s.addr
	}
	pgAddr := ""
	if e.pg != nil {
		pgAddr = e.pg.addr
	}
	return []*failoverStore{
		{id: idFailoverRedis, store: "Redis", impl: "tasklock", role: roleRedis, addr: addr(e.redis),
			note: "Election(key, &ObtainOptions{TTL}).Campaign on a Locker over redisstore.New(client, nil), in both processes; the follower waits as Locker.Obtain does (Redis pub/sub for releases, and an attempt when the holder's lease, as last seen, ends)"},
		{id: idFailoverPostgres, store: "PostgreSQL", impl: "tasklock", role: rolePostgres, addr: pgAddr,
			note: "the same over pgstore.New(pool, &Options{Migrate: true}) (lease mode; LISTEN/NOTIFY for releases)"},
		{id: idFailoverEtcd, store: "etcd", impl: "tasklock", role: roleEtcdTasklock, addr: addr(e.etcd),
			note: "the same over etcdstore.New(client, &Options{SessionTTL: TTL}): the dead leader's key goes with its Store's session lease; the follower waits in etcdstore's queue (a watch on the entry ahead)"},
		{id: idFailoverEtcd, store: "etcd", impl: "concurrency.Election", role: roleEtcdElection, addr: addr(e.etcd),
			note: "concurrency.NewElection(session, prefix).Campaign with a concurrency.Session of WithTTL(TTL) in both processes; the follower waits for the delete of the key before its own"},
	}
}

// runFailover measures every election cfg selects, r.params.repeats times.
func (r *kindsReport) runFailover(ctx context.Context, cfg config) *failoverResult {
	p := r.params
	res := &failoverResult{ttl: p.ttl, repeats: p.repeats}
	var live []*failoverStore
	for _, s := range failoverImpls(r.env) {
		if !cfg.runs(s.id) {
			continue
		}
		res.stores = append(res.stores, s)
		if s.addr == "" {
			s.err = r.env.serverErr(s.role)
			continue
		}
		live = append(live, s)
	}
	if len(live) == 0 {
		return res
	}
	exe, err := os.Executable()
	if err != nil {
		for _, s := range live {
			s.err = fmt.Errorf("lockbench: find my executable to start the leader: %w", err)
		}
		return res
	}
	followers := make([]*follower, len(live))
	defer func() {
		for _, f := range followers {
			if f != nil {
				f.close()
			}
		}
	}()
	for i, s := range live {
		if followers[i], err = newFollower(ctx, s.role, s.addr, p.ttl); err != nil {
			s.err = err
		}
	}
	for rep := range p.repeats {
		var run []*failoverStore
		var fs []*follower
		for i, s := range live {
			if s.err == nil {
				run, fs = append(run, s), append(fs, followers[i])
			}
		}
		if len(run) == 0 {
			break
		}
		times, errs := failoverOnce(ctx, exe, run, fs, p.ttl, rep)
		line := fmt.Sprintf("failover %d/%d:", rep+1, p.repeats)
		for i, s := range run {
			if errs[i] != nil {
				s.errs = append(s.errs, errs[i].Error())
				line += fmt.Sprintf("  %s %s: %v", s.store, s.impl, errs[i])
				continue
			}
			s.times = append(s.times, times[i])
			line += fmt.Sprintf("  %s %s %v", s.store, s.impl, times[i].Round(time.Millisecond))
		}
		progress("%s", line)
	}
	return res
}

// serverErr is why the server of a failover role did not start.
func (e *kindsEnv) serverErr(role string) error {
	name := "etcd"
	switch role {
	case roleRedis:
		name = "redis"
	case rolePostgres:
		name = "postgres"
	}
	if err := e.errs[name]; err != nil {
		return err
	}
	return fmt.Errorf("lockbench: %s was not started", name)
}

// failoverChildSpec is what the leader process is told: its elections.
type failoverChildSpec struct {
	TTL   time.Duration       `json:"ttl"`
	Roles []failoverChildRole `json:"roles"`
}

type failoverChildRole struct {
	Role string `json:"role"`
	Addr string `json:"addr"`
	Key  string `json:"key"`
}

// failoverOnce starts a leader process for the stores' elections, has each
// follower campaign, SIGKILLs the leader at a random point of its renewal
// cycle and returns each follower's kill → elected.
func failoverOnce(ctx context.Context, exe string, stores []*failoverStore, fs []*follower, ttl time.Duration, rep int) ([]time.Duration, []error) {
	times, errs := make([]time.Duration, len(stores)), make([]error, len(stores))
	failAll := func(err error) ([]time.Duration, []error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return times, errs
	}
	spec := failoverChildSpec{TTL: ttl}
	keys := make([]string, len(stores))
	for i, s := range stores {
		keys[i] = fmt.Sprintf("lockbench-failover-%s-%d-%d", s.role, rep, time.Now().UnixNano())
		spec.Roles = append(spec.Roles, failoverChildRole{Role: s.role, Addr: s.addr, Key: keys[i]})
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return failAll(err)
	}
	cmd := exec.Command(exe, "-failover-child", string(b))
	cmd.SysProcAttr = procAttr()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe() // the leader lives until it is killed or this closes
	if err != nil {
		return failAll(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return failAll(err)
	}
	if err := cmd.Start(); err != nil {
		return failAll(fmt.Errorf("lockbench: start the leader: %w", err))
	}
	exited := make(chan struct{})
	elected := make(chan string, len(stores))
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if role, ok := strings.CutPrefix(sc.Text(), "elected "); ok {
				select {
				case elected <- role:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	kill := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}

	// Wait for the leader's elections.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for range stores {
		select {
		case <-elected:
		case <-exited:
			return failAll(fmt.Errorf("lockbench: the leader exited before it was elected: %s", strings.TrimSpace(stderr.String())))
		case <-deadline.C:
			kill()
			return failAll(fmt.Errorf("lockbench: the leader was not elected within 30s: %s", strings.TrimSpace(stderr.String())))
		}
	}

	// The followers campaign; the kill comes when they wait, at a random
	// point of the leader's renewal cycle (every TTL/3).
	type won struct {
		i   int
		at  time.Time
		e   resigner
		err error
	}
	wins := make(chan won, len(stores))
	cctx, cancel := context.WithTimeout(ctx, 3*ttl+10*time.Second)
	defer cancel()
	for i, f := range fs {
		go func() {
			e, err := f.campaign(cctx, keys[i])
			wins <- won{i, time.Now(), e, err}
		}()
	}
	settle := 200*time.Millisecond + mrand.N(ttl/3)
	var early []won
	t := time.NewTimer(settle)
wait:
	for {
		select {
		case w := <-wins:
			early = append(early, w)
		case <-t.C:
			break wait
		}
	}
	killedAt := time.Now()
	kill()
	resigners := make([]resigner, len(stores))
	for _, w := range early {
		resigners[w.i] = w.e
		if w.err != nil {
			errs[w.i] = w.err
		} else {
			errs[w.i] = errors.New("the follower was elected while the leader lived: two leaders")
		}
	}
	for range len(stores) - len(early) {
		w := <-wins
		resigners[w.i] = w.e
		if w.err != nil {
			errs[w.i] = fmt.Errorf("not elected within %v of the kill: %w", (3*ttl + 10*time.Second), w.err)
			continue
		}
		times[w.i] = w.at.Sub(killedAt)
	}
	for i, e := range resigners {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		if err := e.Resign(rctx); err != nil && errs[i] == nil {
			errs[i] = fmt.Errorf("resign: %w", err)
		}
		rcancel()
	}
	return times, errs
}

// follower campaigns in lockbench's process, on one store: campaign
// returns once elected, with what resigns the leadership.
type follower struct {
	campaign func(ctx context.Context, key string) (resigner, error)
	close    func()
}

// resigner is an election won: *tasklock.Election, *concurrency.Election.
type resigner interface {
	Resign(ctx context.Context) error
}

// newFollower opens role's clients on the server at addr, kept for every
// repeat.
func newFollower(ctx context.Context, role, addr string, ttl time.Duration) (*follower, error) {
	if role == roleEtcdElection {
		s, closeAll, err := etcdSession(ctx, addr, &reqCounter{}, ttl)
		if err != nil {
			return nil, err
		}
		return &follower{
			campaign: func(ctx context.Context, key string) (resigner, error) {
				e := concurrency.NewElection(s, "/lockbench/failover/election/"+key)
				return e, e.Campaign(ctx, "follower")
			},
			close: closeAll,
		}, nil
	}
	lk, closeAll, err := failoverLocker(ctx, role, addr, ttl)
	if err != nil {
		return nil, err
	}
	return &follower{
		campaign: func(ctx context.Context, key string) (resigner, error) {
			e := lk.Election(key, &tasklock.ObtainOptions{TTL: ttl})
			_, err := e.Campaign(ctx)
			return e, err
		},
		close: closeAll,
	}, nil
}

// failoverLocker opens a Locker on role's store at addr, as the leader and
// the follower both do.
func failoverLocker(ctx context.Context, role, addr string, ttl time.Duration) (*tasklock.Locker, func(), error) {
	switch role {
	case roleRedis:
		c := newClient(addr)
		lk, err := newLocker(c, nil)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return lk, func() {
			_ = lk.Close()
			_ = c.Close()
		}, nil
	case rolePostgres:
		pool, err := pgxpool.New(ctx, pgURL(addr))
		if err != nil {
			return nil, nil, err
		}
		st, err := pgstore.New(pool, &pgstore.Options{Migrate: true})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		lk, err := tasklock.New(st, nil)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return lk, func() {
			_ = lk.Close()
			pool.Close()
		}, nil
	case roleEtcdTasklock:
		return etcdTasklock(addr, &reqCounter{}, failoverEtcdPrefix, ttl, nil)
	}
	return nil, nil, fmt.Errorf("lockbench: unknown failover role %q", role)
}

// runFailoverChild is lockbench started with -failover-child: the leader.
// It campaigns in every election of spec, prints "elected <role>" for each
// as it wins it, and then keeps leading (renewing) until it is killed or
// its standard input closes.
func runFailoverChild(specJSON string) int {
	var spec failoverChildSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "lockbench: -failover-child: %v\n", err)
		return 2
	}
	ctx := context.Background()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		fail = make(chan error, len(spec.Roles))
	)
	for _, r := range spec.Roles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := leadChild(ctx, r, spec.TTL); err != nil {
				fail <- fmt.Errorf("%s: %w", r.Role, err)
				return
			}
			mu.Lock()
			fmt.Printf("elected %s\n", r.Role)
			mu.Unlock()
		}()
	}
	wg.Wait()
	select {
	case err := <-fail:
		fmt.Fprintf(os.Stderr, "lockbench: leader: %v\n", err)
		return 1
	default:
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// leadChild campaigns in one election and returns once elected, leaving
// the leadership held (and renewed) for the rest of the process's life.
func leadChild(ctx context.Context, r failoverChildRole, ttl time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if r.Role == roleEtcdElection {
		s, _, err := etcdSession(ctx, r.Addr, &reqCounter{}, ttl)
		if err != nil {
			return err
		}
		return concurrency.NewElection(s, "/lockbench/failover/election/"+r.Key).Campaign(cctx, "leader")
	}
	lk, _, err := failoverLocker(ctx, r.Role, r.Addr, ttl)
	if err != nil {
		return err
	}
	_, err = lk.Election(r.Key, &tasklock.ObtainOptions{TTL: ttl}).Campaign(cctx)
	return err
}
