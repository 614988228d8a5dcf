// Package config reads the configuration file of `tasklock serve` and
// `tasklock validate`: the store, the node name and the jobs.
//
//	store: sqlite://./tasklock.db      # the default when omitted
//	node: web-1                         # default host:pid
//	labels: [gpu, zone=eu]              # this node's labels, for nodes:
//	pools: {reports: 2}                 # at most 2 runs of the pool at once
//	jobs:
//	  - name: nightly-report
//	    schedule: "0 30 2 * * *"
//	    timezone: Europe/Berlin
//	    command: ["/usr/local/bin/report", "--all"]
//	    timeout: 10m
//	    overlap: skip
//	    misfire: {policy: once, grace: 30s}
//	    retries: {max: 3, backoff: 10s}
//	    min_hold: 5s
//	    max_hold: 1h
//	    pool: reports
//
// # Keys
//
// At the top of the file, besides store, node and jobs:
//
//	pools           schedule.Config.Pools: a mapping of pool names to
//	                sizes, each 1 to 10000; every node of the fleet must
//	                give a pool the same size
//	labels          schedule.Config.Labels: this node's labels, a list;
//	                serve's --label flags replace it
//	output_max      schedule.Config.OutputMax: how much of each run's
//	                output the history keeps, a size (65536, 64KiB; at
//	                most 512KiB; default 64KiB; 0 keeps none); serve's
//	                --output-max replaces it
//	preferred_nodes schedule.Config.PreferredNodes: true to have each
//	                plain job's tick claimed by its preferred node only,
//	                the other nodes claiming it 1s later as a fallback
//	                (default false: every node claims every tick); every
//	                node of the fleet should say the same
//	claim_ahead     schedule.Config.ClaimAhead: a duration up to 1s
//	                (default 0) by which a plain job's tick is claimed,
//	                and its lock taken, before the tick, so that its
//	                command starts at the tick; not with preferred_nodes
//	notify          the notifications of every job (Notify): a mapping of
//	  on            the events: failure, timeout, lost, missed,
//	                interrupted, recovery (default: all)
//	  webhook       url, secret or secret_env (the variable holding the
//	                signing secret; required, and it must be set), timeout
//	  command       a list: run with the notification as JSON on stdin
//	  command_timeout, attempts, backoff, max_time: delivery bounds
//	                A job's own notify: replaces the keys it gives (Merge);
//	                "notify: off" turns them off for the job.
//
// Pool names and labels are 1 to 63 bytes of ASCII letters, digits and
// - _ . : = /, starting with a letter or digit (schedule.CheckLabel).
//
// Every key of a job maps to a field of schedule.Job, whose documentation
// gives its default and meaning:
//
//	name            Name
//	schedule        Schedule (cron with optional seconds, @daily, "@every 10s")
//	timezone        TimeZone (IANA name; default UTC)
//	timeout         Timeout
//	overlap         Overlap: skip | allow
//	misfire         Misfire, as a policy alone ("misfire: skip") or a mapping:
//	  policy        Misfire: once | skip | catch_up
//	  grace         MisfireAfter
//	  window        MisfireWindow
//	  max           CatchUpMax (catch_up only)
//	retries         Retries, as a count alone ("retries: 3") or a mapping:
//	  max           Retries
//	  backoff       RetryBackoff
//	  backoff_max   RetryBackoffMax
//	jitter          Jitter
//	lock_ttl        Lock.TTL (of the job's lock, or of a pool's or
//	                max_concurrent's permit; with overlap allow and
//	                neither it has no effect, and is an error)
//	min_hold        Lock.MinHold
//	max_hold        Lock.MaxHold
//	run_on          LeaderOnly: "leader" (only the serve fleet's elected
//	                leader runs it) or "any" (the default)
//	after           After: a list of the jobs this one waits for, tick by
//	                tick ("after: [extract, load]"; one name alone is a
//	                list of one). Each must be a job of the file, and no
//	                job may wait for itself through others:
//	                  config.yaml:9: job "a": after: cycle a -> b -> a: ...
//	within          Within: how long a tick waits for its parents before
//	                it is recorded as skipped (default: until the job's
//	                next tick; at most misfire.window); only with after
//	max_concurrent  MaxConcurrent: up to N runs of the job at once across
//	                the fleet, on a semaphore; implies overlap allow, so
//	                overlap: skip with it is an error; a tick that finds N
//	                runs in progress is skipped
//	pool            Pool: a name under pools:; each run holds one of the
//	                pool's permits while it runs, retries included
//	pool_wait       PoolWait: how long a run waits for a free permit of
//	                its pool (default: until the job's next tick); then
//	                the tick is recorded skipped, the reason naming the pool
//	nodes           Nodes: a list of labels; only nodes carrying every one
//	                (labels:, --label) claim the job's ticks and triggers
//	shards          Shards: split each tick into N shard-runs spread over
//	                the live nodes (at most 1024; not with run_on: leader);
//	                a command gets TASKLOCK_SHARD (0 to N-1) and
//	                TASKLOCK_SHARDS, an http job X-Tasklock-Shard(s)
//
// and exactly one of the handlers the daemon provides:
//
//	command         a list: the program and its arguments, run without a shell
//	kill_grace      command jobs: SIGTERM to SIGKILL (default 2s, above 0,
//	                less than half of lock_ttl when the runs take a lock);
//	                it is also the job's Lock.Grace
//	http            a mapping: method (default GET), url, headers (a
//	                mapping), body, timeout (default 1m, above 0)
//
// Durations are Go durations (300ms, 10s, 1h30m), at most MaxDuration
// (8760h, 365 days). Names (node, job names) are valid UTF-8 without
// control characters.
//
// # Errors
//
// Load checks everything it can without connecting to the store: the YAML,
// every key (unknown keys are errors), every value, and each job as
// schedule.Scheduler.Add would. It reports every error, not only the first,
// each naming the file, the line, the job and the key:
//
//	config.yaml:7: job "nightly-report": timeout: invalid duration "10x"
//
// A store URL appears in messages only in its redact.URL form.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/schedule"
)

// DefaultStore is the store used when the file names none.
const DefaultStore = "sqlite://./tasklock.db"

// DefaultKillGrace is Job.KillGrace when kill_grace is not set.
const DefaultKillGrace = 2 * time.Second

// DefaultHTTPTimeout is HTTP.Timeout when http.timeout is not set.
const DefaultHTTPTimeout = time.Minute

// MaxDuration bounds every duration of the file: a year,
// tasklock.MaxTTL, the longest lease a lock may have.
const MaxDuration = tasklock.MaxTTL

// DefaultOutputMax is File.OutputMax when output_max: is not set: 64 KiB,
// which every store keeps per run record.
const DefaultOutputMax = 64 << 10

// MaxOutputMax bounds output_max: 512 KiB, which every store's record
// holds with room to spare (ZooKeeper's nodes hold about 1 MB).
const MaxOutputMax = 512 << 10

// ParseSize reads a byte size: a whole number of bytes, or one followed by
// KiB or MiB (1024-based; k, K, KB and M, MB mean the same), e.g. 65536,
// 64KiB, 512KiB; at most MaxOutputMax. It is used for output_max: and
// serve's --output-max.
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"KB", 1 << 10}, {"k", 1 << 10}, {"K", 1 << 10}, {"MiB", 1 << 20}, {"MB", 1 << 20}, {"M", 1 << 20}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 32)
	switch {
	case err != nil || t == "":
		return 0, fmt.Errorf("want a size of at most 512KiB such as 65536, 64KiB or 512KiB (bytes, KiB or MiB), got %q", s)
	case n < 0:
		return 0, fmt.Errorf("%q is negative", s)
	case n*int64(mult) > MaxOutputMax:
		return 0, fmt.Errorf("%q is more than %d bytes (512KiB)", s, MaxOutputMax)
	}
	return int(n) * mult, nil
}

// MaxFileSize is the largest configuration file Load reads, in bytes.
const MaxFileSize = 4 << 20

// File is a checked configuration file.
type File struct {
	// Store is the store URL (see storeurl); DefaultStore when the file
	// names none. It may hold a password: print it with redact.URL.
	Store string
	// StoreGiven reports whether the file names the store (store:), for
	// serve, where $TASKLOCK_STORE comes before DefaultStore but after
	// the file.
	StoreGiven bool
	// Node is the scheduler's node name; "" means host:pid.
	Node string
	// Pools are the run pools by name, with their sizes (pools:), for
	// schedule.Config.Pools; nil when none.
	Pools map[string]int
	// Labels are the node's labels (labels:), for schedule.Config.Labels.
	Labels []string
	// OutputMax is how many bytes of each run's output the history keeps
	// (output_max:, for schedule.Config.OutputMax): its head and tail past
	// that. DefaultOutputMax when the file does not say; 0 keeps none.
	OutputMax int
	// PreferredNodes is preferred_nodes:, for
	// schedule.Config.PreferredNodes: each plain job's tick claimed by its
	// preferred node, the others claiming it a second later as a fallback.
	PreferredNodes bool
	// ClaimAhead is claim_ahead:, for schedule.Config.ClaimAhead: how long
	// before a plain job's tick it is claimed and its lock taken.
	ClaimAhead time.Duration
	// Notify is the file's notify:, the notifications of every job that
	// does not turn them off; nil when not given (see Merge).
	Notify *Notify
	// Jobs are the jobs, in the file's order, with distinct names.
	Jobs []Job
}

// Job is one checked job of the file.
type Job struct {
	// Job holds the scheduling fields; its Handler is nil, for the caller
	// to set.
	schedule.Job
	// Command is the program and its arguments, for a command job; nil
	// for an HTTP job.
	Command []string
	// KillGrace is the time from SIGTERM to SIGKILL when a command must
	// stop (DefaultKillGrace when not set); 0 for an HTTP job.
	KillGrace time.Duration
	// HTTP is the request of an HTTP job; nil for a command job.
	HTTP *HTTP
	// Notify is the job's own notify:, nil when not given; Merge it with
	// File.Notify for the job's notifications.
	Notify *Notify
	// NoEffect names the keys of a job read by ParseJob that have no
	// effect ("lock_ttl has no effect: ..."), which Load and Define
	// refuse: serve warns of them once per stored version.
	NoEffect []string
	// Line is the line of the file where the job starts.
	Line int
}

// HTTP is the request an HTTP job makes.
type HTTP struct {
	Method  string            // default GET
	URL     string            // absolute http:// or https:// URL
	Headers map[string]string // canonical header names
	Body    string
	Timeout time.Duration // DefaultHTTPTimeout when not set
}

// Error is one mistake in a configuration file.
type Error struct {
	File  string
	Line  int    // 0 when unknown
	Job   string // the job's name, or "jobs[N]" for a job without one; "" outside jobs
	Field string // the key, dotted for nested keys ("misfire.grace"); "" for the file
	Msg   string
}

// Error implements error: "file:line: job "name": field: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	switch {
	case strings.HasPrefix(e.Job, "jobs["):
		b.WriteString(e.Job + ": ")
	case e.Job != "":
		fmt.Fprintf(&b, "job %q: ", e.Job)
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every mistake Load found, in the order of the file. It is
// never empty when returned as an error.
type Errors []*Error

// Error implements error: one mistake a line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the mistakes, for errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// AsErrors returns the mistakes in err when it is an Errors, or err as the
// only mistake otherwise (reading the file failed); nil for nil.
func AsErrors(err error) []string {
	if err == nil {
		return nil
	}
	var es Errors
	if errors.As(err, &es) {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.Error()
		}
		return out
	}
	return []string{err.Error()}
}

// CheckNodeName returns "" when name can be a node name (node:, serve's
// --node, $TASKLOCK_NODE) — non-empty, at most tasklock.MaxOwnerLen bytes
// of valid UTF-8 without control characters — and otherwise what is wrong.
func CheckNodeName(name string) string {
	if name == "" {
		return "empty"
	}
	return checkName(name, tasklock.MaxOwnerLen)
}
