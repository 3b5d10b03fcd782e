//go:build race

package hfilink_test

// raceEnabled: timings are the race detector's, not the link's.
const raceEnabled = true
