package perf

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/internal/udpbatch"
)

// TestUDPPlan: a message crosses as datagrams that fit the link, never as
// IP fragments, in sends the kernel segments when it can.
func TestUDPPlan(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::2")
	for _, tc := range []struct {
		size, mtu int
		addr      netip.Addr
		gso       bool
		want      udpPlan
	}{
		{65536, 1500, v4, true, udpPlan{size: 65536, dg: 1472, chunk: 44 * 1472, perMsg: 2}},
		{65536, 1500, v4, false, udpPlan{size: 65536, dg: 1472, chunk: 1472, perMsg: 45}},
		{65536, 1500, v6, true, udpPlan{size: 65536, dg: 1452, chunk: 45 * 1452, perMsg: 2}},
		{64, 1500, v4, true, udpPlan{size: 64, dg: 64, chunk: 64, perMsg: 1}},
		{1472, 1500, v4, true, udpPlan{size: 1472, dg: 1472, chunk: 1472, perMsg: 1}},
		{3000, 1500, v4, true, udpPlan{size: 3000, dg: 1472, chunk: 3000, perMsg: 1}},
		{1 << 20, 9000, v4, true, udpPlan{size: 1 << 20, dg: 8972, chunk: 7 * 8972, perMsg: 17}},
		{100000, 65536, v4, true, udpPlan{size: 100000, dg: 65507, chunk: 65507, perMsg: 2}},
	} {
		p := newUDPPlan(tc.size, tc.mtu, tc.addr, tc.gso)
		if p != tc.want {
			t.Errorf("newUDPPlan(%d, %d, %v, %v) = %+v, want %+v", tc.size, tc.mtu, tc.addr, tc.gso, p, tc.want)
		}
		if p.chunk > maxUDP || p.dg+28 > tc.mtu && p.dg < tc.size {
			t.Errorf("%+v: sends over the UDP maximum or datagrams over the MTU", p)
		}
		total := 0
		for _, s := range p.sends(link.IdealBatch)[:p.perMsg] {
			total += len(s)
		}
		if total != tc.size {
			t.Errorf("%+v: a message's sends carry %d bytes", p, total)
		}
	}
}

// loopbackUDP returns a connected sender and its receiver on 127.0.0.1.
func loopbackUDP(t *testing.T, bufSize int) (snd, rcv *udpbatch.Conn) {
	t.Helper()
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close(); rc.Close() })
	_ = rc.SetReadBuffer(4 << 20)
	if snd, err = udpbatch.New(sc, link.IdealBatch, bufSize); err != nil {
		t.Fatal(err)
	}
	if rcv, err = udpbatch.New(rc, link.IdealBatch, bufSize); err != nil {
		t.Fatal(err)
	}
	return snd, rcv
}

// TestUDPBaselineAllocs: the UDP baseline's per-batch paths (a batch of
// sends, the server's receive, its echo and the client's receive of the
// echoes) allocate nothing.
func TestUDPBaselineAllocs(t *testing.T) {
	snd, rcv := loopbackUDP(t, 2048)
	p := newUDPPlan(1000, 1500, netip.MustParseAddr("127.0.0.1"), false)
	s := newUDPSender(snd, p)
	sink := &udpSink{b: rcv}
	batch := func() {
		n, err := s.send(0, link.IdealBatch)
		if n != link.IdealBatch || err != nil {
			t.Fatalf("send = %d, %v", n, err)
		}
		for got := 0; got < n; {
			k, err := sink.poll()
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	batch()
	if a := testing.AllocsPerRun(100, batch); a != 0 {
		t.Fatalf("bandwidth: %.1f allocations per batch", a)
	}
	sink.echo, sink.t = true, tally{}
	pingPong := func() {
		if err := s.pingPong(time.Now().Add(2 * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() { // the server side, echoing
		defer close(done)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && sink.t.count < 22; {
			if _, err := sink.poll(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	pingPong()
	// AllocsPerRun runs on one P, where the echoing goroutine waits for
	// the spinning client to be preempted: few runs.
	if a := testing.AllocsPerRun(20, pingPong); a != 0 {
		t.Fatalf("latency: %.1f allocations per round trip", a)
	}
	<-done
}

// TestXDPBaselineAllocs: the raw AF_XDP baseline's receive (and echo)
// allocates nothing per batch, over a link that allocates nothing itself.
func TestXDPBaselineAllocs(t *testing.T) {
	a, b := memlink.NewPair(memlink.Config{Capacity: 256})
	frame := make([]byte, 1000)
	batch := make([][]byte, link.IdealBatch)
	for i := range batch {
		batch[i] = frame
	}
	sink := newXDPSink(b, nil)
	round := func() {
		if n, err := a.Send(batch); n != len(batch) || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		for got := 0; got < len(batch); {
			n, err := sink.poll()
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	for range 10 {
		round() // warm memlink's buffers up
	}
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%.1f allocations per batch", n)
	}
}

// TestBaselinesReceivedNothing: a baseline whose frames all die on the way
// is an error that says what was sent and what arrived, never a rate of
// zero; the tests after it still run.
func TestBaselinesReceivedNothing(t *testing.T) {
	a, b := pair(t, memlink.Faults{Loss: 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan struct{})
	go func() { _, _ = Serve(ctx, OnDevice(b), ln); close(served) }()
	rs, err := Run(ctx, OnDevice(a), ln.Addr().String(), Config{Op: "xdp", Size: 3000, Iters: 100}, Config{Op: "udp", Size: 3000, Iters: 100})
	<-served // before the devices close
	var be *BaselineError
	if !errors.As(err, &be) || be.Op != "xdp" || !strings.Contains(err.Error(), "xdp baseline: the server received none of the 300 frames sent (3 per 3000-byte message); likely") {
		t.Fatalf("Run = %+v, %v", rs, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error over several lines: %q", err)
	}
	// The UDP baseline runs over the loopback, not the lossy link.
	if len(rs) != 1 || rs[0].Op != "udp" || rs[0].Received != 100 || rs[0].BWAvgGbps <= 0 {
		t.Fatalf("results after the empty baseline: %+v", rs)
	}
}

// TestUDPNothingArrived: the UDP baseline's figures from a server that
// received nothing are an error with the reason.
func TestUDPNothingArrived(t *testing.T) {
	var r Result
	p := newUDPPlan(65536, 1500, netip.MustParseAddr("198.18.0.2"), true)
	err := fillUDPRates(&r, []string{"0", "0", "0"}, 5000, p)
	if err == nil || !strings.Contains(err.Error(), "udp baseline: the server received none of the 225000 datagrams sent (65536-byte messages, 45 datagrams of at most 1472 bytes each); likely") {
		t.Fatalf("fillUDPRates = %v, %+v", err, r)
	}
	if err := fillUDPRates(&r, []string{"100", "6553600", "1000000"}, 5000, p); err != nil || r.Received != 100 || r.MsgRateMpps != 0.1 {
		t.Fatalf("fillUDPRates = %v, %+v", err, r)
	}
}

// TestStatsCompatible: the server puts its CPU time on STATS only for a
// client that asks (cpu=1), so clients from before CPU accounting, which
// read STATS by its number of fields, still get the figures.
func TestStatsCompatible(t *testing.T) {
	_, b := pair(t, memlink.Faults{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan struct{})
	go func() { _, _ = Serve(ctx, OnDevice(b), ln); close(served) }()
	defer func() { <-served }() // before the devices close
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	line := func() string {
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		s, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(s)
	}
	for _, tc := range []struct {
		params string
		fields int
	}{
		{"SFPERF/1 op=udp size=100 qps=1 iters=10 lat=0 mtu=0", 3},       // a client from before
		{"SFPERF/1 op=udp size=100 qps=1 iters=10 lat=0 mtu=0 cpu=1", 5}, // today's
	} {
		fmt.Fprintln(nc, tc.params)
		ok := line()
		var port int
		if _, err := fmt.Sscanf(ok, "OK port=%d", &port); err != nil {
			t.Fatalf("answer %q", ok)
		}
		uc, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			_, _ = uc.Write(make([]byte, 100))
		}
		time.Sleep(20 * time.Millisecond)
		uc.Close()
		fmt.Fprintln(nc, "DONE")
		st := strings.Fields(line())
		if len(st) != 1+tc.fields || st[0] != "STATS" || st[2] != "1000" {
			t.Fatalf("%s: STATS %q, want %d fields with 1000 bytes", tc.params, st, tc.fields)
		}
	}
	fmt.Fprintln(nc, "QUIT")
}

// TestPrintCPU: each result's CPU line, and the ratios to the baselines
// per side, for bandwidth (per KiB) and latency (per round trip).
func TestPrintCPU(t *testing.T) {
	bw := []Result{
		{Op: "write", Bytes: 65536, MsgRateMpps: 0.01, BWAvgGbps: 5, CPUClientUserS: 0.41, CPUClientSysS: 0.12, CPUClientNsPerKiB: 312, CPUServerUserS: 0.38, CPUServerSysS: 0.1, CPUServerNsPerKiB: 280},
		{Op: "xdp", Bytes: 65536, MsgRateMpps: 0.01, BWAvgGbps: 5, CPUClientUserS: 0.3, CPUClientNsPerKiB: 156, CPUServerUserS: 0.3, CPUServerNsPerKiB: 140},
		{Op: "udp", Bytes: 65536, MsgRateMpps: 0.01, BWAvgGbps: 5, CPUClientUserS: 0.3, CPUClientNsPerKiB: 624},
	}
	var out bytes.Buffer
	Print(&out, Title("write", false), bw[:1])
	PrintRatios(&out, bw)
	for _, want := range []string{
		" cpu: client 312 ns/KiB (user 0.41 s, sys 0.12 s), server 280 ns/KiB (user 0.38 s, sys 0.10 s)\n",
		"   vs xdp  message rate 100.0 %   bandwidth 100.0 %   CPU per KiB: client 2.00×, server 2.00×\n",
		"   vs udp  message rate 100.0 %   bandwidth 100.0 %   CPU per KiB: client 0.50×\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	lat := []Result{
		{Op: "send", LatMedianUs: 20, LatMaxUs: 30, CPUClientUserS: 0.1, CPUClientNsPerOp: 20000, CPUServerUserS: 0.1, CPUServerNsPerOp: 18000},
		{Op: "udp", LatMedianUs: 10, LatMaxUs: 30, CPUClientUserS: 0.1, CPUClientNsPerOp: 10000, CPUServerUserS: 0.1, CPUServerNsPerOp: 12000},
	}
	out.Reset()
	Print(&out, Title("send", true), lat[:1])
	PrintRatios(&out, lat)
	for _, want := range []string{
		" cpu: client 20000 ns/round trip (user 0.10 s, sys 0.00 s), server 18000 ns/round trip (user 0.10 s, sys 0.00 s)\n",
		"   vs udp  median latency 2.00× (20.00 µs vs 10.00 µs)   CPU per round trip: client 2.00×, server 1.50×\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
}
