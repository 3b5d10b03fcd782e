package perf

import (
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// CPU is the processor time one side of a test used over its measured
// interval: user and system time of the whole process (getrusage), so the
// kernel's work on its behalf (AF_XDP transmit kicks, the UDP stack, the
// veth transmit that runs in the sender's context) counts too. Busy
// polling makes a waiting side's CPU time close to its wall time: that is
// what a polling data path costs, and the baselines poll too.
type CPU struct {
	User, Sys time.Duration
}

// cpuNow reads the process's CPU time so far.
func cpuNow() CPU {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return CPU{}
	}
	return CPU{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}
}

// since is the CPU time used from c0 to now.
func (c0 CPU) since() CPU {
	c := cpuNow()
	return CPU{User: c.User - c0.User, Sys: c.Sys - c0.Sys}
}

// Total is user plus system time.
func (c CPU) Total() time.Duration { return c.User + c.Sys }

// fields renders c for a STATS line: user and system nanoseconds.
func (c CPU) fields() string {
	return strconv.FormatInt(int64(c.User), 10) + " " + strconv.FormatInt(int64(c.Sys), 10)
}

// parseCPU reads the two fields fields wrote; ok is false when they are
// missing (a server from before CPU accounting) or malformed.
func parseCPU(f []string) (CPU, bool) {
	if len(f) < 2 {
		return CPU{}, false
	}
	u, err1 := strconv.ParseInt(f[0], 10, 64)
	s, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || u < 0 || s < 0 {
		return CPU{}, false
	}
	return CPU{User: time.Duration(u), Sys: time.Duration(s)}, true
}

// setCPU fills r's CPU figures from the client's and the server's CPU
// time: per KiB of payload moved for bandwidth tests, per round trip for
// latency tests. A side whose time is unknown stays zero.
func setCPU(r *Result, client CPU, server CPU, serverKnown bool) {
	r.CPUClientUserS, r.CPUClientSysS = client.User.Seconds(), client.Sys.Seconds()
	if serverKnown {
		r.CPUServerUserS, r.CPUServerSysS = server.User.Seconds(), server.Sys.Seconds()
	}
	if r.LatMedianUs > 0 {
		if r.Iters > 0 {
			r.CPUClientNsPerOp = float64(client.Total()) / float64(r.Iters)
			if serverKnown {
				r.CPUServerNsPerOp = float64(server.Total()) / float64(r.Iters)
			}
		}
		return
	}
	kib := float64(r.Iters) * float64(r.Bytes) / 1024
	if slices.Contains(Baselines, r.Op) {
		// Baselines count at the receiver: what arrived.
		kib = float64(r.Received) * float64(r.Bytes) / 1024
	}
	if kib <= 0 {
		return
	}
	r.CPUClientNsPerKiB = float64(client.Total()) / kib
	if serverKnown {
		r.CPUServerNsPerKiB = float64(server.Total()) / kib
	}
}
