package main

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// parseCPUList reads a CPU list as taskset(1) and /sys/devices/system/cpu
// write them: comma-separated numbers and ranges, "0-3,8,10-11". Every CPU
// must be one this process may run on. An empty list is nil.
func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may use: %w", err)
	}
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a CPU number or range", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a CPU range", part)
			}
		}
		for c := a; c <= b; c++ {
			if c >= runtime.NumCPU()*8 || !allowed.IsSet(c) {
				return nil, fmt.Errorf("CPU %d is not one this process may run on", c)
			}
			if seen[c] {
				return nil, fmt.Errorf("CPU %d is listed twice", c)
			}
			seen[c] = true
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no CPU")
	}
	return out, nil
}
