// Package sqlmigrate reads the numbered migration files the SQL stores
// embed. Each store renders and applies them in its own dialect; the file
// naming rules live here once.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
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
// fails on missing keys.
func LoadTemplates(fsys fs.FS, dir, suffix, pkg string) ([]Template, error) {
	files, err := Load(fsys, dir, suffix, pkg)
	if err != nil {
		return nil, err
	}
	ts := make([]Template, 0, len(files))
	for _, f := range files {
		tmpl, err := template.New(f.FileName).Option("missingkey=error").Parse(f.Text)
		if err != nil {
			return nil, fmt.Errorf("%s: migration %s: %w", pkg, f.FileName, err)
		}
		ts = append(ts, Template{File: f, SQL: tmpl})
	}
	return ts, nil
}
