package scale

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// daemonCases are what BenchmarkDaemon compares, in process and through
// the daemon.
var daemonCases = []scaleCase{
	{"write-64B-1qp", "write", 64, 1, "Mpps"},
	{"write-64B-lat", "write", 64, 1, "µs"},
	{"write-64KiB-1qp", "write", 65536, 1, "Gb/s"},
}

// BenchmarkDaemon measures what the daemon costs: each case on one queue,
// with the device in process (`up --no-daemon`) and through the daemon
// (`up`), the two modes alternating on the same namespaces, the median of
// SOFTFABRIC_SCALE_REPEAT runs (default 3) of each reported side by side.
// `make bench-daemon` runs it.
func BenchmarkDaemon(b *testing.B) {
	netnstest.Require(b)
	if err := ctrl.EnsureBPFFS(); err != nil {
		b.Fatal(err)
	}
	dur, repeat := runsFromEnv(b, 3)
	p := netnstest.NewPair(b, netnstest.Options{Queues: 1})
	modes := []struct {
		name  string
		flags []string
	}{{"in-process", []string{"--no-daemon"}}, {"daemon", nil}}
	res := map[string]map[string][]float64{}
	for r := 0; r < repeat; r++ {
		for _, m := range modes {
			for _, h := range []*netnstest.Host{p.A, p.B} {
				_, _ = h.Command(sfBin, "down", h.Iface).CombinedOutput()
				if out, err := h.Command(sfBin, append([]string{"up", h.Iface}, m.flags...)...).CombinedOutput(); err != nil {
					b.Fatalf("up %v: %v: %s", m.flags, err, out)
				}
			}
			for _, c := range daemonCases {
				v, err := runCase(p, c, 1, dur)
				if err != nil {
					b.Fatalf("%s %s: %v", m.name, c.name, err)
				}
				if res[c.name] == nil {
					res[c.name] = map[string][]float64{}
				}
				res[c.name][m.name] = append(res[c.name][m.name], v.rate)
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
	fmt.Fprintf(w, "\n%-16s %6s %14s %14s %10s %s\n", "case", "unit", "in-process", "daemon", "ratio", "runs (in-process | daemon)")
	for _, c := range daemonCases {
		in, dm := median(res[c.name]["in-process"]), median(res[c.name]["daemon"])
		extra := ""
		if c.metric == "µs" {
			extra = fmt.Sprintf(" (+%.2f µs)", dm-in)
		}
		fmt.Fprintf(w, "%-16s %6s %14.3f %14.3f %9.2f×%s %v | %v\n", c.name, c.metric, in, dm, dm/in, extra, res[c.name]["in-process"], res[c.name]["daemon"])
	}
}
