//go:build race

package main

// raceEnabled makes TestMain build the binary with the race detector too.
const raceEnabled = true
