package tasklock

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
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

// ObtainOptions are the per-call options of Obtain, TryObtain and Do. A nil
// *ObtainOptions means all defaults; zero fields take their defaults.
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
}

// resolved holds the validated options of one call.
type resolved struct {
	ttl, maxHold, minHold, progress, wait, grace time.Duration
	renew                                        bool
	owner                                        string
}

func (lk *Locker) resolve(key string, o *ObtainOptions) (resolved, error) {
	if err := ValidateKey(key); err != nil {
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
	r.renew = !o.NoRenew
	if o.Owner != "" {
		r.owner = o.Owner
	}
	switch {
	case r.ttl < MinTTL:
		return r, &OptionError{"ObtainOptions.TTL", fmt.Sprintf("%v is below the minimum %v", o.TTL, MinTTL)}
	case r.ttl > MaxTTL:
		return r, &OptionError{"ObtainOptions.TTL", fmt.Sprintf("%v is above the maximum %v", o.TTL, MaxTTL)}
	case r.minHold > MaxTTL:
		return r, &OptionError{"ObtainOptions.MinHold", fmt.Sprintf("%v is above the maximum %v", r.minHold, MaxTTL)}
	case r.maxHold < 0:
		return r, &OptionError{"ObtainOptions.MaxHold", fmt.Sprintf("%v is negative", r.maxHold)}
	case r.minHold < 0:
		return r, &OptionError{"ObtainOptions.MinHold", fmt.Sprintf("%v is negative", r.minHold)}
	case r.maxHold > 0 && r.minHold > r.maxHold:
		return r, &OptionError{"ObtainOptions.MinHold", fmt.Sprintf("%v is greater than MaxHold %v", r.minHold, r.maxHold)}
	case r.maxHold > 0 && r.maxHold < MinTTL:
		return r, &OptionError{"ObtainOptions.MaxHold", fmt.Sprintf("%v is below the minimum %v", r.maxHold, MinTTL)}
	case r.progress < 0:
		return r, &OptionError{"ObtainOptions.ProgressTimeout", fmt.Sprintf("%v is negative", r.progress)}
	case r.progress > 0 && !r.renew:
		return r, &OptionError{"ObtainOptions.ProgressTimeout", "needs renewal (NoRenew is set)"}
	case r.wait < 0:
		return r, &OptionError{"ObtainOptions.Wait", fmt.Sprintf("%v is negative", r.wait)}
	case r.grace < 0:
		return r, &OptionError{"ObtainOptions.Grace", fmt.Sprintf("%v is negative", r.grace)}
	case r.grace > 0 && r.grace >= r.ttl/2:
		return r, &OptionError{"ObtainOptions.Grace", fmt.Sprintf("%v is not less than half the TTL %v", r.grace, r.ttl)}
	case r.grace > 0 && r.maxHold > 0 && r.grace >= r.maxHold:
		return r, &OptionError{"ObtainOptions.Grace", fmt.Sprintf("%v is not less than MaxHold %v", r.grace, r.maxHold)}
	}
	if err := validateOwner("ObtainOptions.Owner", r.owner); err != nil {
		return r, err
	}
	return r, nil
}

// ValidateKey reports whether key can name a lock: non-empty, at most
// MaxKeyLength bytes of valid UTF-8 without control characters.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return &OptionError{"key", "empty"}
	case len(key) > MaxKeyLength:
		return &OptionError{"key", fmt.Sprintf("%d bytes long, the maximum is %d", len(key), MaxKeyLength)}
	case !utf8.ValidString(key):
		return &OptionError{"key", "not valid UTF-8"}
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f {
			return &OptionError{"key", fmt.Sprintf("contains control character %U", c)}
		}
	}
	return nil
}

// validateOwner checks an owner name: at most MaxOwnerLen bytes of valid
// UTF-8 without control characters.
func validateOwner(field, owner string) error {
	if len(owner) > MaxOwnerLen {
		return &OptionError{field, fmt.Sprintf("%d bytes long, the maximum is %d", len(owner), MaxOwnerLen)}
	}
	if msg := redact.CheckName(owner); msg != "" {
		// A newline would forge rows in listings, an escape reach terminals.
		return &OptionError{field, msg}
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
