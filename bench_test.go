package tasklock

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/tasklock/tasklock/memstore"
)

// BenchmarkObtainRelease measures the core's cost of one uncontended
// Obtain+Release on memstore: allocations per pair are the core's plus
// memstore's, and the core's share is what a change to the root package
// moves.
func BenchmarkObtainRelease(b *testing.B) {
	lk, err := New(memstore.New(nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer lk.Close()
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := lk.Obtain(ctx, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var n int64
		b.RunParallel(func(pb *testing.PB) {
			key := "bench-" + strconv.FormatInt(atomic.AddInt64(&n, 1), 10)
			for pb.Next() {
				l, err := lk.Obtain(ctx, key, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
