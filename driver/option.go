package driver

import "strconv"

// OptionError is the one error type for a bad option, argument or
// configuration field, whichever package reports it: tasklock's New,
// Obtain and TryObtain, schedule's New and Add, and every store's New (and
// Migrate) in this module. Package tasklock re-exports it as
// tasklock.OptionError, so that
//
//	var oe *tasklock.OptionError
//	if errors.As(err, &oe) { ... oe.Field ... }
//
// works for all of them. Stores outside this module should return it too.
//
// Its message reads "PKG: [job "JOB": ]invalid FIELD[ "VALUE"]: REASON",
// e.g. `pgstore: invalid Options.Mode "x": want "lease" or "connection"`.
type OptionError struct {
	// Pkg is the package that reports the error, e.g. "tasklock",
	// "schedule", "pgstore": the message's prefix.
	Pkg string
	// Job is the name of the scheduler job the field belongs to, for the
	// fields of a schedule.Job; "" otherwise.
	Job string
	// Field names what is wrong as the caller wrote it: a struct field
	// ("ObtainOptions.TTL", "Options.Mode", "Job.Schedule",
	// "Job.Lock.MaxHold"), or an argument ("key", "store", "client",
	// "clients[1]").
	Field string
	// Value is the offending value, quoted after Field in the message;
	// "" shows none.
	Value string
	// Reason says what is wrong. When it is empty the message shows Err's
	// text instead.
	Reason string
	// Err is the underlying error, if any (a *schedule.ParseError for
	// Job.Schedule): errors.Is and errors.As see it.
	Err error
}

// Error implements error.
func (e *OptionError) Error() string {
	s := ""
	if e.Pkg != "" {
		s = e.Pkg + ": "
	}
	if e.Job != "" {
		s += "job " + strconv.Quote(e.Job) + ": "
	}
	s += "invalid " + e.Field
	if e.Value != "" {
		s += " " + strconv.Quote(e.Value)
	}
	switch {
	case e.Reason != "":
		s += ": " + e.Reason
	case e.Err != nil:
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *OptionError) Unwrap() error { return e.Err }
