package schedule

import (
	"errors"
	"fmt"

	"github.com/tasklock/tasklock"
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

// badOption returns the error of New, Add and Runs for an invalid argument
// or Config field: a *tasklock.OptionError (the one type for a bad option
// across the module) naming the field, e.g. "Config.PollInterval".
func badOption(field, format string, args ...any) *tasklock.OptionError {
	return &tasklock.OptionError{Pkg: "schedule", Field: field, Reason: fmt.Sprintf(format, args...)}
}

// badJob returns the error of Add for an invalid field of the job named
// job: a *tasklock.OptionError with Job set and Field naming it, e.g.
// "Job.Schedule" (then err is the *ParseError) or "Job.Lock.MaxHold".
func badJob(job, field, reason string, err error) *tasklock.OptionError {
	return &tasklock.OptionError{Pkg: "schedule", Job: job, Field: field, Reason: reason, Err: err}
}
