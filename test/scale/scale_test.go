// Package scale measures how softfabric's data path scales with the
// queues of a NIC: two namespaces joined by a veth with Q queues, a worker
// per queue at each end, RDMA writes over Q×k queue pairs, next to raw
// AF_XDP over the same Q queues in the same run. `make bench-scale` runs
// it; it needs root, and no ip(8) (test hosts are made through netlink),
// so that it runs on a benchmark host without iproute2.
//
// Environment:
//
//	SOFTFABRIC_BIN               a softfabric binary to use (default: built here)
//	SOFTFABRIC_SCALE_QUEUES      queue counts, e.g. "1,2,4,8" (default: powers of
//	                             two up to half the CPUs, at least 1 and 2, at most 16)
//	SOFTFABRIC_SCALE_DURATION    length of each run (default 3s)
//	SOFTFABRIC_SCALE_REPEAT      runs of each case, the median reported (default 1)
//	SOFTFABRIC_SCALE_PIN         "1": pin the client's workers to the first CPUs and
//	                             the server's to the next ones (--cpus)
//	SOFTFABRIC_SCALE_CPUS_A, _B  CPU lists for the client's (A) and the server's
//	                             (B) perf --cpus (in process: the device's workers;
//	                             through a daemon: the application's thread)
//	SOFTFABRIC_SCALE_DAEMON_CPUS_A, _B
//	                             BenchmarkDaemon: `up --cpus` of A's and B's daemons
//	SOFTFABRIC_SCALE_OUT         also write the table to this file
//	SOFTFABRIC_SCALE_PROFILE     a directory: each case's client writes a CPU
//	                             profile there (CASE-qQ-client.prof; BenchmarkDaemon:
//	                             MODE-rR-CASE-q1-client.prof, and each daemon's
//	                             daemon-rR-A.prof and daemon-rR-B.prof)
//	SOFTFABRIC_SCALE_LAT_ITERS   round trips of a latency case (default 20000)
//	SOFTFABRIC_SCALE_LOOPBACK    "0": BenchmarkDaemon skips its loopback runs
//	SOFTFABRIC_SCALE_BINS        BenchmarkDaemon: softfabric binaries (comma-separated
//	                             paths) compared in process and through their
//	                             daemons, all alternated in each run
package scale

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/sfbin"
)

var sfBin string

func TestMain(m *testing.M) {
	sfBin = os.Getenv("SOFTFABRIC_BIN")
	if sfBin == "" && hasBench(os.Args) {
		bin, cleanup, err := sfbin.Build("../../cmd/softfabric")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sfBin = bin
		code := m.Run()
		cleanup()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func hasBench(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-test.bench") {
			return true
		}
	}
	return false
}

// scaleCase is one measured configuration at one queue count.
type scaleCase struct {
	name   string
	op     string // write, or xdp for raw AF_XDP
	size   int
	perQ   int // queue pairs (raw: senders) per queue
	metric string
}

var cases = []scaleCase{
	{"write-64B-lat", "write", 64, 1, "µs"},
	{"write-64B-1qp", "write", 64, 1, "Mpps"},
	{"write-64B-4qp", "write", 64, 4, "Mpps"},
	{"raw-xdp-64B", "xdp", 64, 1, "Mpps"},
	{"write-64KiB-1qp", "write", 65536, 1, "Gb/s"},
	{"raw-xdp-64KiB", "xdp", 65536, 1, "Gb/s"},
}

type measured struct {
	rate    float64 // in the case's metric
	cpuNsKB float64 // client CPU per KiB (0 when perf did not report it)
	retrans float64 // packets the client's queue pairs sent again
	kib     float64 // KiB the client moved
}

// BenchmarkScale runs every case at every queue count and prints a table
// of rates, efficiency against one queue (rate_Q / (Q × rate_1)) and the
// ratio to raw AF_XDP at the same Q.
func BenchmarkScale(b *testing.B) {
	netnstest.Require(b)
	if err := ctrl.EnsureBPFFS(); err != nil {
		b.Fatal(err)
	}
	queues := queueCounts(b)
	dur, repeat := runsFromEnv(b, 1)
	res := map[string]map[int]measured{}
	for _, q := range queues {
		p := netnstest.NewPair(b, netnstest.Options{Queues: q})
		for _, h := range []*netnstest.Host{p.A, p.B} {
			if out, err := h.Command(sfBin, "up", h.Iface, "--no-daemon").CombinedOutput(); err != nil {
				b.Fatalf("up: %v: %s", err, out)
			}
		}
		for _, c := range cases {
			var runs []measured
			for range repeat {
				m, err := runCase(p, c, q, dur)
				if err != nil {
					b.Fatalf("%d queues, %s: %v", q, c.name, err)
				}
				runs = append(runs, m)
			}
			slices.SortFunc(runs, func(x, y measured) int { return cmp.Compare(x.rate, y.rate) })
			m := runs[len(runs)/2]
			if res[c.name] == nil {
				res[c.name] = map[int]measured{}
			}
			res[c.name][q] = m
			b.Run(fmt.Sprintf("q=%d/%s", q, c.name), func(b *testing.B) {
				for range b.N {
				}
				b.ReportMetric(0, "ns/op") // the run is measured above, not per op
				b.ReportMetric(m.rate, c.metric)
			})
		}
		for _, h := range []*netnstest.Host{p.A, p.B} {
			_, _ = h.Command(sfBin, "down", h.Iface).CombinedOutput()
		}
	}
	var out bytes.Buffer
	printTable(&out, queues, res)
	fmt.Print(out.String())
	if f := os.Getenv("SOFTFABRIC_SCALE_OUT"); f != "" {
		if err := os.WriteFile(f, out.Bytes(), 0o644); err != nil {
			b.Error(err)
		}
	}
}

// runsFromEnv reads SOFTFABRIC_SCALE_DURATION (default 3 s) and
// SOFTFABRIC_SCALE_REPEAT (default repeat).
func runsFromEnv(b *testing.B, repeat int) (time.Duration, int) {
	dur := 3 * time.Second
	if s := os.Getenv("SOFTFABRIC_SCALE_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("SOFTFABRIC_SCALE_DURATION: %v", err)
		}
		dur = d
	}
	if s := os.Getenv("SOFTFABRIC_SCALE_REPEAT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("SOFTFABRIC_SCALE_REPEAT: %q", s)
		}
		repeat = n
	}
	return dur, repeat
}

func queueCounts(b *testing.B) []int {
	if s := os.Getenv("SOFTFABRIC_SCALE_QUEUES"); s != "" {
		var qs []int
		for _, f := range strings.Split(s, ",") {
			q, err := strconv.Atoi(f)
			if err != nil || q < 1 || q > 64 {
				b.Fatalf("SOFTFABRIC_SCALE_QUEUES: %q", f)
			}
			qs = append(qs, q)
		}
		return qs
	}
	qs := []int{1, 2}
	for q := 4; q <= 16 && 2*q <= runtime.NumCPU(); q *= 2 {
		qs = append(qs, q)
	}
	return qs
}

// profileTag begins the name of the profiles runCase writes (BenchmarkDaemon
// names the mode and the run there).
var profileTag string

// runCase runs one perf test between the namespaces and returns its rate.
func runCase(p *netnstest.Pair, c scaleCase, q int, dur time.Duration) (measured, error) {
	common := []string{"--json", "--timeout", "120s"}
	var scpus, ccpus []string
	if os.Getenv("SOFTFABRIC_SCALE_PIN") == "1" && 2*q <= runtime.NumCPU() {
		ccpus = []string{"--cpus", fmt.Sprintf("0-%d", q-1)}
		scpus = []string{"--cpus", fmt.Sprintf("%d-%d", q, 2*q-1)}
	}
	if v := os.Getenv("SOFTFABRIC_SCALE_CPUS_A"); v != "" {
		ccpus = []string{"--cpus", v}
	}
	if v := os.Getenv("SOFTFABRIC_SCALE_CPUS_B"); v != "" {
		scpus = []string{"--cpus", v}
	}
	srvArgs := append(append([]string{"perf", c.op, "--iface", p.B.Iface}, common...), scpus...)
	srv := p.B.Command(sfBin, srvArgs...)
	var sout, serr bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		return measured{}, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Wait() }()
	defer func() { _ = srv.Process.Kill(); wg.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	args := []string{"perf", c.op, "--iface", p.A.Iface, "--size", strconv.Itoa(c.size), "--qps", strconv.Itoa(q * c.perQ), "--duration", dur.String()}
	if c.metric == "µs" {
		// One round trip at a time on one queue pair: what a worker adds
		// to latency with the other queues idle.
		iters := "20000"
		if v := os.Getenv("SOFTFABRIC_SCALE_LAT_ITERS"); v != "" {
			iters = v
		}
		args = []string{"perf", c.op, "--iface", p.A.Iface, "--size", strconv.Itoa(c.size), "--lat", "--iters", iters}
	}
	args = append(append(append(args, common...), ccpus...), p.B.Addr.Addr().String())
	cmd := p.A.Command(sfBin, args...)
	if dir := os.Getenv("SOFTFABRIC_SCALE_PROFILE"); dir != "" {
		cmd.Env = append(os.Environ(), fmt.Sprintf("SOFTFABRIC_CPUPROFILE=%s/%s%s-q%d-client.prof", dir, profileTag, c.name, q))
	}
	var cout, cerr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &cout, &cerr
	if err := cmd.Run(); err != nil {
		return measured{}, fmt.Errorf("%v: %s%s (server: %s)", err, cout.String(), cerr.String(), serr.String())
	}
	var rs []map[string]any
	if err := json.Unmarshal(cout.Bytes(), &rs); err != nil || len(rs) != 1 {
		return measured{}, fmt.Errorf("perf output: %v: %s", err, cout.String())
	}
	r := rs[0]
	num := func(k string) float64 { v, _ := r[k].(float64); return v }
	m := measured{rate: num("msg_rate_mpps"), cpuNsKB: num("cpu_client_ns_per_kib"), retrans: num("retransmits"),
		kib: num("bytes") * num("iterations") * num("qps") / 1024}
	switch c.metric {
	case "Gb/s":
		m.rate = num("bw_avg_gbps")
	case "µs":
		m.rate = num("lat_median_us")
	}
	if m.rate <= 0 {
		return measured{}, fmt.Errorf("no rate in %s", cout.String())
	}
	return m, nil
}

func printTable(w io.Writer, queues []int, res map[string]map[int]measured) {
	fmt.Fprintf(w, "\n%-18s %6s %12s %12s %10s %12s %10s %12s\n", "case", "queues", "rate", "per queue", "efficiency", "vs raw xdp", "cpu ns/KiB", "retransmits")
	raw := map[string]string{"write-64B-1qp": "raw-xdp-64B", "write-64B-4qp": "raw-xdp-64B", "write-64KiB-1qp": "raw-xdp-64KiB"}
	for _, c := range cases {
		base := res[c.name][queues[0]].rate / float64(queues[0])
		for _, q := range queues {
			m := res[c.name][q]
			if c.metric == "µs" {
				fmt.Fprintf(w, "%-18s %6d %8.2f %-4s (median round trip)\n", c.name, q, m.rate, c.metric)
				continue
			}
			eff := m.rate / (float64(q) * base)
			vs := "-"
			if rn, ok := raw[c.name]; ok && res[rn][q].rate > 0 {
				vs = fmt.Sprintf("%.1f %%", 100*m.rate/res[rn][q].rate)
			}
			fmt.Fprintf(w, "%-18s %6d %8.3f %-4s %8.3f %-4s %9.2f %12s %10.0f %12.0f\n", c.name, q, m.rate, c.metric, m.rate/float64(q), c.metric, eff, vs, m.cpuNsKB, m.retrans)
		}
	}
}
