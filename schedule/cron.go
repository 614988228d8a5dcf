package schedule

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// A field of a cron spec: its name (as errors give it), its range, and
// the names it accepts for values.
type field struct {
	name     string
	min, max int
	names    []string // names[i] is value min+i
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"} // 1–12
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}                                    // 0–6
)

// cronFields are the six fields of a spec with seconds, in order. Day of
// week takes 0–7, 7 being Sunday as in Vixie cron.
var cronFields = [6]field{
	{name: "second", min: 0, max: 59},
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day of month", min: 1, max: 31},
	{name: "month", min: 1, max: 12, names: monthNames},
	{name: "day of week", min: 0, max: 7, names: dayNames},
}

// descriptors are the @ forms, as six fields.
var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// allHours is the bit set of hours 0–23.
const allHours = 1<<24 - 1

// cronSchedule is a parsed cron spec: a bit set per field (bit v set when
// the field takes value v) and the tick arithmetic of Next.
type cronSchedule struct {
	spec                                  string
	second, minute, hour, dom, month, dow uint64 // dow: bits 0–6, Sunday 0
	// domStar, dowStar: the day field starts with * (or ?). As in Vixie
	// cron, a day must then match both day fields; when neither does,
	// either.
	domStar, dowStar bool
	loc              *time.Location
	// everyHour: the hour field names every hour, so the schedule follows
	// the wall clock through a repeated hour instead of skipping it.
	everyHour bool
}

// parseCron parses six fields (seconds first) read in loc.
func parseCron(spec string, fields []string, loc *time.Location) (Schedule, error) {
	c := &cronSchedule{spec: spec, loc: loc}
	sets := [6]*uint64{&c.second, &c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, f := range fields {
		set, reason := parseField(f, &cronFields[i])
		if reason != "" {
			return nil, &ParseError{Spec: spec, Field: cronFields[i].name, Value: f, Reason: reason}
		}
		*sets[i] = set
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1 // 7 is Sunday
	}
	c.domStar = strings.HasPrefix(fields[3], "*") || strings.HasPrefix(fields[3], "?")
	c.dowStar = strings.HasPrefix(fields[5], "*") || strings.HasPrefix(fields[5], "?")
	c.everyHour = c.hour&allHours == allHours
	if !c.fires() {
		return nil, &ParseError{Spec: spec, Field: "spec", Reason: fmt.Sprintf("never fires (no month in month field %q has a day in day of month field %q)", truncate(fields[4], 32), truncate(fields[3], 32))}
	}
	return c, nil
}

// parseField parses one field: a comma-separated list of *, ?, a value or
// a range a-b, each optionally followed by /step ("a/step" is a-max/step).
// It returns the bit set, or a reason the field is invalid.
func parseField(text string, f *field) (uint64, string) {
	var set uint64
	for item := range strings.SplitSeq(text, ",") {
		if item == "" {
			return 0, "empty list item"
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		lo, hi := f.min, f.max
		if rng != "*" && rng != "?" {
			loText, hiText, isRange := strings.Cut(rng, "-")
			var reason string
			if lo, reason = parseValue(loText, f); reason != "" {
				return 0, reason
			}
			switch {
			case isRange:
				if hi, reason = parseValue(hiText, f); reason != "" {
					return 0, reason
				}
			case !hasStep:
				hi = lo
			}
			if lo > hi {
				return 0, fmt.Sprintf("range start %d beyond end %d in %q", lo, hi, truncate(item, 32))
			}
		}
		step := 1
		if hasStep {
			digits := strings.TrimLeft(stepText, "0")
			if !isDigits(stepText) || len(digits) > 4 {
				return 0, fmt.Sprintf("step %q is not a number from 1 to 9999", truncate(stepText, 32))
			}
			if step, _ = strconv.Atoi("0" + digits); step < 1 {
				return 0, "step 0: a step is at least 1"
			}
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, ""
}

// parseValue parses a number or a name in field f's range.
func parseValue(s string, f *field) (int, string) {
	if s == "" {
		return 0, "missing value"
	}
	if isDigits(s) {
		digits := strings.TrimLeft(s, "0")
		if len(digits) > 2 {
			return 0, fmt.Sprintf("%s above the maximum %d", truncate(s, 32), f.max)
		}
		v, _ := strconv.Atoi("0" + digits)
		switch {
		case v < f.min:
			return 0, fmt.Sprintf("%d below the minimum %d", v, f.min)
		case v > f.max:
			return 0, fmt.Sprintf("%d above the maximum %d", v, f.max)
		}
		return v, ""
	}
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, ""
		}
	}
	if f.names != nil {
		return 0, fmt.Sprintf("%q is not a number or a name (%s–%s)", truncate(s, 32), f.names[0], f.names[len(f.names)-1])
	}
	return 0, fmt.Sprintf("%q is not a number", truncate(s, 32))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// daysIn returns the number of days in month m of year y.
func daysIn(y int64, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// fires reports whether the schedule has a tick at all. When a day must
// match both day fields, it needs a month in the month field with a day
// in the day-of-month field (February having 29): every such date falls
// on every weekday within 400 years. Otherwise a day matching the
// day-of-week field comes every week.
func (c *cronSchedule) fires() bool {
	if !c.domStar && !c.dowStar {
		return true
	}
	for m := 1; m <= 12; m++ {
		if has(c.month, m) && c.dom&(1<<uint(daysIn(2000, m)+1)-1) != 0 {
			return true
		}
	}
	return false
}

func (c *cronSchedule) String() string { return c.spec }

func has(set uint64, v int) bool { return set&(1<<uint(v)) != 0 }

// nextBit returns the least value ≥ v in set, or false.
func nextBit(set uint64, v int) (int, bool) {
	if v > 63 {
		return 0, false
	}
	rest := set >> uint(v) << uint(v)
	if rest == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(rest), true
}

func (c *cronSchedule) dayMatches(t time.Time) bool {
	return c.dayOK(t.Day(), int(t.Weekday()))
}

func (c *cronSchedule) dayOK(day, weekday int) bool {
	d, w := has(c.dom, day), has(c.dow, weekday)
	if c.domStar || c.dowStar {
		return d && w
	}
	return d || w
}

// Civil time: a wall-clock reading as seconds since 1970-01-01 00:00 on
// that clock, so that day n is [n·86400, (n+1)·86400).
const secondsPerDay = 86400

// daysFromCivil returns the day number of y-m-d (Gregorian, proleptic).
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := int64((m + 9) % 12)
	doy := (153*mp+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(n int64) (y int64, m, d int) {
	n += 719468
	era := floorDiv(n, 146097)
	doe := n - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	m = int(mp+2)%12 + 1
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// searchYears bounds how far nextDay looks: within 400 years (the
// Gregorian cycle, a whole number of weeks) every date falls on every
// weekday, so a schedule that fires (see fires) fires within it.
const searchYears = 401

// nextDay returns the first day number ≥ n whose date the month and day
// fields match, or false when there is none within searchYears.
func (c *cronSchedule) nextDay(n int64) (int64, bool) {
	y, m, d := civilFromDays(n)
	limit := y + searchYears
	for y <= limit {
		if !has(c.month, m) {
			next, ok := nextBit(c.month, m+1)
			if !ok {
				y, next = y+1, bits.TrailingZeros64(c.month)
			}
			m, d = next, 1
			continue
		}
		if d > daysIn(y, m) {
			if m++; m > 12 {
				y, m = y+1, 1
			}
			d = 1
			continue
		}
		wd := int(floorMod(daysFromCivil(y, m, d)+4, 7)) // 1970-01-01 was a Thursday
		if c.dayOK(d, wd) {
			return daysFromCivil(y, m, d), true
		}
		if c.domStar || c.dowStar {
			// A day must match the day-of-month field: go to its next day.
			if next, ok := nextBit(c.dom, d+1); ok {
				d = next
			} else {
				d = 32
			}
			continue
		}
		d++
	}
	return 0, false
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// nextClock returns the first second of the day in [s, end) that the
// hour, minute and second fields match, or false.
func (c *cronSchedule) nextClock(s, end int64) (int64, bool) {
	for s < end {
		h, m, sec := int(s/3600), int(s/60%60), int(s%60)
		nh, ok := nextBit(c.hour, h)
		if !ok {
			return 0, false
		}
		if nh != h {
			s = int64(nh) * 3600
			continue
		}
		nm, ok := nextBit(c.minute, m)
		if !ok {
			s = int64(h+1) * 3600
			continue
		}
		if nm != m {
			s = int64(h)*3600 + int64(nm)*60
			continue
		}
		ns, ok := nextBit(c.second, sec)
		if !ok {
			s = int64(h)*3600 + int64(m+1)*60
			continue
		}
		if ns != sec {
			s = int64(h)*3600 + int64(m)*60 + int64(ns)
			continue
		}
		return s, true
	}
	return 0, false
}

// zoneMargin bounds the zone's offsets from UTC (tz data has them within
// ±16h), so that the wall-clock times of a day are shown at instants
// within zoneMargin of it.
const zoneMargin = 18 * 3600

// probeStep is how often periods reads the zone's offset; offset changes
// in the tz data are further apart (weeks at least, since 1970).
const probeStep = 6 * 3600

// A period is a span of instants [start, end) with one offset; prev is the
// offset before start (equal to off when start is not an offset change but
// where the search began).
type period struct {
	start, end, off, prev int64
}

func (c *cronSchedule) offset(u int64) int64 {
	if c.loc == time.UTC {
		return 0
	}
	_, off := time.Unix(u, 0).In(c.loc).Zone()
	return int64(off)
}

// zoneSpans holds the zone's periods covering the instants [lo, hi), as
// Next learns them. It finds each offset change by probing every
// probeStep and bisecting to the second; it relies on the offsets alone,
// not on Time.ZoneBounds, which is wrong near the end of years whose
// offsets Go derives from the zone's rule.
type zoneSpans struct {
	c      *cronSchedule
	ps     []period // ps[len-1].end == hi
	lo, hi int64
}

// cover returns the periods overlapping [lo, hi): those known, extended
// when the new span continues the known one, else found afresh.
func (z *zoneSpans) cover(lo, hi int64) []period {
	if len(z.ps) == 0 || lo < z.lo || lo > z.hi {
		o := z.c.offset(lo)
		z.ps = append(z.ps[:0], period{start: lo, end: lo, off: o, prev: o})
		z.lo, z.hi = lo, lo
	}
	for z.hi < hi {
		last := &z.ps[len(z.ps)-1]
		a, o := z.hi, last.off
		b := min(a+probeStep, hi)
		if z.c.offset(b) == o {
			last.end, z.hi = b, b
			continue
		}
		l, h := a, b // offset(l) == o, offset(h) != o
		for h-l > 1 {
			mid := l + (h-l)/2
			if z.c.offset(mid) == o {
				l = mid
			} else {
				h = mid
			}
		}
		last.end, z.hi = h, h
		z.ps = append(z.ps, period{start: h, end: h, off: z.c.offset(h), prev: o})
	}
	i := 0
	for i < len(z.ps)-1 && z.ps[i].end <= lo {
		i++
	}
	return z.ps[i:]
}

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
// Next walks the dates the month and day fields match, from the day before
// t's; for each it finds the zone's offsets around that day and the first
// time of day matching the other fields in each span of wall-clock time.
// A schedule that Parse accepted has a tick within any 400 years, so Next
// does not return the zero Time.
func (c *cronSchedule) Next(t time.Time) time.Time {
	after := t.Unix() // ticks are whole seconds > t, so ≥ after+1
	var buf [8]period
	spans := zoneSpans{c: c, ps: buf[:0]}
	day := floorDiv(after+c.offset(after), secondsPerDay) - 1
	best, found := int64(math.MaxInt64), false
	for {
		d, ok := c.nextDay(day)
		if !ok || found && d*secondsPerDay-zoneMargin >= best {
			break
		}
		if i, ok := c.nextInDay(d, after, &spans); ok && i < best {
			best, found = i, true
		}
		day = d + 1
	}
	if !found {
		return time.Time{}
	}
	return time.Unix(best, 0).UTC()
}

// nextInDay returns the first tick after instant after whose wall-clock
// time is on day d (a date the day fields match).
func (c *cronSchedule) nextInDay(d, after int64, spans *zoneSpans) (int64, bool) {
	w0 := d * secondsPerDay
	best, found := int64(math.MaxInt64), false
	// consider the wall times [a, b) of day d, shown at w - off.
	consider := func(a, b, off int64) {
		a = max(a, w0, after+1+off)
		b = min(b, w0+secondsPerDay)
		if a >= b {
			return
		}
		if s, ok := c.nextClock(a-w0, b-w0); ok {
			if i := w0 + s - off; i < best {
				best, found = i, true
			}
		}
	}
	for _, p := range spans.cover(w0-zoneMargin, w0+secondsPerDay+zoneMargin) {
		from := p.start + p.off
		if p.prev > p.off && !c.everyHour {
			from = p.start + p.prev // the first prev−off of walls were shown before
		}
		consider(from, p.end+p.off, p.off)
		if p.off > p.prev {
			consider(p.start+p.prev, p.start+p.off, p.prev) // the skipped walls
		}
	}
	return best, found
}
