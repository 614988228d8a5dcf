package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tasklock/tasklock/internal/jobpresence"
	"github.com/tasklock/tasklock/internal/redact"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// backfillFlags are the flags of jobs backfill and jobs rerun.
type backfillFlags struct {
	from, to, overlap string
	max               int
	rerun             bool
}

func (f *backfillFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.from, "from", "", "")
	fs.StringVar(&f.to, "to", "", "")
	fs.StringVar(&f.overlap, "overlap", "skip", "")
	fs.IntVar(&f.max, "max", schedule.DefaultBackfillMax, "")
	fs.BoolVar(&f.rerun, "rerun", false, "")
}

// options checks the flags both commands share.
func (f *backfillFlags) options() (schedule.BackfillOptions, error) {
	o := schedule.BackfillOptions{Rerun: f.rerun, Max: f.max}
	if err := o.Overlap.UnmarshalText([]byte(f.overlap)); err != nil {
		return o, usagef("--overlap %s: want skip or allow", redact.Quote(f.overlap))
	}
	switch {
	case f.max <= 0:
		return o, usagef("--max must be positive, got %d", f.max)
	case f.max > schedule.MaxBackfill:
		return o, usagef("--max %d is more than %d, the most one backfill asks for: split the range into several backfills", f.max, schedule.MaxBackfill)
	}
	return o, nil
}

// parseTick reads a time given to flag: RFC 3339 ("2026-11-27T02:00:00Z",
// any offset), or in UTC "2026-11-27T02:00", "2026-11-27 02:00:00" or a
// date alone.
func parseTick(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, usagef("%s is required: a time such as 2026-11-27T02:00:00Z", flag)
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, usagef("%s %s: want a time such as 2026-11-27T02:00:00Z (RFC 3339; without an offset it is UTC)", flag, redact.Quote(s))
}

// window checks --from and --to.
func (f *backfillFlags) window() (from, to time.Time, err error) {
	if from, err = parseTick("--from", f.from); err != nil {
		return from, to, err
	}
	if to, err = parseTick("--to", f.to); err != nil {
		return from, to, err
	}
	if to.Before(from) {
		return from, to, usagef("--to %s is before --from %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return from, to, nil
}

// jobsBackfill asks the fleet to run JOB's ticks in [from, to] (window's),
// with o (options').
func jobsBackfill(ctx context.Context, l ledger.Ledger, job string, from, to time.Time, o schedule.BackfillOptions, asJSON bool, w io.Writer) error {
	ticks, err := schedule.RequestBackfill(ctx, l, job, from, to, o)
	var tooMany *schedule.TooManyTicksError
	if errors.As(err, &tooMany) {
		holds := fmt.Sprintf("holds %d ticks, more than --max %d", tooMany.Ticks, tooMany.Max)
		if tooMany.Ticks == 0 { // counting stopped past --max
			holds = fmt.Sprintf("holds more than --max %d ticks", tooMany.Max)
		}
		larger := "a larger --max"
		if tooMany.Max >= schedule.MaxBackfill {
			larger = fmt.Sprintf("several backfills (--max is at most %d)", schedule.MaxBackfill)
		}
		return usagef("backfill %s: --from %s to --to %s %s: ask for a shorter range or %s",
			redact.Quote(job), from.Format(time.RFC3339), to.Format(time.RFC3339), holds, larger)
	}
	if err != nil && len(ticks) > 0 {
		return partialBackfill(job, ticks, o, err)
	}
	if err != nil {
		return pastError(err)
	}
	if asJSON {
		return writeJSON(w, struct {
			Job   string      `json:"job"`
			Ticks []time.Time `json:"ticks"`
			Rerun bool        `json:"rerun"`
		}{job, ticks, o.Rerun})
	}
	what := "ticks that have not run yet run"
	if o.Rerun {
		what = "every tick runs, those that ran before as a new attempt"
	}
	fmt.Fprintf(w, "requested %d ticks of %s, %s to %s: %s, each once across the fleet (overlap %s)\n",
		len(ticks), redact.Quote(job), ticks[0].Format(time.RFC3339), ticks[len(ticks)-1].Format(time.RFC3339), what, o.Overlap)
	fmt.Fprintf(w, "follow them with: tasklock jobs history --job %s\n", shellQuote(job))
	return nil
}

// partialBackfill is the error of a backfill that failed (ran out of
// --timeout, say) after it requested ticks: it says how many, that they
// stay and run, and how to ask for the rest. Taking them back is not
// offered: a node may have started any of them already (nodes take
// requests within a second), and the store just failed to answer.
func partialBackfill(job string, ticks []time.Time, o schedule.BackfillOptions, err error) error {
	last := ticks[len(ticks)-1]
	again := "asking again for the same range runs no tick twice"
	if o.Rerun {
		again = fmt.Sprintf("with --rerun, asking again for the same range would run them twice: ask for the rest with --from %s", last.Add(time.Second).Format(time.RFC3339))
	}
	return fmt.Errorf("backfill %s stopped after requesting %s, %s to %s: those requests stay and the fleet runs them (jobs list shows the ones not taken yet, jobs history their runs); %s. It stopped on: %w",
		redact.Quote(job), plural(len(ticks), "tick"), ticks[0].Format(time.RFC3339), last.Format(time.RFC3339), again, err)
}

// jobsRerun asks the fleet to run JOB's tick t again, with o (options').
func jobsRerun(ctx context.Context, l ledger.Ledger, job string, t time.Time, o schedule.BackfillOptions, asJSON bool, w io.Writer) error {
	id, err := schedule.RequestRerun(ctx, l, job, t, o)
	if err != nil {
		return pastError(err)
	}
	if asJSON {
		return writeJSON(w, struct {
			Job     string    `json:"job"`
			Tick    time.Time `json:"tick"`
			Request string    `json:"request"`
		}{job, t, id})
	}
	fmt.Fprintf(w, "requested a re-run of %s's tick %s, as its next attempt (request %s)\n", redact.Quote(job), t.Format(time.RFC3339), id)
	return nil
}

// pastError turns the schedule package's refusals into what the command
// reports: a job nobody registered is exit 1, a bad range a usage error.
func pastError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "schedule: ")
	switch {
	case errors.Is(err, schedule.ErrNotRegistered):
		return noJobError(msg)
	case errors.Is(err, schedule.ErrBadRequest):
		return usagef("%s", msg)
	}
	return err
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkRequestable refuses a backfill or re-run of job when no node of
// serve seems to have it any more (checkTriggerable): its requests would
// wait, pending, and never run. A job no node registered is left to
// RequestBackfill and RequestRerun, which refuse it.
func checkRequestable(ctx context.Context, l ledger.Ledger, job string, now time.Time) error {
	st, ok, err := jobpresence.State(ctx, l, job)
	if err != nil || !ok || st.Spec == "" {
		return err
	}
	return checkTriggerable(ctx, l, st, now)
}
