// Package cpulist reads CPU lists as the kernel writes them
// (/sys/devices/system/cpu/possible, cpuset files) and taskset(1) takes
// them: comma-separated numbers and ranges, "0-3,8,10-11".
package cpulist

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Parse returns the CPUs of list s in the order written. A CPU listed
// twice, a reversed range or anything but numbers and ranges is an error.
func Parse(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("no CPU")
	}
	var out []int
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
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
			if seen[c] {
				return nil, fmt.Errorf("CPU %d is listed twice", c)
			}
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// Possible returns the CPUs the kernel may ever bring online
// (/sys/devices/system/cpu/possible): what per-CPU allocations, such as a
// veth's default queues, are sized by.
func Possible() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return nil, err
	}
	return Parse(string(b))
}
