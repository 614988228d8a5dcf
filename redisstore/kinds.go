package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Kinder = (*Store)(nil)

// Kinds implements driver.Kinder: the Store keeps read-write locks and
// semaphores on every deployment (single node, Sentinel, Cluster), as
// driver.Mode describes. Each is kept in containers of its own, in the
// hash slot of the key's mutex (see the package documentation,
// Read-write locks and semaphores).
func (s *Store) Kinds(m driver.Mode) error {
	if _, err := modeArg(m); err != nil {
		return err
	}
	return nil
}

// modeArg returns the mode's letter in the kinds scripts (kinds.lua), ""
// for a mutex, and an error wrapping driver.ErrUnsupported for a mode the
// Store does not know.
func modeArg(m driver.Mode) (string, error) {
	switch m {
	case driver.ModeMutex:
		return "", nil
	case driver.ModeRead:
		return "r", nil
	case driver.ModeWrite:
		return "w", nil
	case driver.ModePermit:
		return "p", nil
	}
	return "", fmt.Errorf("redisstore: %w: %v", driver.ErrUnsupported, m)
}

// entryMode is the Mode of an entry value's letter, and whether it is a
// writer's waiting claim.
func entryMode(letter byte) (m driver.Mode, waiting, ok bool) {
	switch letter {
	case 'r':
		return driver.ModeRead, false, true
	case 'w':
		return driver.ModeWrite, false, true
	case 'p':
		return driver.ModePermit, false, true
	case 'c':
		return driver.ModeWrite, true, true
	}
	return 0, false, false
}

// kindsKeys are the keys of the read-write lock or semaphore on one user
// key (kinds.lua). They share the mutex's hash tag, and each ends in a
// suffix without braces after the tag's closing '}', which tells every
// kind of key apart whatever the user key holds: the mutex's lock key ends
// in that '}', its fence key in "}:fence".
type kindsKeys struct {
	h, held, wait, fence string
}

// Suffixes after the lock key (Prefix+"{"+K+"}") of the other kinds' keys.
const (
	kindsSuffix      = ":kinds"       // the entries and the limit (hash)
	kindsHeldSuffix  = ":kinds:held"  // the holds by expiry (sorted set)
	kindsWaitSuffix  = ":kinds:wait"  // the writers' claims by expiry (sorted set)
	kindsFenceSuffix = ":kinds:fence" // the fence counter
	fairSuffix       = ":fair"        // a mutex's fair queue by arrival (sorted set)
	fairExpSuffix    = ":fair:exp"    // the same entries by expiry (sorted set)
)

func (s *Store) kindsKeys(key string) kindsKeys {
	lk := s.lockKey(key)
	return kindsKeys{h: lk + kindsSuffix, held: lk + kindsHeldSuffix, wait: lk + kindsWaitSuffix, fence: lk + kindsFenceSuffix}
}

// kindsUserKey returns the user key of a kinds hash key, and false when h
// is not one.
func (s *Store) kindsUserKey(h string) (string, bool) {
	lk, ok := strings.CutSuffix(h, kindsSuffix)
	if !ok || !strings.HasSuffix(lk, "}") {
		return "", false
	}
	return s.userKey(lk)
}

// checkKind rejects what kinds_acquire.lua cannot keep: checkAcquire's
// rules, and a limit that does not fit the mode.
func checkKind(p driver.AcquireParams) (string, error) {
	if err := checkAcquire(p); err != nil {
		return "", err
	}
	mode, err := modeArg(p.Mode)
	if err != nil {
		return "", fmt.Errorf("redisstore: acquire %q: %w", p.Key, err)
	}
	if p.Mode == driver.ModePermit && p.Limit < 1 {
		return "", fmt.Errorf("redisstore: acquire %q: Limit is %d, a semaphore needs at least 1 permit", p.Key, p.Limit)
	}
	if p.Mode != driver.ModePermit && p.Limit != 0 {
		return "", fmt.Errorf("redisstore: acquire %q: Limit is %d, must be 0 for mode %v", p.Key, p.Limit, p.Mode)
	}
	return mode, nil
}

// acquireKind is Acquire for a hold of a read-write lock or a semaphore:
// one call of kinds_acquire.lua (with WAIT in the same pipeline under
// Options.WaitReplicas).
func (s *Store) acquireKind(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	mode, err := checkKind(p)
	if err != nil {
		return driver.Grant{}, err
	}
	c := s.kindsAcquireCall(p, mode)
	return s.acquireWith(ctx, p, kindsAcquireScript, c.keys[0], c.evalshaArgs(), func(key string, res any) (driver.Grant, error) {
		return kindsReply(key, p.Limit, res)
	})
}

// kindsAcquireCall is the call of kinds_acquire.lua for p, whose mode
// argument is mode (checkKind's).
func (s *Store) kindsAcquireCall(p driver.AcquireParams, mode string) *scriptCall {
	k := s.kindsKeys(p.Key)
	return &scriptCall{script: kindsAcquireScript, keys: []string{k.h, k.held, k.wait, k.fence},
		args: []any{p.Token, millis(p.TTL), p.Owner, mode, p.Limit, s.channelArg, p.Key}}
}

// kindsReleaseCall is the call of kinds_release.lua for p.
func (s *Store) kindsReleaseCall(p driver.ReleaseParams) (*scriptCall, error) {
	mode, err := modeArg(p.Mode)
	if err != nil {
		return nil, fmt.Errorf("redisstore: release %q: %w", p.Key, err)
	}
	var keep int64
	if p.KeepFor > 0 {
		keep = millis(p.KeepFor)
	}
	k := s.kindsKeys(p.Key)
	return &scriptCall{script: kindsReleaseScript, keys: []string{k.h, k.held, k.wait},
		args: []any{p.Token, keep, mode, s.channelArg, p.Key}}, nil
}

// kindsReply turns kinds_acquire.lua's reply for key, asked with limit,
// into a grant, a *driver.HeldError or an error wrapping
// driver.ErrKindMismatch.
func kindsReply(key string, limit int, res any) (driver.Grant, error) {
	r, _ := res.([]any)
	var status int64 = -1
	if len(r) > 0 {
		status, _ = r[0].(int64)
	}
	switch {
	case status == 1 && len(r) == 2: // granted: {1, fence}
		if f, ok := r[1].(int64); ok && f >= 0 {
			return driver.Grant{Fence: uint64(f)}, nil
		}
	case status == 0 && len(r) == 3: // refused: {0, owner, ms left}
		held := &driver.HeldError{}
		held.Owner, _ = r[1].(string)
		if ms, ok := r[2].(int64); ok && ms > 0 {
			held.TTL = time.Duration(ms) * time.Millisecond
		}
		return driver.Grant{}, held
	case status == 2 && len(r) == 2: // another kind: {2, its limit}
		cur, _ := r[1].(int64)
		return driver.Grant{}, fmt.Errorf("redisstore: acquire %q as %s: %w: it is held as %s", key, kindName(limit), driver.ErrKindMismatch, kindName(int(cur)))
	}
	return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: unexpected reply %v", key, res)
}

// kindName names the kind of a kinds key with limit.
func kindName(limit int) string {
	if limit == 0 {
		return "a read-write lock"
	}
	return fmt.Sprintf("a semaphore of %d permits", limit)
}

// releaseKind is Release for a hold of a read-write lock or a semaphore:
// one call of kinds_release.lua.
func (s *Store) releaseKind(ctx context.Context, p driver.ReleaseParams) error {
	c, err := s.kindsReleaseCall(p)
	if err != nil {
		return err
	}
	n, err := kindsReleaseScript.run(ctx, s.client, c.evalshaArgs()).Int64()
	return releaseReply(p.Key, n, err)
}
