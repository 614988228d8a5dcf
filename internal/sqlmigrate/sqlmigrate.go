// Package sqlmigrate reads the numbered migration files the SQL stores
// embed, and decides which are pending and what a status report lists.
// Each store renders and applies them in its own dialect, and keeps its
// version table in its own SQL; the file naming rules, and the rules for
// combining the embedded migrations with the recorded versions, live here
// once.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// File is one migration file, named NNNN_name<suffix>.
type File struct {
	Version  int    // the number the name starts with: 1 for 0001_create.up.sql
	Name     string // the rest of the name: "create"
	FileName string // the file's base name
	Text     string // its contents
}

// Load reads the files in dir of fsys whose names end in suffix, in version
// order. A file named otherwise, or two files with one version, is an error
// prefixed with pkg (the calling store's package name).
func Load(fsys fs.FS, dir, suffix, pkg string) ([]File, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok || e.IsDir() {
			continue
		}
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || rest == "" {
			return nil, fmt.Errorf("%s: migration file %q is not named NNNN_name%s", pkg, e.Name(), suffix)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files = append(files, File{Version: v, Name: rest, FileName: e.Name(), Text: string(b)})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Version < files[j].Version })
	for i := 1; i < len(files); i++ {
		if files[i].Version == files[i-1].Version {
			return nil, fmt.Errorf("%s: two migrations numbered %d", pkg, files[i].Version)
		}
	}
	return files, nil
}

// Template is a migration file parsed as a text/template, for stores whose
// migrations name the table through template fields.
type Template struct {
	File
	SQL *template.Template
}

// LoadTemplates is Load followed by parsing each file as a template that
// fails on missing keys; conv turns each into the calling store's own
// migration type.
func LoadTemplates[M any](fsys fs.FS, dir, suffix, pkg string, conv func(Template) M) ([]M, error) {
	files, err := Load(fsys, dir, suffix, pkg)
	if err != nil {
		return nil, err
	}
	ms := make([]M, 0, len(files))
	for _, f := range files {
		tmpl, err := template.New(f.FileName).Option("missingkey=error").Parse(f.Text)
		if err != nil {
			return nil, fmt.Errorf("%s: migration %s: %w", pkg, f.FileName, err)
		}
		ms = append(ms, conv(Template{File: f, SQL: tmpl}))
	}
	return ms, nil
}

// Must returns ms, and panics when err is not nil: for a store's embedded
// migrations, which are fixed at build time (the store's tests load them).
func Must[M any](ms []M, err error) []M {
	if err != nil {
		panic(err)
	}
	return ms
}

// Applied is one version recorded in a store's version table.
type Applied struct {
	Name string    // the recorded name; "" when the store does not read it
	At   time.Time // when it was applied, by the database's clock
}

// Pending returns the migrations of ms, which are in version order, whose
// versions applied does not record, in that order. id returns a
// migration's version and name.
func Pending[M any](ms []M, id func(M) (version int, name string), applied map[int]Applied) []M {
	var out []M
	for _, m := range ms {
		v, _ := id(m)
		if _, ok := applied[v]; !ok {
			out = append(out, m)
		}
	}
	return out
}

// State is one migration as a store's status report lists it.
type State struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when not applied
}

// Status lists every migration of known (the store's own, as id names
// them) with whether and when applied records it, and every version
// applied records that known lacks (applied by a newer library), with its
// recorded name, in version order.
func Status[M any](known []M, id func(M) (version int, name string), applied map[int]Applied) []State {
	out := make([]State, 0, len(known))
	seen := make(map[int]bool, len(known))
	for _, m := range known {
		v, name := id(m)
		a, ok := applied[v]
		out = append(out, State{Version: v, Name: name, Applied: ok, AppliedAt: a.At})
		seen[v] = true
	}
	for v, a := range applied {
		if !seen[v] {
			out = append(out, State{Version: v, Name: a.Name, Applied: true, AppliedAt: a.At})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}
