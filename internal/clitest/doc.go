// Package clitest runs the tasklock command in tests: it builds the binary
// once (from a TestMain), starts it as a process whose stdout and stderr go
// to files, and waits on what it prints, on its exit and on pid files.
//
// The command's own tests (cmd/tasklock) and the system tests that need
// tooling the library module must not require (systest/cli) share it; the
// tests of the command's internal packages use WaitFor. It imports the
// standard library only, so it stays a leaf.
//
// Waiting polls a condition with a deadline; nothing here sleeps to
// synchronise.
package clitest
