package main

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/internal/cpulist"
)

// parseCPUList reads --cpus as taskset(1) does ("0-3,8,10-11"); every CPU
// must be one this process may run on. An empty list is nil.
func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	cpus, err := cpulist.Parse(s)
	if err != nil {
		return nil, err
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return nil, fmt.Errorf("reading the CPUs this process may use: %w", err)
	}
	for _, c := range cpus {
		if c >= runtime.NumCPU()*8 || !allowed.IsSet(c) {
			return nil, fmt.Errorf("CPU %d is not one this process may run on", c)
		}
	}
	return cpus, nil
}
