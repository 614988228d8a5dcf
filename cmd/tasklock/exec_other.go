//go:build !unix

package main

import (
	"fmt"
	"io"
)

const execUsage = "Usage: tasklock exec --store URL --key NAME [flags] -- COMMAND [ARGS...]\n\nexec runs on Unix systems only.\n"

// runExec reports that exec needs process groups and Unix signals.
func runExec(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "tasklock exec: supported on Unix systems only")
	return exitUsage
}
