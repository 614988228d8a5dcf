//go:build race

package cli

// raceEnabled makes TestMain build the binary with the race detector too.
const raceEnabled = true
