package schedule

import (
	"fmt"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// A Schedule says when a job's ticks are: the instants it is due.
type Schedule interface {
	// Next returns the first tick strictly after t, in UTC and a whole
	// second, or the zero Time when there is none.
	Next(t time.Time) time.Time
	// String returns the spec the schedule was parsed from.
	String() string
}

// MaxSpecLength is the longest spec Parse accepts, in bytes.
const MaxSpecLength = 1024

// searchYears bounds how far ahead Next looks for a tick: far enough for
// February 29th, which can be eight years away.
const searchYears = 9

// cronParser parses the fields; tick arithmetic is ours (see cronSchedule).
var cronParser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// fieldNames name the six fields of a spec with seconds, in order.
var fieldNames = [6]string{"second", "minute", "hour", "day of month", "month", "day of week"}

// Parse parses a schedule spec whose wall-clock times are read in loc (nil:
// UTC). It accepts
//
//   - cron: "minute hour day-of-month month day-of-week", or the same with
//     a leading seconds field ("0 30 9 * * MON-FRI"); each field takes
//     *, ?, lists, ranges, steps, and names for months and weekdays;
//   - descriptors: @yearly (@annually), @monthly, @weekly, @daily
//     (@midnight), @hourly;
//   - "@every D", D a Go duration of whole seconds, at least one second:
//     ticks every D of elapsed time, counted from the Unix epoch so that
//     every node agrees on them, whatever loc says;
//
// optionally preceded by "CRON_TZ=Zone " or "TZ=Zone ", which overrides loc.
// An invalid spec returns a *ParseError naming the field.
//
// How cron schedules meet daylight saving time is in the package
// documentation.
func Parse(spec string, loc *time.Location) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	if len(spec) > MaxSpecLength {
		return nil, &ParseError{Spec: truncate(spec, 64), Field: "spec", Reason: fmt.Sprintf("%d bytes long, the maximum is %d", len(spec), MaxSpecLength)}
	}
	body := strings.TrimSpace(spec)
	if zone, rest, ok := tzPrefix(body); ok {
		l, err := loadZone(zone)
		if err != nil {
			return nil, &ParseError{Spec: spec, Field: "time zone", Value: zone, Reason: err.Error()}
		}
		loc, body = l, strings.TrimSpace(rest)
	}
	if body == "" {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: "empty"}
	}
	if d, ok := strings.CutPrefix(body, "@every"); ok && (d == "" || d[0] == ' ' || d[0] == '\t') {
		return parseEvery(spec, strings.TrimSpace(d))
	}
	if strings.HasPrefix(body, "@") {
		s, err := cronParser.Parse(body)
		if err != nil {
			return nil, &ParseError{Spec: spec, Field: "descriptor", Value: body, Reason: "unknown (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every)"}
		}
		return newCron(spec, s, loc)
	}
	fields := strings.Fields(body)
	if len(fields) != 5 && len(fields) != 6 {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: fmt.Sprintf("%d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)", len(fields))}
	}
	if len(fields) == 5 {
		fields = append([]string{"0"}, fields...)
	}
	s, err := cronParser.Parse(strings.Join(fields, " "))
	if err != nil {
		return nil, fieldError(spec, fields, err)
	}
	return newCron(spec, s, loc)
}

// MustParse is Parse for specs known to be valid: it panics on an error.
func MustParse(spec string, loc *time.Location) Schedule {
	s, err := Parse(spec, loc)
	if err != nil {
		panic(err)
	}
	return s
}

func tzPrefix(body string) (zone, rest string, ok bool) {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if after, found := strings.CutPrefix(body, p); found {
			zone, rest, _ = strings.Cut(after, " ")
			return zone, rest, true
		}
	}
	return "", "", false
}

// loadZone loads an IANA zone after checking its name, so that a spec
// never makes time.LoadLocation read an arbitrary path.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return nil, fmt.Errorf("empty")
	}
	if len(name) > 64 {
		return nil, fmt.Errorf("%d bytes long, the maximum is 64", len(name))
	}
	for _, c := range name {
		ok := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("/_-+", c)
		if !ok {
			return nil, fmt.Errorf("contains %q", c)
		}
	}
	if strings.HasPrefix(name, "/") || strings.Contains(name, "//") {
		return nil, fmt.Errorf("not a zone name")
	}
	if name == "Local" {
		return nil, fmt.Errorf("the machine's local zone differs between nodes; name the zone")
	}
	return time.LoadLocation(name)
}

// fieldError finds which field made the parser fail by parsing each field
// alone, in the parser's order, so that the error names it.
func fieldError(spec string, fields []string, err error) error {
	for i, f := range fields {
		probe := [6]string{"*", "*", "*", "*", "*", "*"}
		probe[i] = f
		if _, perr := cronParser.Parse(strings.Join(probe[:], " ")); perr != nil {
			return &ParseError{Spec: spec, Field: fieldNames[i], Value: f, Reason: perr.Error()}
		}
	}
	return &ParseError{Spec: spec, Field: "spec", Reason: err.Error()}
}

func parseEvery(spec, ds string) (Schedule, error) {
	if ds == "" {
		return nil, &ParseError{Spec: spec, Field: "@every", Reason: "missing duration (e.g. @every 10s)"}
	}
	d, err := time.ParseDuration(ds)
	switch {
	case err != nil:
		return nil, &ParseError{Spec: spec, Field: "@every", Value: ds, Reason: "not a duration (e.g. 90s, 1h30m)"}
	case d < time.Second:
		return nil, &ParseError{Spec: spec, Field: "@every", Value: ds, Reason: "below the minimum of 1s"}
	case d%time.Second != 0:
		return nil, &ParseError{Spec: spec, Field: "@every", Value: ds, Reason: "not a whole number of seconds"}
	}
	return every{spec: spec, d: int64(d / time.Second)}, nil
}

// ParseError is returned by Parse for an invalid spec. Field names the part
// at fault: "second", "minute", "hour", "day of month", "month",
// "day of week", "@every", "descriptor", "time zone", or "spec" for the
// whole.
type ParseError struct {
	Spec   string
	Field  string
	Value  string // the field's text, "" when Field is "spec"
	Reason string
}

// Error implements error.
func (e *ParseError) Error() string { return "schedule: " + e.detail() }

func (e *ParseError) detail() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s in %q: %s", e.Field, e.Spec, e.Reason)
	}
	return fmt.Sprintf("invalid %s field %q in %q: %s", e.Field, e.Value, e.Spec, e.Reason)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// every ticks at every multiple of d seconds since the Unix epoch.
type every struct {
	spec string
	d    int64 // seconds
}

func (e every) String() string { return e.spec }

func (e every) Next(t time.Time) time.Time {
	s := t.Unix() // floor: Unix truncates toward the past for times before 1970 too
	k := s / e.d
	if s%e.d < 0 {
		k--
	}
	return time.Unix((k+1)*e.d, 0).UTC()
}

// allHours is the bit set of hours 0–23.
const allHours = 1<<24 - 1

// starBit marks a day field given as * or ?: go-cron's encoding, which
// decides whether day-of-month and day-of-week combine with AND or OR.
const starBit = 1 << 63

// cronSchedule is a parsed cron spec: go-cron's bit sets, with tick
// arithmetic of our own so that daylight saving time is handled as the
// package documents (see Next).
type cronSchedule struct {
	spec                                  string
	second, minute, hour, dom, month, dow uint64
	loc                                   *time.Location
	// everyHour: the hour field names every hour, so the schedule follows
	// the wall clock through a repeated hour instead of skipping it.
	everyHour bool
}

func newCron(spec string, s cron.Schedule, loc *time.Location) (Schedule, error) {
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: fmt.Sprintf("unexpected schedule type %T", s)}
	}
	c := &cronSchedule{
		spec: spec, second: ss.Second, minute: ss.Minute, hour: ss.Hour,
		dom: ss.Dom, month: ss.Month, dow: ss.Dow, loc: loc,
		everyHour: ss.Hour&allHours == allHours,
	}
	if _, ok := c.nextWall(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)); !ok {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: "never fires (no such date)"}
	}
	return c, nil
}

func (c *cronSchedule) String() string { return c.spec }

// Next returns the first tick after t. A cron schedule names wall-clock
// times in its zone, and each such time is one tick, at
//
//   - the instant the zone's clock shows it, when it shows it once;
//   - when the clock shows it twice (the hour repeated when daylight saving
//     time ends): the first time only — unless the hour field names every
//     hour, in which case both, since such a schedule follows the clock on
//     the wall (hourly work stays hourly);
//   - when the clock never shows it (the hour skipped when daylight saving
//     time starts): the instant it would have been without the change,
//     that is read with the offset in force before it — 02:30 on the night
//     New York springs forward runs at 03:30 EDT. When that instant is a
//     tick anyway, the two are one tick.
//
// Next works one zone period (time between two offset changes) at a time,
// in which wall time and UTC differ by a constant.
func (c *cronSchedule) Next(t time.Time) time.Time {
	t = t.UTC()
	for range 4 * searchYears * 3 { // a few offset changes a year at most
		probe := t.Add(time.Nanosecond).In(c.loc)
		_, off := probe.Zone()
		start, end := probe.ZoneBounds()
		offset := time.Duration(off) * time.Second
		var best time.Time
		lo := t
		if !start.IsZero() {
			_, prev := start.Add(-time.Nanosecond).In(c.loc).Zone()
			prevOffset := time.Duration(prev) * time.Second
			switch {
			case prev > off && !c.everyHour:
				// Fall-back: the wall times of the first prev-off of this
				// period were shown before; their ticks were then.
				if skip := start.Add(prevOffset - offset - time.Nanosecond); lo.Before(skip) {
					lo = skip
				}
			case prev < off:
				// Spring-forward: wall times in the gap run at the instant
				// they would have had with the previous offset.
				gapStart, gapEnd := wall(start, prevOffset), wall(start, offset)
				from := wall(t, prevOffset)
				if from.Before(gapStart) {
					from = gapStart.Add(-time.Nanosecond)
				}
				if w, ok := c.nextWall(from); ok && w.Before(gapEnd) {
					best = w.Add(-prevOffset)
				}
			}
		}
		w, ok := c.nextWall(wall(lo, offset))
		if ok {
			if cand := w.Add(-offset); end.IsZero() || cand.Before(end) {
				if best.IsZero() || cand.Before(best) {
					best = cand
				}
			}
		}
		if !best.IsZero() {
			return best
		}
		if !ok || end.IsZero() {
			return time.Time{}
		}
		t = end.Add(-time.Nanosecond)
	}
	return time.Time{}
}

// wall returns the wall-clock reading of instant t at offset, as a UTC
// time: the civil-time space where nextWall does its arithmetic.
func wall(t time.Time, offset time.Duration) time.Time { return t.UTC().Add(offset) }

func has(bits uint64, v int) bool { return bits&(1<<uint(v)) != 0 }

func (c *cronSchedule) dayMatches(t time.Time) bool {
	d, w := has(c.dom, t.Day()), has(c.dow, int(t.Weekday()))
	if c.dom&starBit != 0 || c.dow&starBit != 0 {
		return d && w
	}
	return d || w
}

// nextWall returns the first wall-clock time strictly after x (a civil time
// as UTC, see wall) that the fields match, a whole second. It reports false
// when there is none within searchYears.
func (c *cronSchedule) nextWall(x time.Time) (time.Time, bool) {
	t := x.Truncate(time.Second).Add(time.Second)
	limit := t.Year() + searchYears
	for t.Year() <= limit {
		y, mo, d := t.Date()
		h, mi, _ := t.Clock()
		switch {
		case !has(c.month, int(mo)):
			t = time.Date(y, mo+1, 1, 0, 0, 0, 0, time.UTC)
		case !c.dayMatches(t):
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		case !has(c.hour, h):
			t = time.Date(y, mo, d, h+1, 0, 0, 0, time.UTC)
		case !has(c.minute, mi):
			t = time.Date(y, mo, d, h, mi+1, 0, 0, time.UTC)
		case !has(c.second, t.Second()):
			t = t.Add(time.Second)
		default:
			return t, true
		}
	}
	return time.Time{}, false
}
