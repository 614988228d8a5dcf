package schedule

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
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

// Parse parses a schedule spec whose wall-clock times are read in loc (nil:
// UTC). It accepts
//
//   - cron: "minute hour day-of-month month day-of-week", or the same with
//     a leading seconds field ("0 30 9 * * MON-FRI"); each field takes
//     *, ?, lists, ranges, steps ("a/step" is a to the field's maximum),
//     and names for months and weekdays (JAN–DEC, SUN–SAT); day-of-week 7
//     is Sunday; the day fields combine as in Vixie cron (see the package
//     documentation);
//   - descriptors: @yearly (@annually), @monthly, @weekly, @daily
//     (@midnight), @hourly;
//   - "@every D", D a Go duration of whole seconds, at least one second:
//     ticks every D of elapsed time, counted from the Unix epoch so that
//     every node agrees on them, whatever loc says;
//
// optionally preceded by one "CRON_TZ=Zone " or "TZ=Zone ", which
// overrides loc. An invalid spec, or one that never fires, returns a
// *ParseError naming the field; parsing takes time linear in the spec's
// length (at most MaxSpecLength bytes).
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
		if again, _, ok := tzPrefix(body); ok {
			return nil, &ParseError{Spec: spec, Field: "time zone", Value: again, Reason: "given twice (one CRON_TZ= or TZ= prefix at most)"}
		}
	}
	if body == "" {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: "empty"}
	}
	if d, ok := strings.CutPrefix(body, "@every"); ok && (d == "" || d[0] == ' ' || d[0] == '\t') {
		return parseEvery(spec, strings.TrimSpace(d))
	}
	if strings.HasPrefix(body, "@") {
		fields, ok := descriptors[body]
		if !ok {
			return nil, &ParseError{Spec: spec, Field: "descriptor", Value: body, Reason: "unknown (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every)"}
		}
		return parseCron(spec, strings.Fields(fields), loc)
	}
	fields := strings.Fields(body)
	if len(fields) != 5 && len(fields) != 6 {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: fmt.Sprintf("%d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)", len(fields))}
	}
	if len(fields) == 5 {
		fields = append([]string{"0"}, fields...)
	}
	return parseCron(spec, fields, loc)
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
	spec := truncate(e.Spec, 128)
	if e.Value == "" {
		return fmt.Sprintf("invalid %s in %q: %s", e.Field, spec, e.Reason)
	}
	return fmt.Sprintf("invalid %s field %q in %q: %s", e.Field, truncate(e.Value, 64), spec, e.Reason)
}

// truncate shortens s to at most n bytes, on a character boundary, and
// marks the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
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
