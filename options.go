package tasklock

import (
	"log/slog"
	"os"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tasklock/tasklock/internal/redact"
)

// Defaults and limits of the options.
const (
	DefaultTTL = 10 * time.Second // ObtainOptions.TTL when zero
	MinTTL     = 10 * time.Millisecond
	// MaxTTL bounds ObtainOptions.TTL, MinHold and Extend's duration: a
	// lease longer than a year is a mistake, and beyond what some stores
	// can hold (Redis rejects an expiry time that overflows).
	MaxTTL       = 365 * 24 * time.Hour
	MaxKeyLength = 512 // bytes
	MaxOwnerLen  = 256 // bytes
)

// Config configures a Locker. A nil *Config means all defaults. New never
// writes into it.
type Config struct {
	// Owner is the owner name other processes see for this Locker's locks
	// (in NotObtainedError, the CLI and the dashboard): at most
	// MaxOwnerLen bytes of valid UTF-8 without control characters.
	// Default: host:pid.
	Owner string
	// Logger receives the Locker's logs. Nil: warnings and above go to
	// slog.Default().
	Logger *slog.Logger
	// Clock is the source of time. Nil: SystemClock.
	Clock Clock
	// OnEvent, when set, is called for every lock event. It runs on the
	// Locker's goroutines and the callers', possibly several at once, and
	// must not block.
	OnEvent func(Event)
}

// ObtainOptions are the per-call options of Obtain and TryObtain, and of
// the calls built on them (Once, WithLock, RWMutex, Semaphore, Election).
// A nil *ObtainOptions means all defaults; zero fields take their defaults.
type ObtainOptions struct {
	// TTL is the lease length at the store. Zero: DefaultTTL. A holder that
	// dies is replaced no later than TTL after its last renewal.
	TTL time.Duration
	// NoRenew turns automatic renewal off: the lock is a plain lease that
	// ends after TTL unless Extend is called.
	NoRenew bool
	// MaxHold bounds how long the lock is held in all (ShedLock's
	// lockAtMostFor): renewal never extends the lease past acquisition +
	// MaxHold, and Done closes with ErrMaxHold before the lease can expire.
	// Zero: unbounded.
	MaxHold time.Duration
	// MinHold keeps the lease until acquisition + MinHold even if Release
	// is called earlier (ShedLock's lockAtLeastFor). Zero: none.
	MinHold time.Duration
	// ProgressTimeout, when set, stops renewal when Heartbeat has not been
	// called for this long, and closes Done with ErrStalled: a stuck
	// worker is not renewed forever. The lease then expires at the store.
	ProgressTimeout time.Duration
	// Owner overrides Config.Owner for this lock.
	Owner string
	// Wait bounds how long Obtain waits for a held lock, on top of its ctx.
	// Zero: until ctx ends. TryObtain ignores it.
	Wait time.Duration
	// Grace makes Done close this much earlier than the lease's local
	// validity ends, leaving the holder that long to stop its work before
	// the store could grant the lock to anyone else: a loss, MaxHold or a
	// failed renewal is signalled Grace ahead. It must be less than half the
	// TTL (and than MaxHold). tasklock exec sets it to --kill-grace.
	Grace time.Duration
	// Fair makes Obtain wait in a first-come, first-served queue kept by
	// the store: waiters are served in the order they arrived across every
	// client, and a waiter that dies or gives up leaves the queue within
	// its TTL, so it never blocks the line. On etcd, ZooKeeper and memstore
	// every wait is fair already; on Redis and the SQL stores it is opt-in
	// here, and costs one more store call for a free key; a store that
	// keeps no queue (RedLock) refuses it with an error matching
	// ErrUnsupported. A caller that does not ask for fairness may still
	// take a free key ahead of the queue. Only mutexes wait fairly: a
	// RWMutex or Semaphore refuses it. TryObtain ignores it.
	Fair bool
}

// resolved holds the validated options of one call.
type resolved struct {
	ttl, maxHold, minHold, progress, wait, grace time.Duration
	renew, fair                                  bool
	owner                                        string
	holds                                        *holdNode // the holds the call's ctx carries
	kind                                                   // the kind of hold asked for (kinds.go)
}

func (lk *Locker) resolve(key string, o *ObtainOptions) (resolved, error) {
	if err := ValidateKey(key); err != nil {
		return resolved{}, err
	}
	if err := o.Validate(); err != nil {
		return resolved{}, err
	}
	r := resolved{ttl: DefaultTTL, renew: true, owner: lk.owner}
	if o == nil {
		return r, nil
	}
	if o.TTL != 0 {
		r.ttl = o.TTL
	}
	r.maxHold, r.minHold, r.progress, r.wait, r.grace = o.MaxHold, o.MinHold, o.ProgressTimeout, o.Wait, o.Grace
	r.renew, r.fair = !o.NoRenew, o.Fair
	if o.Owner != "" {
		r.owner = o.Owner
	}
	return r, nil
}

// Validate checks o as Obtain and TryObtain do, with zero fields taking
// their defaults, and returns a *OptionError naming the first invalid field
// ("ObtainOptions.TTL", ...), or nil. A nil o is valid. Packages that take
// ObtainOptions from their users, such as schedule for Job.Lock, check them
// here, so that the rules live in one place.
func (o *ObtainOptions) Validate() error {
	if o == nil {
		return nil
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	switch {
	case ttl < MinTTL:
		return badOption("ObtainOptions.TTL", "%v is below the minimum %v", o.TTL, MinTTL)
	case ttl > MaxTTL:
		return badOption("ObtainOptions.TTL", "%v is above the maximum %v", o.TTL, MaxTTL)
	case o.MinHold > MaxTTL:
		return badOption("ObtainOptions.MinHold", "%v is above the maximum %v", o.MinHold, MaxTTL)
	case o.MaxHold < 0:
		return badOption("ObtainOptions.MaxHold", "%v is negative", o.MaxHold)
	case o.MinHold < 0:
		return badOption("ObtainOptions.MinHold", "%v is negative", o.MinHold)
	case o.MaxHold > 0 && o.MinHold > o.MaxHold:
		return badOption("ObtainOptions.MinHold", "%v is greater than MaxHold %v", o.MinHold, o.MaxHold)
	case o.MaxHold > 0 && o.MaxHold < MinTTL:
		return badOption("ObtainOptions.MaxHold", "%v is below the minimum %v", o.MaxHold, MinTTL)
	case o.ProgressTimeout < 0:
		return badOption("ObtainOptions.ProgressTimeout", "%v is negative", o.ProgressTimeout)
	case o.ProgressTimeout > 0 && o.NoRenew:
		return badOption("ObtainOptions.ProgressTimeout", "needs renewal (NoRenew is set)")
	case o.Wait < 0:
		return badOption("ObtainOptions.Wait", "%v is negative", o.Wait)
	case o.Grace < 0:
		return badOption("ObtainOptions.Grace", "%v is negative", o.Grace)
	case o.Grace > 0 && o.Grace >= ttl/2:
		return badOption("ObtainOptions.Grace", "%v is not less than half the TTL %v", o.Grace, ttl)
	case o.Grace > 0 && o.MaxHold > 0 && o.Grace >= o.MaxHold:
		return badOption("ObtainOptions.Grace", "%v is not less than MaxHold %v", o.Grace, o.MaxHold)
	}
	if o.Owner != "" {
		// An empty Owner takes Config.Owner, checked by New.
		return validateOwner("ObtainOptions.Owner", o.Owner)
	}
	return nil
}

// ValidateKey reports whether key can name a lock: non-empty, at most
// MaxKeyLength bytes of valid UTF-8 without control characters (C0, DEL
// and C1: unicode.IsControl).
func ValidateKey(key string) error {
	switch {
	case key == "":
		return badOption("key", "empty")
	case len(key) > MaxKeyLength:
		return badOption("key", "%d bytes long, the maximum is %d", len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return badOption("key", "not valid UTF-8")
	}
	for _, c := range key {
		if unicode.IsControl(c) { // C0, DEL and C1
			return badOption("key", "contains control character %U", c)
		}
	}
	return nil
}

// validateOwner checks an owner name: at most MaxOwnerLen bytes of valid
// UTF-8 without control characters.
func validateOwner(field, owner string) error {
	if len(owner) > MaxOwnerLen {
		return badOption(field, "%d bytes long, the maximum is %d", len(owner), MaxOwnerLen)
	}
	if msg := redact.CheckName(owner); msg != "" {
		// A newline would forge rows in listings, an escape reach terminals.
		return badOption(field, "%s", msg)
	}
	return nil
}

// DefaultOwner returns host:pid, the default owner name.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}
