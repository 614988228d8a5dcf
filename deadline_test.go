package tasklock

import (
	"context"
	"testing"
	"time"

	"github.com/tasklock/tasklock/memstore"
)

// TestLockDeadline: Deadline is the end of the local validity a grant and
// an Extend set (TTL less drift and Grace, counted from the request), the
// time by which Done closes unless a renewal moves it.
func TestLockDeadline(t *testing.T) {
	lk := newTestLocker(t, memstore.New(nil))
	ctx := context.Background()
	const ttl, grace = 30 * time.Second, time.Second
	before := time.Now()
	l, err := lk.TryObtain(ctx, "deadline", &ObtainOptions{TTL: ttl, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer l.Release(ctx)
	valid := ttl - drift(ttl) - grace
	if d := l.Deadline(); d.Before(before.Add(valid)) || d.After(after.Add(valid)) {
		t.Errorf("Deadline %v after the grant, want within [%v, %v]", d.Sub(before), valid, after.Add(valid).Sub(before))
	}
	before = time.Now()
	if err := l.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	after = time.Now()
	valid = 2*time.Minute - drift(2*time.Minute) - grace
	if d := l.Deadline(); d.Before(before.Add(valid)) || d.After(after.Add(valid)) {
		t.Errorf("Deadline %v after Extend, want within [%v, %v]", d.Sub(before), valid, after.Add(valid).Sub(before))
	}
}
