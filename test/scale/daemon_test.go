package scale

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// daemonCases are what BenchmarkDaemon compares, in process and through
// the daemon.
var daemonCases = []scaleCase{
	{"write-64B-1qp", "write", 64, 1, "Mpps"},
	{"write-64B-lat", "write", 64, 1, "µs"},
	{"write-64KiB-1qp", "write", 65536, 1, "Gb/s"},
	{"read-64KiB-1qp", "read", 65536, 1, "Gb/s"},
}

// daemonStatus is what `status --json` shows of h's daemon, nil when
// none serves it.
func daemonStatus(b *testing.B, h *netnstest.Host) *daemonapi.Stats {
	out, err := h.Command(sfBin, "status", h.Iface, "--json").Output()
	if err != nil {
		b.Fatalf("status: %v: %s", err, out)
	}
	var st []struct {
		Daemon *daemonapi.Stats `json:"daemon"`
	}
	if err := json.Unmarshal(out, &st); err != nil || len(st) != 1 {
		b.Fatalf("status: %v: %s", err, out)
	}
	return st[0].Daemon
}

// daemonPID is the pid of h's daemon, 0 when none serves it.
func daemonPID(b *testing.B, h *netnstest.Host) int {
	if st := daemonStatus(b, h); st != nil {
		return st.PID
	}
	return 0
}

// frameCounts are what a host's NIC counters say of a case: the frames
// its classifier redirected (received), and the sendto(2) calls and
// frames sent of its daemon's workers (zero in process).
type frameCounts struct{ rx, kicks, tx float64 }

// countFrames reads h's classifier and daemon counters.
func countFrames(b *testing.B, h *netnstest.Host) frameCounts {
	var c frameCounts
	out, err := h.Command(sfBin, "stats", "--json", h.Iface).Output()
	if err != nil {
		b.Fatalf("stats: %v: %s", err, out)
	}
	var v struct{ Redirected uint64 }
	if err := json.Unmarshal(out, &v); err != nil {
		b.Fatalf("stats: %v: %s", err, out)
	}
	c.rx = float64(v.Redirected)
	if st := daemonStatus(b, h); st != nil {
		for _, w := range st.Workers {
			c.kicks += float64(w.Kicks)
			c.tx += float64(w.TxFrames)
		}
	}
	return c
}

// cpuTime is the user and system time process pid has used, in ns (0
// when unknown).
func cpuTime(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses:
	// utime and stime are the 14th and 15th of the line.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return (u + st) * int64(time.Second) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on
// Linux).
const clockTicks = 100

// BenchmarkDaemon measures what the daemon costs: each case on one queue,
// with the device in process (`up --no-daemon`) and through the daemon
// (`up`), the two modes alternating on the same namespaces, the median of
// SOFTFABRIC_SCALE_REPEAT runs (default 3) of each reported side by side.
// SOFTFABRIC_SCALE_CASES (names, comma-separated) runs only those cases.
// Each daemon run also runs the cases between two applications on one
// host, through its daemon's loopback, reported beside the runs between
// the hosts (SOFTFABRIC_SCALE_LOOPBACK=0: not, for a binary older than
// loopback, or to save the time).
// `make bench-daemon` runs it.
func BenchmarkDaemon(b *testing.B) {
	netnstest.Require(b)
	if err := ctrl.EnsureBPFFS(); err != nil {
		b.Fatal(err)
	}
	dur, repeat := runsFromEnv(b, 3)
	cases := daemonCases
	if only := os.Getenv("SOFTFABRIC_SCALE_CASES"); only != "" {
		cases = slices.DeleteFunc(slices.Clone(cases), func(c scaleCase) bool { return !slices.Contains(strings.Split(only, ","), c.name) })
		if len(cases) == 0 {
			b.Fatalf("SOFTFABRIC_SCALE_CASES=%s names no case", only)
		}
	}
	p := netnstest.NewPair(b, netnstest.Options{Queues: 1})
	type mode struct {
		name  string
		flags []string
		bin   string
	}
	modes := []mode{{"in-process", []string{"--no-daemon"}, sfBin}, {"daemon", nil, sfBin}}
	// SOFTFABRIC_SCALE_BINS: binaries to compare, in process and through
	// their daemons, all alternated in each run; their modes are named
	// after them.
	var bins []string
	if v := os.Getenv("SOFTFABRIC_SCALE_BINS"); v != "" {
		bins = strings.Split(v, ",")
		modes = nil
		for _, b := range bins {
			modes = append(modes, mode{"in-process " + filepath.Base(b), []string{"--no-daemon"}, b}, mode{"daemon " + filepath.Base(b), nil, b})
		}
	}
	res := map[string]map[string][]float64{}
	cpu := map[string]map[string][]float64{} // client (and its daemon) CPU ns per KiB
	// Frames the server sent back for each the client sent (ACKs, read
	// responses), and, through a daemon, frames per sendto(2) of the
	// client's daemon.
	back := map[string]map[string][]float64{}
	perKick := map[string]map[string][]float64{}
	defer func(b string) { sfBin = b }(sfBin)
	for r := 0; r < repeat; r++ {
		for _, m := range modes {
			sfBin = m.bin
			profileTag = fmt.Sprintf("%s-r%d-", m.name, r)
			for i, h := range []*netnstest.Host{p.A, p.B} {
				_, _ = h.Command(sfBin, "down", h.Iface).CombinedOutput()
				args := append([]string{"up", h.Iface}, m.flags...)
				if v := os.Getenv("SOFTFABRIC_SCALE_DAEMON_CPUS_" + string(rune('A'+i))); v != "" && len(m.flags) == 0 {
					args = append(args, "--cpus", v)
				}
				up := h.Command(sfBin, args...)
				if dir := os.Getenv("SOFTFABRIC_SCALE_PROFILE"); dir != "" {
					up.Env = append(os.Environ(), fmt.Sprintf("SOFTFABRIC_DAEMON_CPUPROFILE=%s/daemon-r%d-%c.prof", dir, r, 'A'+i))
				}
				if out, err := up.CombinedOutput(); err != nil {
					b.Fatalf("up %v: %v: %s", m.flags, err, out)
				}
			}
			// The client's daemon works for it: its CPU counts too.
			dpid := daemonPID(b, p.A)
			for _, c := range cases {
				before := cpuTime(dpid)
				fa, fb := countFrames(b, p.A), countFrames(b, p.B)
				v, err := runCase(p, c, 1, dur)
				if err != nil {
					b.Fatalf("%s %s: %v", m.name, c.name, err)
				}
				fa2, fb2 := countFrames(b, p.A), countFrames(b, p.B)
				if res[c.name] == nil {
					res[c.name], cpu[c.name] = map[string][]float64{}, map[string][]float64{}
					back[c.name], perKick[c.name] = map[string][]float64{}, map[string][]float64{}
				}
				if sent := fb2.rx - fb.rx; sent > 0 {
					back[c.name][m.name] = append(back[c.name][m.name], (fa2.rx-fa.rx)/sent)
				}
				if k := fa2.kicks - fa.kicks; k > 0 {
					perKick[c.name][m.name] = append(perKick[c.name][m.name], (fa2.tx-fa.tx)/k)
				}
				res[c.name][m.name] = append(res[c.name][m.name], v.rate)
				ns := v.cpuNsKB
				if dpid > 0 && v.kib > 0 {
					ns += float64(cpuTime(dpid)-before) / v.kib
				}
				cpu[c.name][m.name] = append(cpu[c.name][m.name], ns)
			}
			if m.flags != nil || bins != nil || os.Getenv("SOFTFABRIC_SCALE_LOOPBACK") == "0" {
				continue
			}
			// The same cases between two applications on A, through
			// A's daemon's loopback.
			self := &netnstest.Pair{A: p.A, B: p.A}
			for _, c := range cases {
				v, err := runCase(self, c, 1, dur)
				if err != nil {
					b.Fatalf("loopback %s: %v", c.name, err)
				}
				res[c.name]["loopback"] = append(res[c.name]["loopback"], v.rate)
			}
		}
	}
	for _, h := range []*netnstest.Host{p.A, p.B} {
		_, _ = h.Command(sfBin, "down", h.Iface).CombinedOutput()
	}
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	w := os.Stdout
	defer func() {
		fmt.Fprintf(w, "\nframes the server sent back per frame the client sent, and (through a daemon) frames per sendto(2) of the client's daemon, medians:\n")
		for _, c := range cases {
			for _, m := range modes {
				k := "-"
				if v := perKick[c.name][m.name]; len(v) > 0 {
					k = fmt.Sprintf("%.2f", median(v))
				}
				if v := back[c.name][m.name]; len(v) > 0 {
					fmt.Fprintf(w, "%-16s %-24s %8.3f back %8s a sendto\n", c.name, m.name, median(v), k)
				}
			}
		}
	}()
	if bins != nil {
		fmt.Fprintf(w, "\n%-16s %6s %-24s %10s %10s %s\n", "case", "unit", "mode", "median", "vs first", "runs")
		for _, c := range cases {
			in := median(res[c.name][modes[0].name])
			for _, m := range modes {
				dm := median(res[c.name][m.name])
				fmt.Fprintf(w, "%-16s %6s %-24s %10.3f %9.2f× %v\n", c.name, c.metric, m.name, dm, dm/in, res[c.name][m.name])
			}
		}
		fmt.Fprintf(w, "\nclient CPU per KiB (through a daemon: client + daemon), ns, medians:\n")
		for _, c := range cases {
			if c.metric == "µs" {
				continue
			}
			in := median(cpu[c.name][modes[0].name])
			for _, m := range modes {
				v := median(cpu[c.name][m.name])
				fmt.Fprintf(w, "%-16s %-24s %10.0f %9.2f×\n", c.name, m.name, v, v/in)
			}
		}
		return
	}
	fmt.Fprintf(w, "\n%-16s %6s %14s %14s %10s %s\n", "case", "unit", "in-process", "daemon", "ratio", "runs (in-process | daemon)")
	for _, c := range cases {
		in, dm := median(res[c.name]["in-process"]), median(res[c.name]["daemon"])
		extra := ""
		if c.metric == "µs" {
			extra = fmt.Sprintf(" (+%.2f µs)", dm-in)
		}
		fmt.Fprintf(w, "%-16s %6s %14.3f %14.3f %9.2f×%s %v | %v\n", c.name, c.metric, in, dm, dm/in, extra, res[c.name]["in-process"], res[c.name]["daemon"])
	}
	fmt.Fprintf(w, "\nthrough the daemon, between the hosts and between two applications on one (loopback):\n")
	for _, c := range cases {
		if len(res[c.name]["loopback"]) == 0 {
			continue
		}
		dm, lo := median(res[c.name]["daemon"]), median(res[c.name]["loopback"])
		fmt.Fprintf(w, "%-16s %6s %14.3f %14.3f %9.2f× %v\n", c.name, c.metric, dm, lo, lo/dm, res[c.name]["loopback"])
	}
	fmt.Fprintf(w, "\nclient CPU per KiB (through the daemon: client + daemon), ns, medians:\n")
	for _, c := range cases {
		if c.metric == "µs" {
			continue // perf reports CPU per round trip there, not per KiB
		}
		in, dm := median(cpu[c.name]["in-process"]), median(cpu[c.name]["daemon"])
		fmt.Fprintf(w, "%-16s %14.0f %14.0f %9.2f×\n", c.name, in, dm, dm/in)
	}
}
