package perf

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/device"
)

// pair returns two devices on an in-memory link. Both answer to 127.0.0.1,
// where the out-of-band TCP exchange runs, and each resolves it to the
// other's MAC.
func pair(t *testing.T, faults memlink.Faults) (*device.Device, *device.Device) {
	return pairN(t, faults, 1)
}

// pairN is pair with n workers per device, worker i of one joined to
// worker i of the other.
func pairN(t *testing.T, faults memlink.Faults, n int) (*device.Device, *device.Device) {
	return pairWith(t, memlink.Config{AtoB: faults, BtoA: faults}, n)
}

// pairWith is pairN over memlinks configured by cfg (with backpressure).
func pairWith(t *testing.T, cfg memlink.Config, n int) (*device.Device, *device.Device) {
	var la, lb []link.Link
	for i := range n {
		c := cfg
		c.Backpressure, c.Seed = true, 7+uint64(i)
		x, y := memlink.NewPair(c)
		la, lb = append(la, x), append(lb, y)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	resolver := func(mac [6]byte) device.Resolver {
		return func(context.Context, netip.Addr) (netip.Addr, [6]byte, error) { return lo, mac, nil }
	}
	gids := []netip.Addr{netip.AddrFrom16(lo.As16())}
	a := device.NewWorkers(la, device.Options{Name: "a", MAC: macA, GIDs: gids, MTU: 1500, Resolve: resolver(macB)})
	b := device.NewWorkers(lb, device.Options{Name: "b", MAC: macB, GIDs: gids, MTU: 1500, Resolve: resolver(macA)})
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func runPair(t *testing.T, cfg Config, faults memlink.Faults) (client, server Result) {
	t.Helper()
	a, b := pair(t, faults)
	return runOn(t, a, b, cfg)
}

// runOn runs one test with a as the client and b as the server.
func runOn(t *testing.T, a, b *device.Device, cfg Config) (client, server Result) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type out struct {
		r   []Result
		err error
	}
	srv := make(chan out, 1)
	go func() {
		r, err := Serve(ctx, OnDevice(b), ln)
		srv <- out{r, err}
	}()
	cs, err := Run(ctx, OnDevice(a), ln.Addr().String(), cfg)
	s := <-srv
	if err != nil || s.err != nil {
		t.Fatalf("client: %v; server: %v", err, s.err)
	}
	if len(cs) != 1 || len(s.r) != 1 {
		t.Fatalf("%d client and %d server results, want 1 each", len(cs), len(s.r))
	}
	return cs[0], s.r[0]
}

func TestPerfOps(t *testing.T) {
	for _, op := range Ops {
		for _, lat := range []bool{false, true} {
			cfg := Config{Op: op, Size: 4096, Iters: 300, Lat: lat, QPs: 2}
			if op == "atomic" {
				cfg.Size = 8
			}
			c, s := runPair(t, cfg, memlink.Faults{})
			if c.Iters != 300 {
				t.Fatalf("%s: %d iterations", op, c.Iters)
			}
			if lat && (c.LatMinUs <= 0 || c.LatMaxUs < c.LatMedianUs || c.LatMedianUs < c.LatMinUs) {
				t.Fatalf("%s latency: %+v", op, c)
			}
			if !lat && (c.BWAvgMBps <= 0 || c.MsgRateMpps <= 0 || c.BWPeakMBps < c.BWAvgMBps) {
				t.Fatalf("%s bandwidth: %+v", op, c)
			}
			if op == "send" && c.Received != 300 {
				t.Fatalf("send: server received %d, want 300 (%+v)", c.Received, s)
			}
		}
	}
}

// TestPerfWorkers: on devices of three workers, the queue pairs spread over
// the workers (a lane each, on its worker's goroutine), every request
// completes once and every send is received; each worker reports its own
// frames.
func TestPerfWorkers(t *testing.T) {
	a, b := pairN(t, memlink.Faults{}, 3)
	for _, tc := range []struct {
		op       string
		qps      int
		lat      bool
		busyWork int // workers that must have sent frames
	}{
		{"write", 3, false, 3}, {"send", 4, false, 3}, {"read", 2, false, 2}, {"atomic", 5, false, 3},
		{"write", 1, false, 1}, {"send", 3, true, 1},
	} {
		cfg := Config{Op: tc.op, Size: 1000, Iters: 600, QPs: tc.qps, Lat: tc.lat}
		if tc.op == "atomic" {
			cfg.Size = 8
		}
		c, s := runOn(t, a, b, cfg)
		if c.Iters != 600 || tc.op == "send" && c.Received != 600 {
			t.Fatalf("%+v: %d completed, %d received", tc, c.Iters, c.Received)
		}
		if len(c.Workers) != 3 || len(s.Workers) != 3 {
			t.Fatalf("%+v: worker figures %+v / %+v", tc, c.Workers, s.Workers)
		}
		busy := 0
		for _, w := range c.Workers {
			if w.TxFrames > 0 {
				busy++
			}
			if w.HandedOff != 0 || w.HandoffDrops != 0 {
				t.Fatalf("%+v: worker %d handed frames over between aligned workers: %+v", tc, w.Worker, w)
			}
		}
		if busy != tc.busyWork {
			t.Fatalf("%+v: %d workers sent frames, want %d: %+v", tc, busy, tc.busyWork, c.Workers)
		}
		var out bytes.Buffer
		PrintWorkers(&out, c.Workers)
		if !strings.Contains(out.String(), "worker 2 (queue 2): rx ") {
			t.Fatalf("worker lines:\n%s", out.String())
		}
	}
}

// TestPerfLossy: perf completes over a lossy link, every send received.
func TestPerfLossy(t *testing.T) {
	c, _ := runPair(t, Config{Op: "send", Size: 3000, Iters: 500}, memlink.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02})
	if c.Received != 500 {
		t.Fatalf("received %d, want 500", c.Received)
	}
}

func TestPerfBadParams(t *testing.T) {
	for _, cfg := range []Config{{Op: "frob"}, {Op: "atomic", Size: 16}, {Op: "write", QPs: 1000}, {Op: "write", Size: -1}} {
		if err := cfg.check(); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestPrint(t *testing.T) {
	var b bytes.Buffer
	Print(&b, Title("write", false), []Result{{Bytes: 65536, Iters: 5000, BWAvgGbps: 9.5, BWPeakGbps: 9.8, BWAvgMBps: 1187.5, BWPeakMBps: 1225, MsgRateMpps: 0.018}})
	if !strings.Contains(b.String(), "RDMA_Write BW Test") || !strings.Contains(b.String(), "BW average[Gb/sec]") || !strings.Contains(b.String(), " 65536 ") {
		t.Fatalf("table:\n%s", b.String())
	}
}

func TestPingPong(t *testing.T) {
	a, b := pair(t, memlink.Faults{Loss: 0.01})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pp := PingPong{Size: 4096, Iters: 200}
	errc := make(chan error, 1)
	go func() {
		s := pp
		_, err := s.Serve(ctx, OnDevice(b), ln)
		errc <- err
	}()
	c := pp
	r, err := c.Run(ctx, OnDevice(a), ln.Addr().String())
	if serr := <-errc; serr != nil || err != nil {
		t.Fatalf("client: %v; server: %v", err, serr)
	}
	if r.Iters != 200 || r.Bytes != 4096*200*2 || !strings.Contains(r.String(), "usec/iter") {
		t.Fatalf("result %+v\n%s", r, r)
	}
}

// TestCompare runs an RDMA test and both baselines over one connection, as
// `softfabric perf write --compare` does.
func TestCompare(t *testing.T) {
	for _, lat := range []bool{false, true} {
		a, b := pair(t, memlink.Faults{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errc := make(chan error, 1)
		go func() {
			_, err := Serve(ctx, OnDevice(b), ln)
			errc <- err
		}()
		var cfgs []Config
		for _, op := range []string{"write", "xdp", "udp"} {
			cfgs = append(cfgs, Config{Op: op, Size: 2000, Iters: 200, Lat: lat})
		}
		rs, err := Run(ctx, OnDevice(a), ln.Addr().String(), cfgs...)
		if serr := <-errc; err != nil || serr != nil {
			t.Fatalf("client: %v; server: %v", err, serr)
		}
		cancel()
		ln.Close()
		if len(rs) != 3 {
			t.Fatalf("%d results", len(rs))
		}
		for _, r := range rs {
			if lat && r.LatMedianUs <= 0 || !lat && r.MsgRateMpps <= 0 {
				t.Fatalf("lat=%v %s: %+v", lat, r.Op, r)
			}
			// Both sides' CPU time, per KiB or per round trip.
			if lat && (r.CPUClientNsPerOp <= 0 || r.CPUServerNsPerOp <= 0) || !lat && (r.CPUClientNsPerKiB <= 0 || r.CPUServerNsPerKiB <= 0) {
				t.Fatalf("lat=%v %s: CPU figures missing: %+v", lat, r.Op, r)
			}
			var out bytes.Buffer
			Print(&out, Title(r.Op, lat), []Result{r})
			if !strings.Contains(out.String(), " cpu: client ") || !strings.Contains(out.String(), ", server ") {
				t.Fatalf("no CPU line:\n%s", out.String())
			}
		}
		var buf bytes.Buffer
		if !lat {
			PrintRatios(&buf, rs)
			if !strings.Contains(buf.String(), "vs xdp") || !strings.Contains(buf.String(), "vs udp") {
				t.Fatalf("ratios:\n%s", buf.String())
			}
		}
	}
}
