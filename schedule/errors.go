package schedule

import (
	"errors"
	"fmt"
)

// ErrUnknownJob is returned by Pause, Resume and Trigger for a job that was
// not added to this Scheduler.
var ErrUnknownJob = errors.New("schedule: unknown job")

// ErrShutdown is returned by calls on a Scheduler that was shut down, and is
// the cause of a run's context when Shutdown's grace period ended before the
// run did.
var ErrShutdown = errors.New("schedule: shut down")

// ErrTimeout is the cause of a run's context when Job.Timeout passed.
var ErrTimeout = errors.New("schedule: run timed out")

// ErrStarted is returned by Start on a Scheduler that was started before.
var ErrStarted = errors.New("schedule: already started")

// JobError is returned by Add for an invalid job. Field names the offending
// field, e.g. "Job.Schedule"; Err, when set, is the underlying error (a
// *ParseError for Job.Schedule).
type JobError struct {
	Job    string
	Field  string
	Reason string
	Err    error
}

// Error implements error.
func (e *JobError) Error() string {
	reason := e.Reason
	var pe *ParseError
	if errors.As(e.Err, &pe) {
		reason = pe.detail()
	} else if e.Err != nil {
		reason = e.Err.Error()
	}
	return fmt.Sprintf("schedule: job %q: invalid %s: %s", e.Job, e.Field, reason)
}

// Unwrap returns Err.
func (e *JobError) Unwrap() error { return e.Err }

// ConfigError is returned by New for an invalid argument or Config field.
// Field names it, e.g. "Config.PollInterval".
type ConfigError struct {
	Field  string
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string { return "schedule: invalid " + e.Field + ": " + e.Reason }
