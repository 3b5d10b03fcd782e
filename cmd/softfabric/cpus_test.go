package main

import (
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCPUList(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	first := -1
	for c := 0; c < 1024; c++ {
		if allowed.IsSet(c) {
			first = c
			break
		}
	}
	if got, err := parseCPUList(""); got != nil || err != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
	if got, err := parseCPUList(strconv.Itoa(first)); err != nil || !slices.Equal(got, []int{first}) {
		t.Fatalf("%d: %v, %v", first, got, err)
	}
	if allowed.Count() >= 2 {
		got, err := parseCPUList("0-1")
		if allowed.IsSet(0) && allowed.IsSet(1) && (err != nil || !slices.Equal(got, []int{0, 1})) {
			t.Fatalf("0-1: %v, %v", got, err)
		}
	}
	for _, bad := range []string{"x", "-1", "3-1", "0,0", "1-", ",", "100000"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
