//go:build !linux

package main

import (
	"fmt"
	"io"
)

// runSupervise is Linux's supervisor (supervise_linux.go); elsewhere
// commands run without one.
func runSupervise(args []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "tasklock: "+superviseCmd+" is internal to exec and serve on Linux")
	return exitUsage
}
