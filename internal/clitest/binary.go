package clitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binary is a tasklock binary built for the tests of one package.
type Binary struct {
	// Path is the executable.
	Path string
	dir  string // the temporary directory Path is in
}

// Build builds the tasklock command in package pkg (an import path, or "."
// from the command's own directory) into a new temporary directory, with
// the race detector when the calling test binary has it (so that a -race
// test run also checks the command). The go tool's output goes to stderr.
// TestMain calls it once and Remove after the tests ran.
func Build(pkg string) (*Binary, error) {
	dir, err := os.MkdirTemp("", "tasklock-clitest")
	if err != nil {
		return nil, err
	}
	b := &Binary{Path: filepath.Join(dir, "tasklock"), dir: dir}
	args := []string{"build", "-o", b.Path}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, pkg)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("building tasklock: %w", err)
	}
	return b, nil
}

// Remove deletes the binary and its directory.
func (b *Binary) Remove() { os.RemoveAll(b.dir) }
