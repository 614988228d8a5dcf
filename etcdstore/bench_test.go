package etcdstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// The benchmarks below measure what a Store adds to the two requests of a
// lock and unlock on a free key: BenchmarkAcquireRelease goes through the
// Store, BenchmarkFloorTxnDelete sends the fewest requests a fenced lock on
// etcd takes (lockbench's raw floor: a Txn putting the key on a lease if
// absent, and a Delete). Both run 8 goroutines per CPU on distinct keys
// against one etcd of internal/testserver; compare their ns/op and
// allocs/op within one run.

func BenchmarkAcquireRelease(b *testing.B) {
	srv := testserver.StartEtcd(b)
	c := newClient(b, srv.Endpoints(), nil)
	s := newStore(b, c, nil)
	benchPairs(b, "", func(ctx context.Context, key, tok string) error {
		if _, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: tok, Owner: "bench", TTL: 10 * time.Second}); err != nil {
			return err
		}
		return s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok})
	})
}

// benchPairs runs pair in a loop on 8 goroutines per CPU, each with a key
// of its own under prefix and a token of its own.
func benchPairs(b *testing.B, prefix string, pair func(ctx context.Context, key, tok string) error) {
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		key, tok := fmt.Sprintf("%sk%d", prefix, seq.Add(1)), token()
		for pb.Next() {
			if err := pair(ctx, key, tok); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkFloorTxnDelete(b *testing.B) {
	srv := testserver.StartEtcd(b)
	c := newClient(b, srv.Endpoints(), nil)
	lease, err := c.Grant(context.Background(), 11)
	if err != nil {
		b.Fatal(err)
	}
	benchPairs(b, freshPrefix(), func(ctx context.Context, key, _ string) error {
		resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "", clientv3.WithLease(lease.ID))).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("floor: %s was not free", key)
		}
		_, err = c.Delete(ctx, key)
		return err
	})
}
