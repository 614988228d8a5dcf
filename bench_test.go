package tasklock

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/memstore"
)

// BenchmarkObtainRelease measures the core's cost of one uncontended
// Obtain+Release on memstore: allocations per pair are the core's plus
// memstore's, and the core's share is what a change to the root package
// moves.
func BenchmarkObtainRelease(b *testing.B) {
	lk := memLocker(b)
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

// BenchmarkExtend measures the core's cost of one Extend of a held lock on
// memstore, alone (serial) and with other goroutines extending theirs
// (parallel, group-committed).
func BenchmarkExtend(b *testing.B) {
	lk := memLocker(b)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		l, err := lk.Obtain(ctx, "bench-extend", nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Release(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Extend(ctx, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var n int64
		b.RunParallel(func(pb *testing.PB) {
			l, err := lk.Obtain(ctx, "bench-extend-"+strconv.FormatInt(atomic.AddInt64(&n, 1), 10), nil)
			if err != nil {
				b.Error(err)
				return
			}
			defer l.Release(ctx)
			for pb.Next() {
				if err := l.Extend(ctx, time.Minute); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// memLocker returns a Locker on a fresh memstore, closed when b ends.
func memLocker(b *testing.B) *Locker {
	lk, err := New(memstore.New(nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lk.Close() })
	return lk
}
