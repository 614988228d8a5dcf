package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

// The arguments of a lone call hold ordinary strings and integers, as
// hooks and the Cluster client read them, in one allocation with the lock
// key (and fence key) and, for extend.lua, Renew's result; a key too long
// for the call's room costs one more.
func TestOneCallArgs(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	s, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := driver.ReleaseParams{Key: "k", Token: "tok", KeepFor: 1500 * time.Millisecond}
	args := s.releaseArgs(p)
	want := []any{"evalsha", releaseScript.sha, 1, "tasklock:{k}", "tok", int64(1500), "tasklock:released", "k"}
	if len(args) != len(want) {
		t.Fatalf("%d arguments, want %d", len(args), len(want))
	}
	for i := range want {
		if args[i] != want[i] {
			t.Errorf("argument %d = %#v, want %#v", i, args[i], want[i])
		}
	}
	acq, _, err := s.acquireArgs(driver.AcquireParams{Key: "k", Token: "tok", Owner: "me", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if acq[3] != "tasklock:{k}" || acq[4] != "tasklock:{k}:fence" || acq[5] != "tok" || acq[6] != int64(2000) || acq[7] != "me" {
		t.Errorf("acquire arguments %v", acq)
	}
	if n := testing.AllocsPerRun(100, func() { s.releaseArgs(p) }); n != 1 {
		t.Errorf("releaseArgs made %v allocations, want 1", n)
	}
	ap := driver.AcquireParams{Key: "k", Token: "tok", Owner: "me", TTL: 2 * time.Second}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = s.acquireArgs(ap) }); n != 1 {
		t.Errorf("acquireArgs made %v allocations, want 1", n)
	}
	long := strings.Repeat("x", oneCallKeyBytes)
	ap.Key = long
	acq, lk, err := s.acquireArgs(ap)
	if err != nil {
		t.Fatal(err)
	}
	if lk != "tasklock:{"+long+"}" || acq[3] != lk || acq[4] != lk+":fence" {
		t.Errorf("acquire arguments of a long key %v, lock key %q", acq, lk)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = s.acquireArgs(ap) }); n != 2 {
		t.Errorf("acquireArgs of a long key made %v allocations, want 2", n)
	}
	rp := driver.RenewParams{Key: "k", Token: "tok", TTL: 1500 * time.Millisecond}
	ext := s.extendCall(rp).args[:6]
	if want := []any{"evalsha", extendScript.sha, 1, "tasklock:{k}", "tok", int64(1500)}; len(ext) != len(want) || ext[0] != want[0] || ext[1] != want[1] || ext[2] != want[2] || ext[3] != want[3] || ext[4] != want[4] || ext[5] != want[5] {
		t.Errorf("extend arguments %v, want %v", ext, want)
	}
	if n := testing.AllocsPerRun(100, func() { s.extendCall(rp) }); n != 1 {
		t.Errorf("extendCall made %v allocations, want 1", n)
	}
}
