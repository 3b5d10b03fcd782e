package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/device"
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
}

func perfFlagSet(o *perfOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (required)")
	fs.IntVar(&o.size, "size", 65536, "message size in bytes (atomic: 8)")
	fs.IntVar(&o.iters, "iters", 0, "messages (default 5000, 1000 with --lat; with --perftest, perftest's: 5000 for write, 1000 for send and read)")
	fs.DurationVar(&o.duration, "duration", 0, "run for this long instead of --iters")
	fs.IntVar(&o.qps, "qps", 1, "queue pairs")
	fs.BoolVar(&o.lat, "lat", false, "measure latency (one request in flight) instead of bandwidth")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.IntVar(&o.port, "port", perf.DefaultPort, "TCP port of the out-of-band exchange")
	fs.IntVar(&o.mtu, "mtu", 0, "path MTU: 256, 512, 1024, 2048 or 4096 (default: the largest the link allows)")
	fs.BoolVar(&o.compare, "compare", false, "client: also run the raw AF_XDP and UDP socket baselines at the same size, in the same run")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.StringVar(&o.perftest, "perftest", "", "client: run write, send or read against an unmodified perftest server (ib_write_bw, ib_send_bw, ib_read_bw) at this host, speaking perftest's exchange (--port defaults to perftest's 18515; --qps, and for send --size and --iters, must match the server's -q, -s, -n)")
	return fs
}

func signalContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	return ctx, func() { stop(); cancel() }
}

func cmdPerf(args []string, stdout, stderr io.Writer) error {
	var o perfOpts
	pos, err := parse(perfFlagSet(&o), args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("perf needs an operation (write, read, send, atomic, udp, xdp) and, for the client, a server address")
	}
	if o.perftest != "" {
		if len(pos) != 1 {
			return usagef("--perftest names the server: give no other server address")
		}
		if pos[0] != "write" && pos[0] != "send" && pos[0] != "read" {
			return usagef("--perftest runs write, send or read (ib_write_bw, ib_send_bw, ib_read_bw)")
		}
		if o.lat || o.compare {
			return usagef("--perftest runs perftest's BW tests: no --lat or --compare")
		}
	}
	op := pos[0]
	if !slices.Contains(perf.Ops, op) && !slices.Contains(perf.Baselines, op) {
		return usagef("unknown operation %q: want write, read, send, atomic, udp or xdp", op)
	}
	if o.iface == "" {
		return usagef("--iface is required")
	}
	if o.mtu != 0 && o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096 {
		return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	if o.size < 0 || o.qps < 1 || o.iters < 0 || o.duration < 0 || o.port <= 0 || o.port > 65535 {
		return usagef("--size, --qps, --iters, --duration and --port must be positive")
	}
	d, err := openDevice(o.iface)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := signalContext(o.timeout)
	defer cancel()

	if o.perftest != "" {
		return runPerftest(ctx, d, op, o, stdout, stderr)
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
		cfgs[i] = perf.Config{Op: t, Size: o.size, Iters: o.iters, Duration: o.duration, QPs: o.qps, Lat: o.lat, MTU: o.mtu}
	}
	rs, err := perf.Run(ctx, d, server, cfgs...)
	if err != nil {
		return err
	}
	if o.json {
		return perf.PrintJSON(stdout, rs)
	}
	for _, r := range rs {
		perf.Print(stdout, perf.Title(r.Op, o.lat), []perf.Result{r})
	}
	if len(rs) > 1 {
		perf.PrintRatios(stdout, rs)
	}
	return nil
}

// runPerftest is the client of an unmodified perftest BW server.
func runPerftest(ctx context.Context, d *device.Device, op string, o perfOpts, stdout, stderr io.Writer) error {
	server := o.perftest
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(o.port))
	}
	cfg := perf.Config{Op: op, Size: o.size, Iters: o.iters, Duration: o.duration, QPs: o.qps, MTU: o.mtu}
	run, err := perf.RunPerftest(ctx, d, server, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "softfabric perf: perftest %s server at %s", run.ServerVersion, server)
	for _, q := range run.Server {
		fmt.Fprintf(stderr, ", QPN %#06x PSN %#06x GID %v out_reads %d", q.QPN, q.PSN, q.GID.Unmap(), q.OutReads)
	}
	fmt.Fprintln(stderr)
	if o.json {
		return perf.PrintJSON(stdout, []perf.Result{run.Result})
	}
	perf.Print(stdout, perf.Title(op, false), []perf.Result{run.Result})
	return nil
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
	d, err := openDevice(o.iface)
	if err != nil {
		return err
	}
	defer d.Close()
	ctx, cancel := signalContext(2 * time.Minute)
	defer cancel()

	// Each mode's Serve and Run; zero sizes and MTUs take the tool's
	// defaults.
	var (
		serve func(context.Context, *device.Device, net.Listener) (perf.PingPongResult, error)
		run   func(context.Context, *device.Device, string) (perf.PingPongResult, error)
	)
	switch {
	case o.ud:
		pp := &perf.UDPingPong{Size: o.size, Iters: o.iters, MTU: o.mtu, WireGID: ctrl.WireGID, ParseWireGID: ctrl.ParseWireGID}
		serve, run = pp.Serve, pp.Run
	case o.srq:
		pp := &perf.SRQPingPong{Size: o.size, Iters: o.iters, MTU: o.mtu, QPs: o.qps, WireGID: ctrl.WireGID, ParseWireGID: ctrl.ParseWireGID}
		serve, run = pp.Serve, pp.Run
	default:
		pp := &perf.PingPong{Size: o.size, Iters: o.iters, MTU: o.mtu, WireGID: ctrl.WireGID, ParseWireGID: ctrl.ParseWireGID}
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

// openDevice opens the softfabric device on iface for this process.
func openDevice(iface string) (*device.Device, error) {
	if err := needRoot(); err != nil {
		return nil, err
	}
	return device.Open(iface, device.OpenOptions{})
}
