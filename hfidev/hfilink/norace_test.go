//go:build !race

package hfilink_test

const raceEnabled = false
