package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestAcquireEachKeepsKeyOrder: the items of one key run in the batch's
// order, so a key named twice goes to its first item; every item gets its
// own answer.
func TestAcquireEachKeepsKeyOrder(t *testing.T) {
	var (
		mu      sync.Mutex
		holders = map[string]string{}
	)
	acquire := func(_ context.Context, p AcquireParams) (Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		if h, ok := holders[p.Key]; ok {
			return Grant{}, &HeldError{Owner: h}
		}
		holders[p.Key] = p.Token
		return Grant{Fence: 1}, nil
	}
	var ps []AcquireParams
	for i := range 40 {
		ps = append(ps, AcquireParams{Key: fmt.Sprintf("k%d", i%8), Token: fmt.Sprintf("t%d", i)})
	}
	res := AcquireEach(context.Background(), ps, acquire)
	for i, r := range res {
		if i < 8 {
			if r.Err != nil {
				t.Errorf("item %d, the first of key %s: %v", i, ps[i].Key, r.Err)
			}
			continue
		}
		var he *HeldError
		if !errors.As(r.Err, &he) || he.Owner != ps[i%8].Token {
			t.Errorf("item %d of key %s: %v, want held by its first item %s", i, ps[i].Key, r.Err, ps[i%8].Token)
		}
	}
}

func TestReleaseEachAnswersEveryItem(t *testing.T) {
	ps := []ReleaseParams{{Key: "a", Token: "x"}, {Key: "b", Token: "y"}, {Key: "a", Token: "z"}}
	errs := ReleaseEach(context.Background(), ps, func(_ context.Context, p ReleaseParams) error {
		if p.Token == "z" {
			return ErrNotHeld
		}
		return nil
	})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], ErrNotHeld) {
		t.Fatalf("ReleaseEach: %v, want [nil nil ErrNotHeld]", errs)
	}
}
