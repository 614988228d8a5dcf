package testserver_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func ping(addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
		MaxRetries: -1, PoolSize: 1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestRedisRestartKeepsPortAndDir(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	addr, pid := r.Addr(), r.Pid()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port", addr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	r.Restart(t)
	t.Logf("restart took %v", time.Since(start))
	if r.Addr() != addr {
		t.Fatalf("Addr() after restart = %q, want %q", r.Addr(), addr)
	}
	if r.Pid() == pid {
		t.Fatalf("Pid() unchanged after restart: %d", pid)
	}
	if err := ping(addr, time.Second); err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	// --appendonly yes from WithRedisArgs overrode the default, in the same dir.
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("GET k after restart = %q, %v; want v (AOF in %s)", got, err, r.Dir())
	}

	r.Kill(t)
	if err := ping(addr, 200*time.Millisecond); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	r.Restart(t) // from a killed server
	if err := ping(addr, time.Second); err != nil {
		t.Fatalf("PING after Kill+Restart: %v", err)
	}
}

func TestRedisNoPersistenceByDefault(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["save"] != "" || cfg["appendonly"] != "no" || cfg["bind"] != "127.0.0.1" {
		t.Fatalf("save=%q appendonly=%q bind=%q", cfg["save"], cfg["appendonly"], cfg["bind"])
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Restart(t)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0", n, err)
	}
}

func TestRedisStopCont(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	r.Stop(t)
	if err := ping(r.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("PING to a stopped server succeeded")
	}
	r.Cont(t)
	if err := ping(r.Addr(), time.Second); err != nil {
		t.Fatalf("PING after Cont: %v", err)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := testserver.StartSentinel(t)
	t.Logf("sentinel deployment ready in %v", time.Since(start))
	if s.MasterName() != "mymaster" || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("MasterName %q, SentinelAddrs %v", s.MasterName(), s.SentinelAddrs())
	}
	old := s.MasterAddr(t)
	if old != s.Nodes()[0].Addr() {
		t.Fatalf("MasterAddr %s, want first node %s", old, s.Nodes()[0].Addr())
	}

	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs(),
	})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Make sure the write reached the replica before failing over.
	if err := c.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	newMaster := s.Failover(t)
	t.Logf("failover %s -> %s in %v", old, newMaster, time.Since(start))
	if newMaster == old {
		t.Fatalf("Failover returned the old master %s", old)
	}
	if got := s.MasterAddr(t); got != newMaster {
		t.Fatalf("MasterAddr after failover = %s, want %s", got, newMaster)
	}
	nc := redis.NewClient(&redis.Options{Addr: newMaster})
	defer nc.Close()
	info, err := nc.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("new master INFO: %v\n%s", err, info)
	}
	if got, err := nc.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on new master = %q, %v", got, err)
	}
	// The failover client follows the sentinels to the new master.
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client after failover: %v", err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	cl := testserver.StartCluster(t)
	t.Logf("cluster ready in %v", time.Since(start))
	addrs := cl.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs() = %v", addrs)
	}
	ctx := context.Background()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.ClusterInfo(ctx).Result()
		c.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("%s CLUSTER INFO: %v\n%s", a, err, info)
		}
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	// Enough keys to land on every node.
	for i := range 30 {
		k := "key:" + strconv.Itoa(i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if got, err := cc.Get(ctx, k).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v", k, got, err)
		}
	}
	var mu sync.Mutex
	perNode := map[string]int64{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		mu.Lock()
		perNode[c.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if perNode[a] == 0 {
			t.Fatalf("no keys on %s: %v", a, perNode)
		}
	}
}

// TestClusterPublishReachesEveryNode: as soon as StartCluster returns, a
// PUBLISH on any node reaches a subscriber on every node. Redis passes a
// published message to the other nodes over the cluster bus and drops it for
// a node it has no link to yet, which cluster_state:ok does not rule out.
func TestClusterPublishReachesEveryNode(t *testing.T) {
	t.Parallel()
	cl := testserver.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addrs := cl.Addrs()
	var subs []<-chan *redis.Message
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		ps := c.Subscribe(ctx, "ch")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			t.Fatalf("SUBSCRIBE on %s: %v", a, err)
		}
		subs = append(subs, ps.Channel())
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		if err := c.Publish(ctx, "ch", a).Err(); err != nil {
			t.Fatalf("PUBLISH on %s: %v", a, err)
		}
	}
	// A dropped message never comes: the 10 s only ends the wait.
	for i, ch := range subs {
		got := map[string]bool{}
		for range addrs {
			select {
			case m := <-ch:
				got[m.Payload] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("the subscriber on %s got the messages published on %v, want all of %v", addrs[i], got, addrs)
			}
		}
		if len(got) != len(addrs) {
			t.Fatalf("the subscriber on %s got the messages published on %v, want all of %v", addrs[i], got, addrs)
		}
	}
}

// TestHelperProcess is both the test and, when re-executed by StartHelper,
// the helper.
func TestHelperProcess(t *testing.T) {
	switch testserver.HelperRole() {
	case "":
	case "ticker":
		fmt.Printf("READY pid=%d greeting=%s\n", os.Getpid(), os.Getenv("TASKLOCK_TEST_GREETING"))
		for i := 0; ; i++ {
			fmt.Printf("TICK %d\n", i)
			time.Sleep(20 * time.Millisecond) // the work of a busy holder
		}
	case "exit3":
		fmt.Println("BYE")
		os.Exit(3)
	default:
		t.Fatalf("unknown role %q", testserver.HelperRole())
	}
	t.Parallel()

	h := testserver.StartHelper(t, "TestHelperProcess", "ticker", "TASKLOCK_TEST_GREETING=hello")
	line := h.WaitLine(t, "READY ", 10*time.Second)
	if want := fmt.Sprintf("READY pid=%d greeting=hello", h.Pid()); line != want {
		t.Fatalf("WaitLine = %q, want %q", line, want)
	}
	h.WaitLine(t, "TICK 3", 5*time.Second)
	// Lines sees every line, independently of WaitLine.
	if first := <-h.Lines(); !strings.HasPrefix(first, "READY ") {
		t.Fatalf("first line from Lines() = %q", first)
	}

	h.Stop(t)
	// Lines written before the stop may still be in the pipe: read until the
	// output has been quiet for a while, then expect no more. A negative
	// check needs a window.
	last := ""
	for quiet := false; !quiet; {
		select {
		case l := <-h.Lines():
			last = l
		case <-time.After(100 * time.Millisecond):
			quiet = true
		}
	}
	select {
	case l := <-h.Lines():
		t.Fatalf("stopped helper printed %q (last before: %q)", l, last)
	case <-time.After(200 * time.Millisecond):
	}
	h.Cont(t)
	select {
	case l := <-h.Lines():
		if !strings.HasPrefix(l, "TICK ") {
			t.Fatalf("line after Cont = %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no line after Cont")
	}

	h.Kill(t)
	if code := h.Wait(t, 5*time.Second); code != -1 {
		t.Fatalf("exit code after Kill = %d, want -1", code)
	}
	for range h.Lines() { // closed once stdout is drained
	}

	e := testserver.StartHelper(t, "TestHelperProcess", "exit3")
	if code := e.Wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit code = %d, want 3", code)
	}
	e.WaitLine(t, "BYE", time.Second)

	// WaitLine fails the test when the process exits without the line.
	ft := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.WaitLine(ft, "NEVER", 5*time.Second)
	}()
	<-done
	if !strings.Contains(ft.msg, "closed stdout (exit code 3)") {
		t.Fatalf("WaitLine on an exited helper: %q", ft.msg)
	}
}

// fatalTB records a fatal failure instead of failing the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestRequire(t *testing.T) {
	if p := testserver.Require(t, "redis-server"); p == "" {
		t.Fatal("Require returned an empty path")
	}
	if os.Getenv("CI") == "true" {
		return // a missing binary fails under CI: nothing to observe here
	}
	skipped := false
	t.Run("missing", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		testserver.Require(t, "tasklock-no-such-server")
		t.Error("Require did not skip for a missing binary")
	})
	if !skipped {
		t.Fatal("Require did not skip")
	}
}
