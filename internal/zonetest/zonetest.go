// Package zonetest gives tests every zone of the tz database twice: as the
// system's zone files say (/usr/share/zoneinfo) and as Go's embedded tzdata
// says (package time/tzdata, built from $GOROOT/lib/time/zoneinfo.zip).
// The two differ where it matters for tick arithmetic: the embedded files
// list transitions only up to about 2037, some only to 2027, after which Go
// derives offsets from the zone's rule.
package zonetest

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// A Zone is one zone as one source of tz data describes it.
type Zone struct {
	Name   string         // the IANA name, e.g. "Europe/Berlin"
	Source string         // "system" or "embedded"
	Loc    *time.Location // loaded from Source only
}

// String returns "Name (Source)".
func (z Zone) String() string { return z.Name + " (" + z.Source + ")" }

// SystemDir is where the system's zone files are.
const SystemDir = "/usr/share/zoneinfo"

var (
	once       sync.Once
	embedded   []Zone
	system     []Zone
	errLoading error
)

// All returns every zone of both sources, embedded first, each sorted by
// name. It fails when either source cannot be read.
func All() ([]Zone, error) {
	z1, err := Embedded()
	if err != nil {
		return nil, err
	}
	z2, err := System()
	if err != nil {
		return nil, err
	}
	return append(slices.Clip(z1), z2...), nil
}

// Embedded returns every zone in Go's zoneinfo.zip, loaded from it.
func Embedded() ([]Zone, error) { load(); return embedded, errLoading }

// System returns every zone file under SystemDir, loaded from it.
func System() ([]Zone, error) { load(); return system, errLoading }

// Load loads one zone from one source ("system" or "embedded").
func Load(name, source string) (*time.Location, error) {
	var zs []Zone
	var err error
	switch source {
	case "system":
		zs, err = System()
	case "embedded":
		zs, err = Embedded()
	default:
		return nil, fmt.Errorf("zonetest: unknown source %q", source)
	}
	if err != nil {
		return nil, err
	}
	i, ok := slices.BinarySearchFunc(zs, name, func(z Zone, n string) int { return strings.Compare(z.Name, n) })
	if !ok {
		return nil, fmt.Errorf("zonetest: no zone %q in the %s tz data", name, source)
	}
	return zs[i].Loc, nil
}

func load() {
	once.Do(func() {
		var err1, err2 error
		embedded, err1 = loadZip()
		system, err2 = loadDir(SystemDir)
		errLoading = errors.Join(err1, err2)
	})
}

// zipPath finds Go's zoneinfo.zip: $ZONEINFO when it names a zip, else
// $GOROOT/lib/time/zoneinfo.zip, GOROOT asked of the go command when the
// environment does not say.
func zipPath() (string, error) {
	if z := os.Getenv("ZONEINFO"); strings.HasSuffix(z, ".zip") {
		return z, nil
	}
	root := os.Getenv("GOROOT")
	if root == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return "", fmt.Errorf("zonetest: finding GOROOT: %w", err)
		}
		root = strings.TrimSpace(string(out))
	}
	return filepath.Join(root, "lib", "time", "zoneinfo.zip"), nil
}

func loadZip() ([]Zone, error) {
	path, err := zipPath()
	if err != nil {
		return nil, err
	}
	zr, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("zonetest: %w", err)
	}
	defer zr.Close()
	var zs []Zone
	for _, f := range zr.File {
		if f.FileInfo().IsDir() {
			continue
		}
		r, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("zonetest: %s in %s: %w", f.Name, path, err)
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("zonetest: %s in %s: %w", f.Name, path, err)
		}
		loc, err := time.LoadLocationFromTZData(f.Name, data)
		if err != nil {
			return nil, fmt.Errorf("zonetest: %s in %s: %w", f.Name, path, err)
		}
		zs = append(zs, Zone{Name: f.Name, Source: "embedded", Loc: loc})
	}
	if len(zs) < 300 {
		return nil, fmt.Errorf("zonetest: only %d zones in %s", len(zs), path)
	}
	slices.SortFunc(zs, func(a, b Zone) int { return strings.Compare(a.Name, b.Name) })
	return zs, nil
}

// loadDir reads every TZif file under dir except the posix/ and right/
// copies and the localtime and posixrules links.
func loadDir(dir string) ([]Zone, error) {
	var zs []Zone
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == "posix" || rel == "right" {
				return fs.SkipDir
			}
			return nil
		}
		if rel == "localtime" || rel == "posixrules" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(data, []byte("TZif")) {
			return nil // zone.tab, leapseconds, tzdata.zi, ...
		}
		loc, err := time.LoadLocationFromTZData(filepath.ToSlash(rel), data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		zs = append(zs, Zone{Name: filepath.ToSlash(rel), Source: "system", Loc: loc})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("zonetest: %w", err)
	}
	if len(zs) < 300 {
		return nil, fmt.Errorf("zonetest: only %d zones under %s", len(zs), dir)
	}
	slices.SortFunc(zs, func(a, b Zone) int { return strings.Compare(a.Name, b.Name) })
	return zs, nil
}

// Transitions returns the instants in [from, to) at which loc's offset
// changes, found by probing every step and bisecting to the second; a
// change and its reversal within one step are not seen, so step should be
// shorter than any period of the zone (a day is, for the tz data since
// 1970 that tests use).
func Transitions(loc *time.Location, from, to time.Time, step time.Duration) []time.Time {
	off := func(u int64) int {
		_, o := time.Unix(u, 0).In(loc).Zone()
		return o
	}
	var out []time.Time
	st := int64(step / time.Second)
	a := from.Unix()
	oa := off(a)
	for a < to.Unix() {
		b := min(a+st, to.Unix())
		ob := off(b)
		if ob != oa {
			lo, hi := a, b // off(lo) == oa, off(hi) != oa
			for hi-lo > 1 {
				m := lo + (hi-lo)/2
				if off(m) == oa {
					lo = m
				} else {
					hi = m
				}
			}
			out = append(out, time.Unix(hi, 0).UTC())
		}
		a, oa = b, ob
	}
	return out
}

// Instants returns n instants in [2020, 2200) for loc: a third spread
// evenly, a third within a day and a half of a year's end in loc, a third
// within a day and a half of one of loc's offset changes (of a month's
// start when the year has none). A quarter have a fraction of a second.
func Instants(rng *rand.Rand, loc *time.Location, n int) []time.Time {
	start := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	near := func(c time.Time) time.Time {
		return c.Add(time.Duration(rng.Int64N(int64(72*time.Hour))) - 36*time.Hour)
	}
	var out []time.Time
	for i := range n {
		year := 2020 + rng.IntN(180)
		var at time.Time
		switch i % 3 {
		case 0:
			at = start.Add(time.Duration(rng.Int64N(int64(180 * 365 * 24 * time.Hour))))
		case 1:
			at = near(time.Date(year+1, 1, 1, 0, 0, 0, 0, loc))
		case 2:
			tr := Transitions(loc, time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(year+1, 1, 1, 0, 0, 0, 0, time.UTC), 24*time.Hour)
			if len(tr) == 0 {
				at = near(time.Date(year, time.Month(1+rng.IntN(12)), 1, 0, 0, 0, 0, loc))
			} else {
				at = near(tr[rng.IntN(len(tr))])
			}
		}
		if rng.IntN(4) == 0 {
			at = at.Add(time.Duration(rng.Int64N(int64(time.Second))))
		} else {
			at = at.Truncate(time.Second)
		}
		out = append(out, at)
	}
	return out
}

// NearChange reports whether loc's offset changes within d of t.
func NearChange(loc *time.Location, t time.Time, d time.Duration) bool {
	return len(Transitions(loc, t.Add(-d), t.Add(d), min(d, 6*time.Hour))) > 0
}
