package dashboard

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/schedule"
)

// MaxNextTicks bounds /api/jobs's ticks= parameter.
const MaxNextTicks = 20

// DefField is one line of what a job runs, as its page shows it (see
// Options.Handler): a key of serve's configuration file and its value.
type DefField struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// definition is how a configured job is defined, for its page: the
// fields of its schedule.Job and what it runs (Options.Handler). Times
// are milliseconds; a zero value is the default, shown by the page.
type definition struct {
	Schedule      string     `json:"schedule"`
	TimeZone      string     `json:"timezone"`
	Timeout       int64      `json:"timeout_ms"`
	Retries       int        `json:"retries"`
	RetryBackoff  int64      `json:"retry_backoff_ms"`
	RetryMax      int64      `json:"retry_backoff_max_ms"`
	Overlap       string     `json:"overlap"`
	Misfire       string     `json:"misfire"`
	MisfireAfter  int64      `json:"misfire_after_ms"`
	MisfireWindow int64      `json:"misfire_window_ms"`
	CatchUpMax    int        `json:"catch_up_max"`
	Jitter        int64      `json:"jitter_ms"`
	Shards        int        `json:"shards"`
	MaxConcurrent int        `json:"max_concurrent"`
	Pool          string     `json:"pool"`
	PoolWait      int64      `json:"pool_wait_ms"`
	Nodes         []string   `json:"nodes"`
	RunOn         string     `json:"run_on"` // leader or any
	After         []string   `json:"after"`
	Within        int64      `json:"within_ms"`
	LockTTL       int64      `json:"lock_ttl_ms"`
	MinHold       int64      `json:"min_hold_ms"`
	MaxHold       int64      `json:"max_hold_ms"`
	Handler       []DefField `json:"handler"`
}

// defOf is j's definition; Handler's fields go through redact.Text as a
// last guard, Options.Handler having hidden the secrets it knows.
func (h *handler) defOf(j schedule.Job) *definition {
	d := &definition{
		Schedule: j.Schedule, TimeZone: j.TimeZone, Timeout: j.Timeout.Milliseconds(),
		Retries: j.Retries, RetryBackoff: j.RetryBackoff.Milliseconds(), RetryMax: j.RetryBackoffMax.Milliseconds(),
		Overlap: j.Overlap.String(), Misfire: j.Misfire.String(),
		MisfireAfter: j.MisfireAfter.Milliseconds(), MisfireWindow: j.MisfireWindow.Milliseconds(), CatchUpMax: j.CatchUpMax,
		Jitter: j.Jitter.Milliseconds(), Shards: j.Shards, MaxConcurrent: j.MaxConcurrent,
		Pool: j.Pool, PoolWait: j.PoolWait.Milliseconds(), Nodes: j.Nodes, RunOn: "any", After: j.After,
		Within: j.Within.Milliseconds(), LockTTL: j.Lock.TTL.Milliseconds(), MinHold: j.Lock.MinHold.Milliseconds(),
		MaxHold: j.Lock.MaxHold.Milliseconds(), Handler: []DefField{},
	}
	if j.LeaderOnly {
		d.RunOn = "leader"
	}
	if d.Nodes == nil {
		d.Nodes = []string{}
	}
	if d.After == nil {
		d.After = []string{}
	}
	if h.opts.Handler != nil {
		for _, f := range h.opts.Handler(j.Name) {
			d.Handler = append(d.Handler, DefField{Key: f.Key, Value: redact.Text(f.Value)})
		}
	}
	return d
}

// ticksParam reads /api/jobs's ticks= (how many next ticks per job).
func ticksParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("ticks")
	if s == "" {
		return nextTicks, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxNextTicks {
		return 0, errors.New("ticks: want a whole number from 1 to " + strconv.Itoa(MaxNextTicks))
	}
	return n, nil
}
