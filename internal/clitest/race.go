//go:build race

package clitest

// raceEnabled makes Build build the binary with the race detector too.
const raceEnabled = true
