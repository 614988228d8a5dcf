//go:build !unix

package main

import (
	"fmt"
	"io"
)

const serveUsage = "Usage: tasklock serve --config FILE [--grace D] [--verbose]\n\nserve runs on Unix systems only.\n"

// runServe reports that serve needs process groups and Unix signals.
func runServe(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "tasklock serve: supported on Unix systems only")
	return exitUsage
}
