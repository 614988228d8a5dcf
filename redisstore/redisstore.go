package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
)

// DefaultPrefix is the key prefix when Options.Prefix is empty.
const DefaultPrefix = "tasklock:"

// DefaultWaitTimeout is the WAIT timeout when Options.WaitTimeout is zero.
const DefaultWaitTimeout = 100 * time.Millisecond

// scriptChunk is the most items (leases, claims, run records) one script
// call carries.
const scriptChunk = 500

// ErrReplicas is wrapped by the error Acquire returns when Options.WaitReplicas
// is set and fewer replicas acknowledged the grant within
// Options.WaitTimeout. The lease has been released again (or, if that
// release failed too, expires after its TTL); the call may be retried.
var ErrReplicas = errors.New("redisstore: too few replicas acknowledged")

// ErrKey is wrapped by the error Acquire returns for a key this store cannot
// keep: one starting with '}'. Such a key would give the lock key an empty
// hash tag ("prefix{}..."), so on a Cluster the lock key and its fence
// counter would land in different slots.
var ErrKey = fmt.Errorf("redisstore: unsupported key: %w", driver.ErrUnsupported)

//go:embed acquire.lua
var acquireSrc string

//go:embed renew.lua
var renewSrc string

//go:embed release.lua
var releaseSrc string

//go:embed extend.lua
var extendSrc string

//go:embed forcerelease.lua
var forceReleaseSrc string

//go:embed kinds.lua
var kindsLib string

//go:embed kinds_acquire.lua
var kindsAcquireSrc string

//go:embed kinds_release.lua
var kindsReleaseSrc string

//go:embed fair.lua
var fairSrc string

// The scripts that touch read-write locks, semaphores or fair queues start
// with kinds.lua, the functions they share.
var (
	acquireScript      = newLuaScript(acquireSrc)
	renewScript        = newLuaScript(kindsLib + renewSrc)
	releaseScript      = newLuaScript(releaseSrc)
	extendScript       = newLuaScript(extendSrc)
	forceReleaseScript = newLuaScript(kindsLib + forceReleaseSrc)
	kindsAcquireScript = newLuaScript(kindsLib + kindsAcquireSrc)
	kindsReleaseScript = newLuaScript(kindsLib + kindsReleaseSrc)
	fairScript         = newLuaScript(kindsLib + fairSrc)
)

// luaScript is an embedded script, run with EVALSHA and, when the server
// answers NOSCRIPT (after SCRIPT FLUSH or a restart), once more with EVAL,
// which also loads it. Acquire and Release build the command themselves
// (redis.Script.Run would copy keys and arguments into a second slice and
// box them again): src and sha are boxed once here.
type luaScript struct {
	*redis.Script
	src, sha any
}

func newLuaScript(src string) *luaScript {
	s := redis.NewScript(src)
	return &luaScript{Script: s, src: src, sha: s.Hash()}
}

// doer is what runs a command: a client or a pipeline.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// run sends args, which must be {"evalsha", l.sha, numkeys, keys...,
// argv...}, and on NOSCRIPT sends them again as EVAL.
func (l *luaScript) run(ctx context.Context, c doer, args []any) *redis.Cmd {
	cmd := c.Do(ctx, args...)
	if err := cmd.Err(); err != nil && isNoScript(err) {
		cmd = c.Do(ctx, l.evalArgs(args)...)
	}
	return cmd
}

// evalArgs turns EVALSHA arguments into EVAL arguments.
func (l *luaScript) evalArgs(args []any) []any {
	return append([]any{"eval", l.src}, args[2:]...)
}

// Options configures a Store. A nil *Options means all defaults; zero fields
// take their defaults. New never writes into it.
type Options struct {
	// Prefix starts every key the store writes: the lock key of user key K
	// is Prefix+"{"+K+"}", its fence counter Prefix+"{"+K+"}:fence", and
	// releases are published on channel Prefix+"released". It must not
	// contain '{' or '}', which would change the keys' Cluster hash tag.
	// Default: DefaultPrefix.
	Prefix string

	// WaitReplicas, when positive, makes Acquire send WAIT WaitReplicas
	// WaitTimeout on the connection that made the grant, in the same round
	// trip, and undo the grant with an error wrapping ErrReplicas when fewer
	// replicas acknowledged it. This narrows, but does not close, the window
	// in which a failover loses a lease: see the package documentation.
	// Default: 0 (do not wait).
	WaitReplicas int

	// WaitTimeout bounds the WAIT that WaitReplicas sends. It must be at
	// least 1ms and below the client's ReadTimeout. Default:
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
}

// Store keeps leases in Redis. It implements driver.Store, driver.Notifier,
// driver.Lister, driver.ForceReleaser, driver.Batcher (batch.go),
// driver.Kinder (kinds.go), driver.FairQueuer (fair.go) and ledger.Ledger
// (ledger.go), and is safe for concurrent use. Create it with New.
type Store struct {
	client       redis.UniversalClient
	cluster      *redis.ClusterClient // non-nil when client is a Cluster client
	prefix       string
	channel      string // Prefix+"released"
	channelArg   any    // channel, boxed once for release.lua's arguments
	waitReplicas int
	waitTimeout  time.Duration
	wake         wakeHub // wakes fair queues' Tickets (fair.go)
}

var (
	_ driver.Store         = (*Store)(nil)
	_ driver.Notifier      = (*Store)(nil)
	_ driver.Lister        = (*Store)(nil)
	_ driver.ForceReleaser = (*Store)(nil)
)

// badOption returns the error for an invalid argument or option: a
// *driver.OptionError (tasklock.OptionError) naming field, with the
// offending value when value is not empty.
func badOption(field, value, format string, args ...any) error {
	return &driver.OptionError{Pkg: "redisstore", Field: field, Value: value, Reason: fmt.Sprintf(format, args...)}
}

// New returns a Store that keeps its leases through client, which must be a
// *redis.Client (a single node, or a Sentinel-managed master from
// redis.NewFailoverClient) or a *redis.ClusterClient (including
// redis.NewFailoverClusterClient). Other UniversalClient implementations,
// such as *redis.Ring, are rejected: the store must know how keys map to
// nodes to batch renewals and to WAIT on the right connection.
//
// New validates opts and returns a *driver.OptionError naming the offending
// field. The caller keeps ownership of client: the Store never closes it.
func New(client redis.UniversalClient, opts *Options) (*Store, error) {
	s := &Store{
		client:      client,
		prefix:      DefaultPrefix,
		waitTimeout: DefaultWaitTimeout,
	}
	var readTimeout time.Duration
	switch c := client.(type) {
	case nil:
		return nil, badOption("client", "", "nil")
	case *redis.Client:
		if c == nil {
			return nil, badOption("client", "", "nil")
		}
		readTimeout = c.Options().ReadTimeout
	case *redis.ClusterClient:
		if c == nil {
			return nil, badOption("client", "", "nil")
		}
		s.cluster = c
		readTimeout = c.Options().ReadTimeout
	default:
		return nil, badOption("client", "", "type %T is not supported, use *redis.Client or *redis.ClusterClient", client)
	}
	if opts != nil {
		if opts.Prefix != "" {
			if strings.ContainsAny(opts.Prefix, "{}") {
				return nil, badOption("Options.Prefix", opts.Prefix, "must not contain '{' or '}'")
			}
			s.prefix = opts.Prefix
		}
		if opts.WaitReplicas < 0 {
			return nil, badOption("Options.WaitReplicas", "", "%d is negative", opts.WaitReplicas)
		}
		s.waitReplicas = opts.WaitReplicas
		switch {
		case opts.WaitTimeout < 0:
			return nil, badOption("Options.WaitTimeout", "", "%v is negative", opts.WaitTimeout)
		case opts.WaitTimeout > 0 && opts.WaitTimeout < time.Millisecond:
			// WAIT counts in whole ms, and WAIT n 0 blocks forever.
			return nil, badOption("Options.WaitTimeout", "", "%v is below the minimum 1ms", opts.WaitTimeout)
		case opts.WaitTimeout > 0:
			s.waitTimeout = opts.WaitTimeout
		}
	}
	if s.waitReplicas > 0 && readTimeout > 0 && s.waitTimeout >= readTimeout {
		// A pipeline reads with the client's ReadTimeout, so a longer WAIT
		// would surface as a network timeout.
		return nil, badOption("Options.WaitTimeout", "", "%v must be below the client's ReadTimeout %v", s.waitTimeout, readTimeout)
	}
	s.channel = s.prefix + "released"
	s.channelArg = s.channel
	s.wake.s = s
	return s, nil
}

// lockKey returns the lock key of a user key. The user key is wrapped in
// braces, which makes it the key's Cluster hash tag: Redis hashes only what
// lies between the first '{' and the first '}' after it. The prefix has no
// braces (New checks), so that first '{' is ours, and the first '}' after it
// is either inside the user key or our closing one. Either way the fence
// key, which is the lock key plus ":fence", has the same first '{' and the
// same first '}', so the same tag and the same slot, even when the user key
// contains braces ("a}b{c" gives tag "a", "x{y}" gives tag "x{y"), and one
// script may touch both. The one exception is a user key starting with '}':
// the tag would be empty, and Redis would hash the whole key instead, so
// Acquire rejects such keys with ErrKey.
func (s *Store) lockKey(key string) string {
	return s.prefix + "{" + key + "}"
}

// userKey returns the user key of a lock key, and false when lk is not one.
func (s *Store) userKey(lk string) (string, bool) {
	if len(lk) < len(s.prefix)+2 || !strings.HasPrefix(lk, s.prefix) || lk[len(s.prefix)] != '{' || lk[len(lk)-1] != '}' {
		return "", false
	}
	return lk[len(s.prefix)+1 : len(lk)-1], true
}

// Acquire implements driver.Store in one round trip: acquire.lua grants the
// key with SET PX and a fresh fence from the key's INCR counter, or reports
// the holder. With Options.WaitReplicas, WAIT rides in the same pipeline.
// A hold of another mode goes to kinds_acquire.lua (see Kinds).
func (s *Store) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if p.Mode != driver.ModeMutex {
		return s.acquireKind(ctx, p)
	}
	args, lk, err := s.acquireArgs(p)
	if err != nil {
		return driver.Grant{}, err
	}
	return s.acquireWith(ctx, p, acquireScript, lk, args, acquireReply)
}

// acquireWith makes Acquire's one attempt for p with script, whose EVALSHA
// arguments are args and whose keys sit in the slot of key, and turns the
// script's reply into the result with reply. With Options.WaitReplicas,
// WAIT rides in the same pipeline, and a grant too few replicas
// acknowledged is undone.
func (s *Store) acquireWith(ctx context.Context, p driver.AcquireParams, script *luaScript, key string, args []any,
	reply func(key string, res any) (driver.Grant, error)) (driver.Grant, error) {
	if s.waitReplicas == 0 {
		res, err := script.run(ctx, s.client, args).Result()
		if err != nil {
			return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: %w", p.Key, err)
		}
		return reply(p.Key, res)
	}
	res, acked, err := s.acquireWait(ctx, script, key, args)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: %w", p.Key, err)
	}
	g, err := reply(p.Key, res)
	if err != nil || acked >= s.waitReplicas {
		return g, err
	}
	err = fmt.Errorf("%w: %d of %d within %s", ErrReplicas, acked, s.waitReplicas, s.waitTimeout)
	// Undo the grant even if ctx has ended: it is ours to remove.
	rel := s.Release(context.WithoutCancel(ctx), driver.ReleaseParams{Key: p.Key, Token: p.Token, Mode: p.Mode})
	if rel != nil {
		return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: %w (undoing the grant failed, it expires after its TTL: %w)", p.Key, err, rel)
	}
	return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: %w", p.Key, err)
}

// acquireArgs checks p and returns the EVALSHA arguments of acquire.lua
// for it, and the lock key.
func (s *Store) acquireArgs(p driver.AcquireParams) (args []any, lk string, err error) {
	if err := checkAcquire(p); err != nil {
		return nil, "", err
	}
	c := new(oneCall)
	lk, fk := c.lockKeys(s, p.Key)
	c.args = [8]any{"evalsha", acquireScript.sha, 2, c.str(0, lk), c.str(1, fk), c.str(2, p.Token), c.int(millis(p.TTL)), c.str(3, p.Owner)}
	return c.args[:], lk, nil
}

// checkAcquire rejects what acquire.lua cannot store.
func checkAcquire(p driver.AcquireParams) error {
	if p.Key == "" || p.Key[0] == '}' {
		return fmt.Errorf("%w: %q: a key must not be empty or start with '}'", ErrKey, p.Key)
	}
	if p.Token == "" || strings.IndexByte(p.Token, ':') >= 0 {
		return fmt.Errorf("redisstore: token %q: must be non-empty and contain no ':'", p.Token)
	}
	if p.TTL <= 0 {
		return fmt.Errorf("redisstore: TTL is %s, must be positive", p.TTL)
	}
	return nil
}

// lockKeys returns key's lock key and fence key, in one allocation: the
// lock key is a prefix of the fence key.
func (s *Store) lockKeys(key string) (lk, fk string) {
	fk = s.prefix + "{" + key + "}:fence"
	return fk[:len(fk)-len(":fence")], fk
}

// acquireReply turns acquire.lua's reply for key into a grant or a
// *driver.HeldError.
func acquireReply(key string, res any) (driver.Grant, error) {
	switch r := res.(type) {
	case int64: // granted: the fence
		if r <= 0 {
			return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: unexpected fence %d", key, r)
		}
		return driver.Grant{Fence: uint64(r)}, nil
	case []any: // held: {value, pttl}
		held := &driver.HeldError{}
		if len(r) == 2 {
			if v, ok := r[0].(string); ok {
				_, held.Owner, _ = parseValue(v)
				if i := strings.IndexByte(v, ':'); i > 0 {
					held.Token = v[:i]
				}
			}
			if ms, ok := r[1].(int64); ok && ms > 0 {
				held.TTL = time.Duration(ms) * time.Millisecond
			}
		}
		return driver.Grant{}, held
	}
	return driver.Grant{}, fmt.Errorf("redisstore: acquire %q: unexpected reply %v", key, res)
}

// acquireWait runs script with args and WAIT in one pipeline on the
// connection of the master of key, and returns the script's reply and the
// number of replicas that acknowledged (0 when WAIT failed).
func (s *Store) acquireWait(ctx context.Context, script *luaScript, key string, args []any) (any, int, error) {
	var node redis.UniversalClient = s.client
	if s.cluster != nil {
		// The Cluster client would send WAIT (it has no key) to any node;
		// WAIT counts the acks of writes made on its own connection, so it
		// must go down the same node client's pipeline as the script.
		c, err := s.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, 0, err
		}
		node = c
	}
	// A *redis.Client runs a pipeline on a single connection.
	res, acked, err := s.pipeAcquire(ctx, node, args)
	if isNoScript(err) {
		res, acked, err = s.pipeAcquire(ctx, node, script.evalArgs(args))
	}
	return res, acked, err
}

// pipeAcquire sends a script call (args) and WAIT in one pipeline on node.
func (s *Store) pipeAcquire(ctx context.Context, node redis.UniversalClient, args []any) (any, int, error) {
	pipe := node.Pipeline()
	script := pipe.Do(ctx, args...)
	// Pipeliner has no Wait method. The pipeline reads with the client's
	// ReadTimeout, which New checked is longer than the WAIT timeout.
	wait := pipe.Do(ctx, "wait", s.waitReplicas, s.waitTimeout.Milliseconds())
	if err := execPipe(ctx, pipe); err != nil {
		return nil, 0, err
	}
	res, err := script.Result()
	if err != nil {
		return nil, 0, err
	}
	acked, err := wait.Int64()
	if err != nil {
		// A grant that cannot be confirmed counts as acknowledged by
		// none, so that the caller undoes it.
		return res, 0, nil
	}
	return res, int(acked), nil
}

// execPipe runs pipe. Per-command errors (NOSCRIPT, a node's answer) are
// left for the caller to read from each command; it returns Exec's error
// only when no command carries one, which is how go-redis reports that it
// could not reach a node at all.
func execPipe(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return nil
		}
	}
	return err
}

// parseValue splits a lease value token:fence:owner.
func parseValue(v string) (fence uint64, owner string, ok bool) {
	i := strings.IndexByte(v, ':')
	if i < 0 {
		return 0, "", false
	}
	rest := v[i+1:]
	j := strings.IndexByte(rest, ':')
	if j < 0 {
		return 0, "", false
	}
	fence, err := strconv.ParseUint(rest[:j], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return fence, rest[j+1:], true
}

// millis converts d to whole milliseconds, rounding up so the store never
// keeps a lease shorter than asked.
func millis(d time.Duration) int64 {
	return driver.Units(d, time.Millisecond)
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Release implements driver.Store in one round trip (release.lua): when
// p.Token holds p.Key it deletes the lease and publishes p.Key on
// Prefix+"released", or with p.KeepFor > 0 only shortens it to KeepFor.
// A hold of another mode goes to kinds_release.lua (see Kinds).
func (s *Store) Release(ctx context.Context, p driver.ReleaseParams) error {
	if p.Mode != driver.ModeMutex {
		return s.releaseKind(ctx, p)
	}
	n, err := releaseScript.run(ctx, s.client, s.releaseArgs(p)).Int64()
	return releaseReply(p.Key, n, err)
}

// releaseArgs returns the EVALSHA arguments of release.lua for p.
func (s *Store) releaseArgs(p driver.ReleaseParams) []any {
	c := new(oneCall)
	lk, _ := c.lockKeys(s, p.Key)
	c.args = [8]any{"evalsha", releaseScript.sha, 1, c.str(0, lk), c.str(1, p.Token), c.int(keepMillis(p)), s.channelArg, c.str(2, p.Key)}
	return c.args[:]
}

// appendReleaseArgv appends release.lua's ARGV for p to args.
func (s *Store) appendReleaseArgv(args []any, p driver.ReleaseParams) []any {
	return append(args, p.Token, keepMillis(p), s.channelArg, p.Key)
}

// keepMillis is release.lua's KeepFor argument for p: 0 to delete.
func keepMillis(p driver.ReleaseParams) int64 {
	if p.KeepFor > 0 {
		return millis(p.KeepFor)
	}
	return 0
}

// releaseReply turns release.lua's reply for key into Release's error.
func releaseReply(key string, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("redisstore: release %q: %w", key, err)
	}
	if n != 1 {
		return driver.ErrNotHeld
	}
	return nil
}

// ForceRelease implements driver.ForceReleaser: it deletes the mutex of key
// and every entry of its read-write lock or semaphore, whoever holds them,
// and wakes waiters, in one round trip. The fence counters stay, so the
// next grant's fence is still higher. It returns driver.ErrNotHeld when
// nothing of key was held.
func (s *Store) ForceRelease(ctx context.Context, key string) error {
	k := s.kindsKeys(key)
	args := []any{"evalsha", forceReleaseScript.sha, 4, s.lockKey(key), k.h, k.held, k.wait, s.channelArg, key}
	n, err := forceReleaseScript.run(ctx, s.client, args).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: force release %q: %w", key, err)
	}
	if n != 1 {
		return driver.ErrNotHeld
	}
	return nil
}

// Renew implements driver.Store. It groups the leases by Cluster hash slot
// (on a *redis.ClusterClient) or in chunks of at most 500 (otherwise), runs
// renew.lua once per group, mutexes and holds of the other modes together,
// and sends all the groups in one pipeline, which the Cluster client splits
// per node: a renewal cycle costs one round trip per node (a second one
// only after SCRIPT FLUSH or a restart, to load the script).
func (s *Store) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	if len(ps) == 0 {
		return []error{}, nil
	}
	for _, p := range ps {
		if p.TTL <= 0 {
			return nil, fmt.Errorf("redisstore: renew %q: TTL is %s, must be positive", p.Key, p.TTL)
		}
		if _, err := modeArg(p.Mode); err != nil {
			return nil, fmt.Errorf("redisstore: renew %q: %w", p.Key, err)
		}
	}
	if len(ps) == 1 && ps[0].Mode == driver.ModeMutex {
		return s.renewMutex(ctx, ps[0])
	}
	calls := s.groupCalls(renewScript, len(ps), func(i int) string { return s.lockKey(ps[i].Key) })
	for _, c := range calls {
		// The mutexes first, then the other holds: renew.lua's layout.
		mutexes := make([]int, 0, len(c.idx))
		var kinds []int
		for _, i := range c.idx {
			if ps[i].Mode == driver.ModeMutex {
				mutexes = append(mutexes, i)
			} else {
				kinds = append(kinds, i)
			}
		}
		c.idx = append(mutexes, kinds...)
		c.keys = make([]string, 0, len(mutexes)+3*len(kinds))
		c.args = make([]any, 0, 2+2*len(mutexes)+4*len(kinds))
		c.args = append(c.args, len(mutexes), s.channelArg)
		for _, i := range mutexes {
			c.keys = append(c.keys, s.lockKey(ps[i].Key))
			c.args = append(c.args, ps[i].Token, millis(ps[i].TTL))
		}
		for _, i := range kinds {
			k := s.kindsKeys(ps[i].Key)
			mode, _ := modeArg(ps[i].Mode)
			c.keys = append(c.keys, k.h, k.held, k.wait)
			c.args = append(c.args, ps[i].Token, millis(ps[i].TTL), mode, ps[i].Key)
		}
	}
	if err := s.runCalls(ctx, calls, nil); err != nil {
		return nil, fmt.Errorf("redisstore: renew %d leases: %w", len(ps), err)
	}
	out := make([]error, len(ps))
	for _, c := range calls {
		replies, err := callReplies(c)
		if err != nil {
			return nil, fmt.Errorf("redisstore: renew %d leases: %w", len(ps), err)
		}
		for j, r := range replies {
			if n, _ := r.(int64); n != 1 {
				out[c.idx[j]] = driver.ErrNotHeld
			}
		}
	}
	return out, nil
}

// renewMutex is Renew of the one mutex lease p, as an Extend of a lone lock
// sends it: a command of its own, not in a pipeline, of extend.lua, which
// checks the token and sets the new TTL as renew.lua does, without the
// prelude (kinds.lua) that renew.lua carries for the other kinds, and with
// two arguments besides the key.
// Its arguments, their values, the lock key and the result slice are one
// allocation (see oneCall).
func (s *Store) renewMutex(ctx context.Context, p driver.RenewParams) ([]error, error) {
	c := s.extendCall(p)
	n, err := extendScript.run(ctx, s.client, c.args[:6]).Int64()
	if err != nil {
		return nil, fmt.Errorf("redisstore: renew %q: %w", p.Key, err)
	}
	if n != 1 {
		c.res[0] = driver.ErrNotHeld
	}
	return c.res[:], nil
}

// extendCall returns the call of extend.lua for p: its EVALSHA arguments
// are args[:6].
func (s *Store) extendCall(p driver.RenewParams) *oneCall {
	c := new(oneCall)
	lk, _ := c.lockKeys(s, p.Key)
	c.args = [8]any{"evalsha", extendScript.sha, 1, c.str(0, lk), c.str(1, p.Token), c.int(millis(p.TTL))}
	return c
}
