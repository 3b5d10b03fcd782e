package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/internal/perf"
)

func init() {
	commands["perf"] = command{run: cmdPerf, flags: func() *flag.FlagSet { return perfFlagSet(new(perfOpts)) }}
	commands["pingpong"] = command{run: cmdPingPong, flags: func() *flag.FlagSet { return ppFlagSet(new(ppOpts)) }}
}

type perfOpts struct {
	iface    string
	size     int
	iters    int
	duration time.Duration
	qps      int
	lat      bool
	json     bool
	port     int
	mtu      int
	compare  bool
	timeout  time.Duration
	perftest string
	ptServer bool
	rdmaCM   bool
	all      bool
	atomic   string
	cpus     string
	hfi      hfiModelOpts    // --hfi-model (hfimodel.go)
	set      map[string]bool // flags given on the command line
}

func perfFlagSet(o *perfOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (required)")
	fs.IntVar(&o.size, "size", 65536, "message size in bytes (atomic: 8; perftest's latency tests: default 2, as their -s)")
	fs.IntVar(&o.iters, "iters", 0, "messages (default 5000, 1000 with --lat; in the perftest modes perftest's -n: on each QP, default 5000 for write, 1000 for read, send, atomic and every --lat test)")
	fs.DurationVar(&o.duration, "duration", 0, "run for this long instead of --iters")
	fs.IntVar(&o.qps, "qps", 1, "queue pairs (perftest's -q)")
	fs.BoolVar(&o.lat, "lat", false, "measure latency (one request in flight) instead of bandwidth")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.IntVar(&o.port, "port", perf.DefaultPort, "TCP port of the out-of-band exchange (with --rdma-cm: the RDMA-CM port, rdma_cm's TCP port space)")
	fs.IntVar(&o.mtu, "mtu", 0, "path MTU: 256, 512, 1024, 2048 or 4096 (default: the largest the link allows)")
	fs.BoolVar(&o.compare, "compare", false, "client: also run the raw AF_XDP and UDP socket baselines at the same size, in the same run")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.StringVar(&o.perftest, "perftest", "", "client: run write, read, send or atomic against an unmodified perftest server (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw; with --lat ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat) at this host, speaking perftest's exchange and printing perftest's table (MB/sec meaning MiB/s; latency in usec, half the round trip for send and write); perftest exchanges none of the test's parameters, so --qps and --all, and for send --size and --iters, must match the server's -q, -a, -s, -n (--iters and --qps as perftest counts them: --iters on each QP)")
	fs.BoolVar(&o.ptServer, "perftest-server", false, "serve one unmodified perftest client (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw -F -x GID_INDEX [-p PORT] SERVER; with --lat ib_write_lat, ib_read_lat, ib_send_lat, ib_atomic_lat) as perftest's server does, print perftest's table, then exit; perftest exchanges none of the test's parameters, so --qps and --all, for send --size and --iters (receives counted on each QP), and for write and read a --size at least the client's -s, must match the client's -q, -a, -s, -n")
	fs.BoolVar(&o.rdmaCM, "rdma-cm", false, "with --perftest or --perftest-server: perftest's RDMA-CM mode (ib_*_bw -R): the exchange and every QP connect over RDMA-CM on --port (no TCP); the peer must give -R too")
	fs.BoolVar(&o.all, "all", false, "with --perftest or --perftest-server: perftest's -a, every size from 2 B to 8 MiB (write, read, send); both sides must give it")
	fs.StringVar(&o.atomic, "atomic-type", "FETCH_AND_ADD", "with --perftest or --perftest-server, atomic: perftest's -A, FETCH_AND_ADD or CMP_AND_SWAP")
	fs.StringVar(&o.cpus, "cpus", "", "pin the device's workers, one per queue, to these CPUs in turn (a list like 0-3,8; default: not pinned)")
	o.hfi.register(fs)
	return fs
}

func signalContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	return ctx, func() { stop(); cancel() }
}

func cmdPerf(args []string, stdout, stderr io.Writer) error {
	var o perfOpts
	fs := perfFlagSet(&o)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("perf needs an operation (write, read, send, atomic, udp, xdp) and, for the client, a server address")
	}
	if err := checkPerftestFlags(pos, o); err != nil {
		return err
	}
	op := pos[0]
	if !slices.Contains(perf.Ops, op) && !slices.Contains(perf.Baselines, op) {
		return usagef("unknown operation %q: want write, read, send, atomic, udp or xdp", op)
	}
	if o.iface == "" && !o.hfi.on {
		return usagef("--iface is required")
	}
	if o.mtu != 0 && o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096 {
		return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	if o.size < 0 || o.qps < 1 || o.iters < 0 || o.duration < 0 || o.port <= 0 || o.port > 65535 {
		return usagef("--size, --qps, --iters, --duration and --port must be positive")
	}
	if o.hfi.on {
		return runHFIModel(pos, o, stdout, stderr)
	}
	for _, f := range []string{"hfi-chip", "hfi-loss", "hfi-eager"} {
		if o.set[f] {
			return usagef("--%s is for --hfi-model", f)
		}
	}
	if err := checkHFIUnit(op, o, stderr); err != nil {
		return err
	}
	cpus, err := parseCPUList(o.cpus)
	if err != nil {
		return usagef("--cpus %q: %v", o.cpus, err)
	}
	if (op == "xdp" || o.compare) && device.Served(o.iface) {
		return fmt.Errorf("the raw AF_XDP baseline needs the device's sockets in this process, but a daemon serves %s: bring it up with 'softfabric up %s --no-daemon'", o.iface, o.iface)
	}
	d, closeDevice, err := openDevice(o.iface, device.OpenOptions{CPUs: cpus, Peers: o.hfi.peers})
	if err != nil {
		return err
	}
	defer closeDevice()
	ctx, cancel := signalContext(o.timeout)
	defer cancel()

	if o.perftest != "" {
		return runPerftest(ctx, d, op, o, stdout, stderr)
	}
	if o.ptServer {
		return servePerftest(ctx, d, op, o, stdout, stderr)
	}
	if len(pos) == 1 { // server
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(o.port))
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Fprintf(stderr, "softfabric perf: waiting for a client on port %d (%s)\n", o.port, o.iface)
		rs, err := perf.Serve(ctx, d, ln)
		if err != nil {
			return err
		}
		if o.json {
			return perf.PrintJSON(stdout, rs)
		}
		for _, r := range rs {
			fmt.Fprintf(stdout, "softfabric perf: served %s, %d bytes, %d QP(s)%s\n", r.Op, r.Bytes, r.QPs, receivedNote(r))
			perf.PrintWorkers(stdout, r.Workers)
		}
		return nil
	}
	server := pos[1]
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(o.port))
	}
	tests := []string{op}
	if o.compare {
		for _, b := range perf.Baselines {
			if b != op {
				tests = append(tests, b)
			}
		}
	}
	cfgs := make([]perf.Config, len(tests))
	for i, t := range tests {
		cfgs[i] = perfConfig(t, o)
	}
	// A baseline that received nothing is left out of the results and the
	// run goes on; its error (one line) ends the command after the
	// results. Any other failure ends the run, after the results of the
	// tests before it.
	rs, err := perf.Run(ctx, d, server, cfgs...)
	if len(rs) == 0 {
		return err
	}
	if o.json {
		if jerr := perf.PrintJSON(stdout, rs); err == nil {
			err = jerr
		}
		return err
	}
	for _, r := range rs {
		perf.Print(stdout, perf.Title(r.Op, o.lat), []perf.Result{r})
	}
	if len(rs) > 1 {
		perf.PrintRatios(stdout, rs)
	}
	return err
}

// perfConfig is the test op of perf's own exchange: atomics are 8 bytes
// unless --size says otherwise (and is refused then).
func perfConfig(op string, o perfOpts) perf.Config {
	cfg := perf.Config{Op: op, Size: o.size, Iters: o.iters, Duration: o.duration, QPs: o.qps, Lat: o.lat, MTU: o.mtu}
	if op == "atomic" && !o.set["size"] {
		cfg.Size = 0 // 8 bytes
	}
	return cfg
}

// checkPerftestFlags checks the command line of the perftest modes, and
// that their options come with one of them.
func checkPerftestFlags(pos []string, o perfOpts) error {
	if o.perftest == "" && !o.ptServer {
		for _, f := range []string{"all", "atomic-type", "rdma-cm"} {
			if o.set[f] {
				return usagef("--%s is for --perftest and --perftest-server", f)
			}
		}
		return nil
	}
	mode := "--perftest"
	if o.ptServer {
		mode = "--perftest-server"
		if o.perftest != "" {
			return usagef("--perftest (client) and --perftest-server: choose one")
		}
		if len(pos) != 1 {
			return usagef("--perftest-server takes no server address")
		}
		if o.set["duration"] {
			return usagef("--perftest-server runs as long as its client: no --duration")
		}
	} else if len(pos) != 1 {
		return usagef("--perftest names the server: give no other server address")
	}
	switch pos[0] {
	case "write", "read", "send", "atomic":
	default:
		return usagef("%s runs write, read, send or atomic (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw)", mode)
	}
	if o.compare {
		return usagef("%s runs perftest's tests: no --compare", mode)
	}
	if o.lat {
		switch {
		case o.rdmaCM:
			return usagef("--lat runs perftest's latency tests over its TCP exchange: no --rdma-cm")
		case o.qps != 1:
			return usagef("perftest's latency tests run one queue pair: no --qps")
		case o.set["duration"]:
			return usagef("--lat with %s runs --iters: no --duration", mode)
		}
	}
	if o.set["atomic-type"] && pos[0] != "atomic" {
		return usagef("--atomic-type is for atomic")
	}
	if _, err := atomicCmpSwap(o.atomic); err != nil {
		return err
	}
	if pos[0] == "atomic" && o.set["size"] && o.size != 8 {
		return usagef("perftest's atomic test is 8 bytes: no --size")
	}
	if o.all && pos[0] == "atomic" {
		return usagef("ib_atomic_bw has no -a: no --all with atomic")
	}
	if o.all && o.set["size"] {
		return usagef("--all runs every size from 2 B to 8 MiB: no --size")
	}
	if o.all && o.set["duration"] || pos[0] == "send" && o.set["duration"] {
		return usagef("--duration is for write, read and atomic at one size")
	}
	if o.set["iters"] && o.iters < 5 {
		return usagef("--iters %d: perftest needs at least 5", o.iters)
	}
	return nil
}

// atomicCmpSwap reads --atomic-type as perftest reads -A.
func atomicCmpSwap(t string) (bool, error) {
	switch strings.ToUpper(t) {
	case "FETCH_AND_ADD":
		return false, nil
	case "CMP_AND_SWAP":
		return true, nil
	}
	return false, usagef("--atomic-type %q: want FETCH_AND_ADD or CMP_AND_SWAP", t)
}

// perftestConfig is the test of the perftest modes.
func perftestConfig(op string, o perfOpts) perf.PerftestConfig {
	cfg := perf.PerftestConfig{Op: op, Iters: o.iters, QPs: o.qps, MTU: o.mtu, All: o.all, Duration: o.duration, Lat: o.lat}
	if op != "atomic" && !o.all && (!o.lat || o.set["size"]) {
		cfg.Size = o.size // the latency tests' default is perftest's, 2 bytes
	}
	cfg.CmpSwap, _ = atomicCmpSwap(o.atomic)
	return cfg
}

// runPerftest is the client of an unmodified perftest BW server.
func runPerftest(ctx context.Context, d *perf.Device, op string, o perfOpts, stdout, stderr io.Writer) error {
	server := o.perftest
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(o.port))
	}
	cfg := perftestConfig(op, o)
	var run perf.PerftestOutcome
	var err error
	if o.rdmaCM {
		run, err = perf.RunPerftestCM(ctx, d, server, cfg)
	} else {
		run, err = perf.RunPerftest(ctx, d, server, cfg)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "softfabric perf: perftest %s server at %s", run.PeerVersion, server)
	printPeerQPs(stderr, run.Peer)
	if o.json {
		return perf.PrintJSON(stdout, run.Results)
	}
	printPerftest(stdout, op, cfg, run)
	perf.PrintTransport(stdout, run.Results)
	return nil
}

// servePerftest answers one unmodified perftest BW client.
func servePerftest(ctx context.Context, d *perf.Device, op string, o perfOpts, stdout, stderr io.Writer) error {
	cfg := perftestConfig(op, o)
	var sv perf.PerftestOutcome
	var err error
	if o.rdmaCM {
		sv, err = perf.ServePerftestCM(ctx, d, uint16(o.port), cfg, func(at netip.AddrPort) {
			fmt.Fprintf(stderr, "softfabric perf: waiting for a perftest client (ib_%s_bw -R) on RDMA-CM port %d (%s, %v)\n", op, o.port, o.iface, at.Addr())
		})
	} else {
		var ln net.Listener
		if ln, err = net.Listen("tcp", ":"+strconv.Itoa(o.port)); err != nil {
			return err
		}
		defer ln.Close()
		fmt.Fprintf(stderr, "softfabric perf: waiting for a perftest client (ib_%s_bw) on port %d (%s)\n", op, o.port, o.iface)
		sv, err = perf.ServePerftest(ctx, d, ln, cfg)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "softfabric perf: perftest %s client", sv.PeerVersion)
	printPeerQPs(stderr, sv.Peer)
	if o.json {
		return perf.PrintJSON(stdout, sv.Results)
	}
	if cfg.Lat && (op == "read" || op == "atomic") {
		fmt.Fprintf(stderr, "softfabric perf: served ib_%s_lat's requests (its server prints no table)\n", op)
		return nil
	}
	printPerftest(stdout, op, cfg, sv)
	return nil
}

// printPerftest prints perftest's table of a run: the BW or the latency
// one.
func printPerftest(w io.Writer, op string, cfg perf.PerftestConfig, run perf.PerftestOutcome) {
	title := perf.PerftestTitle(op, cfg.CmpSwap, cfg.Lat)
	if cfg.Lat {
		perf.PrintPerftestLat(w, title, run.MTU, run.Lat)
		return
	}
	perf.PrintPerftest(w, title, max(cfg.QPs, 1), run.MTU, run.Lines)
}

func printPeerQPs(w io.Writer, qs []perf.PerftestQP) {
	for _, q := range qs {
		fmt.Fprintf(w, ", QPN %#06x PSN %#06x GID %v out_reads %d", q.QPN, q.PSN, q.GID.Unmap(), q.OutReads)
	}
	fmt.Fprintln(w)
}

func receivedNote(r perf.Result) string {
	if r.Received > 0 {
		return fmt.Sprintf(", %d messages received", r.Received)
	}
	return ""
}

type ppOpts struct {
	iface string
	size  int
	iters int
	mtu   int
	port  int
	gid   int
	ud    bool
	srq   bool
	qps   int
}

func ppFlagSet(o *ppOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (required)")
	fs.BoolVar(&o.ud, "ud", false, "speak ibv_ud_pingpong: one UD QP, Q_Key 0x11111111, the message within the port's MTU")
	fs.BoolVar(&o.srq, "srq", false, "speak ibv_srq_pingpong: -q RC QPs sharing one SRQ (both ends must run the same -q)")
	fs.IntVar(&o.size, "s", 0, "message size (default 4096; --ud: 1024, as ibv_ud_pingpong)")
	fs.IntVar(&o.iters, "n", 1000, "iterations (--srq: over all QPs together, as ibv_srq_pingpong counts them)")
	fs.IntVar(&o.mtu, "m", 0, "path MTU: 256, 512, 1024, 2048 or 4096 (default 1024; --ud: the port's active MTU, which -m can only lower)")
	fs.IntVar(&o.qps, "q", 16, "--srq: queue pairs, 1 to 255")
	fs.IntVar(&o.port, "p", perf.DefaultPort, "TCP port of the exchange")
	fs.IntVar(&o.gid, "g", -1, "GID index (accepted for rdma-core compatibility; the GID follows the address the exchange uses)")
	return fs
}

func cmdPingPong(args []string, stdout, stderr io.Writer) error {
	var o ppOpts
	fs := ppFlagSet(&o)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if len(pos) > 1 {
		return usagef("pingpong takes at most one server address")
	}
	if o.iface == "" {
		return usagef("--iface is required")
	}
	if o.ud && o.srq {
		return usagef("--ud and --srq: choose one")
	}
	if set["q"] && !o.srq {
		return usagef("-q is for --srq")
	}
	if set["s"] && o.size < 1 || o.iters < 1 || o.port <= 0 || o.port > 65535 {
		return usagef("-s, -n and -p must be positive")
	}
	if set["m"] && o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096 {
		return usagef("-m %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	if o.srq && (o.qps < 1 || o.qps > perf.SRQMaxQPs) {
		return usagef("-q %d: want 1 to %d", o.qps, perf.SRQMaxQPs)
	}
	if o.ud && o.size > 4096 {
		return usagef("-s %d: a UD message fits one packet, at most 4096 bytes", o.size)
	}
	d, closeDevice, err := openDevice(o.iface, device.OpenOptions{})
	if err != nil {
		return err
	}
	defer closeDevice()
	ctx, cancel := signalContext(2 * time.Minute)
	defer cancel()

	// Each mode's Serve and Run; zero sizes and MTUs take the tool's
	// defaults.
	var (
		serve func(context.Context, *perf.Device, net.Listener) (perf.PingPongResult, error)
		run   func(context.Context, *perf.Device, string) (perf.PingPongResult, error)
	)
	switch {
	case o.ud:
		pp := &perf.UDPingPong{Size: o.size, Iters: o.iters, MTU: o.mtu}
		serve, run = pp.Serve, pp.Run
	case o.srq:
		pp := &perf.SRQPingPong{Size: o.size, Iters: o.iters, MTU: o.mtu, QPs: o.qps}
		serve, run = pp.Serve, pp.Run
	default:
		pp := &perf.PingPong{Size: o.size, Iters: o.iters, MTU: o.mtu}
		serve, run = pp.Serve, pp.Run
	}
	var r perf.PingPongResult
	if len(pos) == 0 {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(o.port))
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Fprintf(stderr, "softfabric pingpong: waiting for a client on port %d (%s)\n", o.port, o.iface)
		r, err = serve(ctx, d, ln)
		if err != nil {
			return err
		}
	} else {
		server := pos[0]
		if _, _, err := net.SplitHostPort(server); err != nil {
			server = net.JoinHostPort(server, strconv.Itoa(o.port))
		}
		r, err = run(ctx, d, server)
		if err != nil {
			return err
		}
	}
	// The tools print their addresses on stdout before the test; we keep
	// stdout to the result lines, as for the RC test, and give the
	// addresses on stderr.
	fmt.Fprint(stderr, r.AddressLines())
	fmt.Fprint(stdout, r)
	return nil
}

// openDevice opens the softfabric device on iface for this process, its
// workers pinned to o.CPUs (none: not pinned); an HFI unit (hfi1_N) with
// the peers file o.Peers. The process owns it until it exits; each test
// runs on it through a fabric domain (the raw baselines, directly).
func openDevice(iface string, o device.OpenOptions) (*perf.Device, func(), error) {
	if _, hfi := hfidevice.UnitNumber(iface); !hfi && !device.Served(iface) {
		// In process: the AF_XDP sockets and the classifier need root.
		if err := needRoot(); err != nil {
			return nil, nil, err
		}
	}
	d, err := device.OpenAny(iface, o)
	if err != nil {
		return nil, nil, err
	}
	if gone := d.Gone(); gone != nil {
		// A command waiting for a peer would never learn it otherwise.
		go func() {
			<-gone
			fmt.Fprintf(os.Stderr, "softfabric: %s: %v\n", iface, device.ErrGone)
			os.Exit(1)
		}()
	}
	return perf.OnDevice(d), func() { _ = d.Close() }, nil
}
