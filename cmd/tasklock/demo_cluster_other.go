//go:build !unix

package main

import (
	"fmt"
	"io"
)

// runClusterDemo reports that the cluster demo needs serve, which needs
// Unix; the lock demo runs everywhere.
func runClusterDemo(o clusterOptions, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "tasklock demo: the cluster demo runs on Unix systems only; try tasklock demo --lock")
	return exitUsage
}

// runDemoJob is the cluster demo's job command.
func runDemoJob(args []string, stdout, stderr io.Writer) int {
	return runClusterDemo(clusterOptions{}, stdout, stderr)
}
