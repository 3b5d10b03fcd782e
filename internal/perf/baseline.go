package perf

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/device"
)

// Baselines are the reference measurements perf runs next to the RDMA
// operations, over the same interface in the same run:
//
//   - xdp: raw AF_XDP frames, the same RoCEv2 frames the transport sends,
//     built once and blasted (bandwidth) or echoed (latency) with no
//     transport at all: the ceiling the transport works under;
//   - udp: a plain UDP socket through the kernel stack, written as a
//     careful user writes one (udpbaseline.go): batches per system call,
//     datagrams that fit the link, the kernel's segmentation for bulk:
//     what softfabric must beat.
//
// Bandwidth baselines are timed at the receiver, first frame to last.
// Latency baselines echo the whole message (as frames or datagrams that
// fit the link), so a message bigger than one frame crosses twice, where
// an RC round trip carries it once and returns an ACK (or, for read,
// carries a small request and the response).
//
// The baselines' servers poll as the engine's workers do (backoff, the
// pacing of engine.Backoff): spinning while traffic comes, sleeping in
// short steps when none does, so that their CPU time compares with
// softfabric's.
var Baselines = []string{"xdp", "udp"}

// maxUDP is the largest UDP payload over IPv4.
const maxUDP = 65507

func (cfg *Config) checkBaseline() error {
	if cfg.Size < 1 {
		return fmt.Errorf("%s baseline: size must be at least 1 byte", cfg.Op)
	}
	cfg.defaultIters()
	return nil
}

func serveBaseline(ctx context.Context, dv *Device, c *conn, cfg Config) (Result, error) {
	if err := cfg.checkBaseline(); err != nil {
		return Result{}, err
	}
	d := dv.dev
	if cfg.Op == "udp" {
		return serveUDP(ctx, c, cfg)
	}
	return serveXDP(ctx, d, c, cfg)
}

func runBaseline(ctx context.Context, dv *Device, c *conn, cfg Config) (Result, error) {
	if err := cfg.checkBaseline(); err != nil {
		return Result{}, err
	}
	d := dv.dev
	if err := c.sendParams(params{Op: cfg.Op, Size: cfg.Size, QPs: 1, Iters: cfg.Iters, Lat: cfg.Lat, MTU: cfg.MTU}); err != nil {
		return Result{}, err
	}
	f, err := c.expect("OK")
	if err != nil {
		return Result{}, err
	}
	if cfg.Op == "udp" {
		return runUDP(ctx, d, c, cfg, f)
	}
	return runXDP(ctx, d, c, cfg, f)
}

// BaselineError is a baseline that ran to its end and measured nothing:
// no frame or datagram reached the server. The exchange with the server is
// intact, so the tests after it still run.
type BaselineError struct {
	Op     string // xdp or udp
	Reason string // what was sent, what arrived, the likely cause
}

func (e *BaselineError) Error() string { return e.Op + " baseline: " + e.Reason }

// fillMessageRates fills r from the raw AF_XDP server's STATS as
// fillReceiverRates does when a message crossed as perMsg frames, sent of
// them sent: rates and counts per message. A baseline that received
// nothing is an error that says so, never a zero rate.
func fillMessageRates(r *Result, st []string, sent, perMsg int) error {
	fillReceiverRates(r, st, sent/perMsg)
	if r.Received == 0 {
		return &BaselineError{Op: r.Op, Reason: fmt.Sprintf("the server received none of the %d frames sent (%d per %d-byte message); likely its classifier did not pass them to the AF_XDP sockets (softfabric stats on the server: unknownqpn, nosocket) or the link dropped them (ip -s link)", sent, perMsg, r.Bytes)}
	}
	if r.Seconds == 0 {
		return &BaselineError{Op: r.Op, Reason: fmt.Sprintf("the server received %d of the %d frames sent in one batch: too few to time; run more --iters", r.Received, sent)}
	}
	r.MsgRateMpps /= float64(perMsg)
	r.Received /= perMsg
	return nil
}

// fillReceiverRates turns a server's "STATS count bytes elapsed_ns ..."
// into bandwidth and message rate.
func fillReceiverRates(r *Result, st []string, sent int) {
	if len(st) < 3 {
		return
	}
	count, _ := strconv.Atoi(st[0])
	bytes, _ := strconv.Atoi(st[1])
	ns, _ := strconv.ParseInt(st[2], 10, 64)
	r.Iters, r.Received = sent, count
	if ns <= 0 {
		return
	}
	s := float64(ns) / 1e9
	r.Seconds = s
	r.BWAvgMBps = float64(bytes) / s / 1e6
	r.BWAvgGbps = float64(bytes) * 8 / s / 1e9
	r.BWPeakMBps, r.BWPeakGbps = r.BWAvgMBps, r.BWAvgGbps
	r.MsgRateMpps = float64(count) / s / 1e6
}

func fillLatency(r *Result, lats []time.Duration) {
	if len(lats) == 0 {
		return
	}
	slices.Sort(lats)
	var sum time.Duration
	for _, l := range lats {
		sum += l
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	r.LatMinUs = us(lats[0])
	r.LatMedianUs = us(lats[len(lats)/2])
	r.LatP99Us = us(lats[min(len(lats)-1, len(lats)*99/100)])
	r.LatMaxUs = us(lats[len(lats)-1])
	r.LatAvgUs = us(sum / time.Duration(len(lats)))
}

// rawFrame builds one RoCEv2 SEND_ONLY frame of n payload bytes from our
// sink to the peer's: the frame the raw baseline sends over and over.
func rawFrame(ctx context.Context, d *device.Device, peer netip.Addr, src, dst uint32, n int) ([]byte, error) {
	f, err := d.Path(ctx, peer, src, dst)
	if err != nil {
		return nil, err
	}
	path, err := wire.NewPath(f)
	if err != nil {
		return nil, err
	}
	hl := path.HeaderLen()
	pad := -n & 3
	frame := make([]byte, hl+wire.BTHSize+n+pad+wire.ICRCSize)
	wire.BTH(frame[hl:]).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PadCount: uint8(pad), PKey: wire.DefaultPKey, DestQP: dst, PSN: 1 & psn.Mask})
	path.Finish(frame)
	return frame, nil
}

func serveXDP(ctx context.Context, d *device.Device, c *conn, cfg Config) (Result, error) {
	sink, err := d.ReserveQPN()
	if err != nil {
		return Result{}, err
	}
	defer d.ReleaseQPN(sink)
	gid, err := localGID(d, c)
	if err != nil {
		return Result{}, err
	}
	if err := c.send("OK qpn=%06x gid=%s mtu=%d", sink, gid, d.ActiveMTU()); err != nil {
		return Result{}, err
	}
	peer, err := c.recvQP()
	if err != nil {
		return Result{}, err
	}
	var echo [][]byte
	if cfg.Lat {
		f, err := rawFrame(ctx, d, peer.GID, sink, peer.QPN, min(cfg.Size, d.ActiveMTU()))
		if err != nil {
			return Result{}, err
		}
		echo = [][]byte{f}
	}
	if err := c.send("READY"); err != nil {
		return Result{}, err
	}
	done := c.expectAsync("DONE")
	var t tally
	c0 := cpuNow()
	if echo != nil {
		t, err = echoXDP(ctx, d.Link(), echo, done)
	} else {
		t, err = sinkXDP(ctx, d.Links(), done)
	}
	if err != nil {
		return Result{}, err
	}
	if err := c.sendStats(c0.since(), "STATS %s", t.stats()); err != nil {
		return Result{}, err
	}
	return Result{Op: "xdp", Bytes: cfg.Size, Received: t.count}, nil
}

// xdpSink is a raw AF_XDP baseline's receiver on one link: it counts what
// arrives, echoing a frame back for each for latency tests.
type xdpSink struct {
	l     link.Link
	bufs  [][]byte
	sizes []int
	echo  [][]byte
	t     tally
}

func newXDPSink(l link.Link, echo [][]byte) *xdpSink {
	bufs, sizes := rxBuffers(l)
	return &xdpSink{l: l, bufs: bufs, sizes: sizes, echo: echo}
}

// poll receives one batch, without blocking, and returns how many frames
// it got.
func (s *xdpSink) poll() (int, error) {
	n, err := s.l.Recv(s.bufs, s.sizes)
	if err != nil || n == 0 {
		return 0, err
	}
	bytes := 0
	for _, z := range s.sizes[:n] {
		bytes += z
	}
	s.t.add(n, bytes)
	for k := 0; k < n && s.echo != nil; k++ {
		for sent := 0; sent == 0; {
			if sent, err = s.l.Send(s.echo); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// echoXDP answers every frame received on l with echo until done,
// polling as the engine does: spinning while frames come, backing off to
// short sleeps when none does.
func echoXDP(ctx context.Context, l link.Link, echo [][]byte, done <-chan error) (tally, error) {
	s := newXDPSink(l, echo)
	var idle backoff
	for {
		n, err := s.poll()
		if err != nil {
			return tally{}, err
		}
		if n > 0 {
			idle.Busy()
			continue
		}
		select {
		case err := <-done:
			return s.t, err
		case <-ctx.Done():
			return tally{}, ctx.Err()
		default:
		}
		idle.Idle()
	}
}

// sinkXDP counts the frames arriving on every link, each drained by a
// goroutine of its own (the raw counterpart of a worker per queue) that
// polls as the engine's workers do, until done; first and last are the
// first and last arrivals over all links.
func sinkXDP(ctx context.Context, links []link.Link, done <-chan error) (tally, error) {
	var stop atomic.Bool
	sinks := make([]*xdpSink, len(links))
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		sinks[i] = newXDPSink(l, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sinks[i]
			var idle backoff
			for {
				n, err := s.poll()
				if err != nil {
					errs[i] = err
					return
				}
				if n > 0 {
					idle.Busy()
					continue
				}
				if stop.Load() {
					return
				}
				idle.Idle()
			}
		}()
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop.Store(true)
	wg.Wait()
	var all tally
	for i, s := range sinks {
		if errs[i] != nil && err == nil {
			err = errs[i]
		}
		t := s.t
		if t.count == 0 {
			continue
		}
		all.count += t.count
		all.bytes += t.bytes
		if all.first.IsZero() || t.first.Before(all.first) {
			all.first = t.first
		}
		if t.last.After(all.last) {
			all.last = t.last
		}
	}
	return all, err
}

func rxBuffers(l link.Link) ([][]byte, []int) {
	bufs := make([][]byte, link.IdealBatch)
	for i := range bufs {
		bufs[i] = make([]byte, l.MaxFrame())
	}
	return bufs, make([]int, link.IdealBatch)
}

func runXDP(ctx context.Context, d *device.Device, c *conn, cfg Config, ok []string) (Result, error) {
	var peer qpInfo
	mtu := d.ActiveMTU()
	for _, kv := range ok {
		k, v, _ := cutKV(kv)
		switch k {
		case "qpn":
			n, _ := strconv.ParseUint(v, 16, 24)
			peer.QPN = uint32(n)
		case "gid":
			peer.GID, _ = netip.ParseAddr(v)
		case "mtu":
			if m, err := strconv.Atoi(v); err == nil {
				mtu = min(mtu, m)
			}
		}
	}
	if peer.QPN == 0 || !peer.GID.IsValid() {
		return Result{}, fmt.Errorf("xdp baseline: bad server answer %v", ok)
	}
	sink, err := d.ReserveQPN()
	if err != nil {
		return Result{}, err
	}
	defer d.ReleaseQPN(sink)
	gid, err := localGID(d, c)
	if err != nil {
		return Result{}, err
	}
	if err := c.sendQP(qpInfo{QPN: sink, GID: gid}); err != nil {
		return Result{}, err
	}
	// A message bigger than the path MTU is several frames, as the
	// transport would send it.
	payload := min(cfg.Size, mtu)
	perMsg := max(1, (cfg.Size+mtu-1)/mtu)
	frame, err := rawFrame(ctx, d, peer.GID, sink, peer.QPN, payload)
	if err != nil {
		return Result{}, err
	}
	if _, err := c.expect("READY"); err != nil {
		return Result{}, err
	}
	l := d.Link()
	r := Result{Op: "xdp", Bytes: cfg.Size, QPs: 1, MTU: mtu}
	msgs := cfg.Iters
	c0 := cpuNow()
	if cfg.Lat {
		bufs, sizes := rxBuffers(l)
		// A message is perMsg frames, as for bandwidth; the server echoes
		// each, and the round trip ends with the last echo.
		batch := make([][]byte, min(perMsg, link.IdealBatch))
		for k := range batch {
			batch[k] = frame
		}
		lats := make([]time.Duration, 0, cfg.Iters)
		start := time.Now()
		for i := 0; i < cfg.Iters; i++ {
			t0 := time.Now()
			for sent, got, k := 0, 0, 0; got < perMsg; k++ {
				if sent < perMsg {
					n, err := l.Send(batch[:min(len(batch), perMsg-sent)])
					if err != nil {
						return Result{}, err
					}
					sent += n
				}
				n, err := l.Recv(bufs, sizes)
				if err != nil {
					return Result{}, err
				}
				got += n
				if n == 0 && k&1023 == 0 && time.Since(t0) > 2*time.Second {
					return Result{}, fmt.Errorf("xdp baseline: %d of a message's %d echoes came back within 2 s", got, perMsg)
				}
			}
			lats = append(lats, time.Since(t0))
		}
		r.Iters = cfg.Iters
		r.Seconds = time.Since(start).Seconds()
		fillLatency(&r, lats)
	} else {
		// One sender per queue asked for (--qps), each on a link of its
		// own: the raw counterpart of a worker per queue.
		links := d.Links()[:min(max(cfg.QPs, 1), len(d.Links()))]
		r.QPs = len(links)
		sent, err := blastXDP(ctx, links, frame, cfg.Iters*perMsg, cfg.Duration)
		if err != nil {
			return Result{}, err
		}
		msgs = sent / perMsg
	}
	cpu := c0.since()
	if !cfg.Lat {
		time.Sleep(20 * time.Millisecond)
	}
	st, err := c.finish()
	if err != nil {
		return Result{}, err
	}
	if !cfg.Lat {
		if err := fillMessageRates(&r, st, msgs*perMsg, perMsg); err != nil {
			return r, err
		}
		// Bytes on the wire include headers: count payload only, as the
		// RDMA figures do.
		scale := float64(payload) / float64(len(frame))
		r.BWAvgMBps *= scale
		r.BWAvgGbps *= scale
		r.BWPeakMBps, r.BWPeakGbps = r.BWAvgMBps, r.BWAvgGbps
	}
	scpu, known := parseCPU(st[min(3, len(st)):])
	setCPU(&r, cpu, scpu, known)
	return r, nil
}

// blastXDP sends frame over every link, a goroutine each, total frames in
// all, or for dur when it is set, and returns how many it sent.
func blastXDP(ctx context.Context, links []link.Link, frame []byte, total int, dur time.Duration) (int, error) {
	var deadline time.Time
	if dur > 0 {
		deadline = time.Now().Add(dur)
		total = int(^uint(0) >> 1)
	}
	sent := make([]int, len(links))
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		share := total / len(links)
		if i < total%len(links) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([][]byte, link.IdealBatch)
			for k := range batch {
				batch[k] = frame
			}
			for n := 0; n < share; {
				k, err := l.Send(batch[:min(len(batch), share-n)])
				if err != nil {
					errs[i] = err
					break
				}
				n += k
				if n&4095 < k || k == 0 {
					if ctx.Err() != nil {
						errs[i] = ctx.Err()
						break
					}
					if dur > 0 && time.Now().After(deadline) {
						sent[i] = n
						return
					}
				}
				sent[i] = n
			}
		}()
	}
	wg.Wait()
	total = 0
	for i := range links {
		if errs[i] != nil {
			return 0, errs[i]
		}
		total += sent[i]
	}
	return total, nil
}

func cutKV(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// PrintRatios prints each result's message rate and bandwidth, or median
// latency, relative to the first (the RDMA operation): the side-by-side
// figures the goals are stated in.
func PrintRatios(w io.Writer, rs []Result) {
	base := rs[0]
	fmt.Fprintf(w, " %s relative to the baselines, same size, same run:\n", base.Op)
	if base.LatMedianUs > 0 {
		for _, r := range rs[1:] {
			if r.LatMedianUs > 0 {
				fmt.Fprintf(w, "   vs %-4s median latency %.2f× (%.2f µs vs %.2f µs)", r.Op, base.LatMedianUs/r.LatMedianUs, base.LatMedianUs, r.LatMedianUs)
				printCPURatio(w, "round trip", base.CPUClientNsPerOp, r.CPUClientNsPerOp, base.CPUServerNsPerOp, r.CPUServerNsPerOp)
			}
		}
		return
	}
	for _, r := range rs[1:] {
		if r.MsgRateMpps == 0 || r.BWAvgGbps == 0 {
			continue
		}
		fmt.Fprintf(w, "   vs %-4s message rate %5.1f %%   bandwidth %5.1f %%", r.Op, 100*base.MsgRateMpps/r.MsgRateMpps, 100*base.BWAvgGbps/r.BWAvgGbps)
		printCPURatio(w, "KiB", base.CPUClientNsPerKiB, r.CPUClientNsPerKiB, base.CPUServerNsPerKiB, r.CPUServerNsPerKiB)
	}
}

// printCPURatio ends a PrintRatios line with the CPU time per unit of
// the test relative to the baseline's, each side where both are known.
func printCPURatio(w io.Writer, unit string, client, baseClient, server, baseServer float64) {
	if client > 0 && baseClient > 0 {
		fmt.Fprintf(w, "   CPU per %s: client %.2f×", unit, client/baseClient)
		if server > 0 && baseServer > 0 {
			fmt.Fprintf(w, ", server %.2f×", server/baseServer)
		}
	}
	fmt.Fprintln(w)
}

// localGID is the device's GID for the address the exchange runs from.
func localGID(d *device.Device, c *conn) (netip.Addr, error) {
	local, _ := localAddr(c.c)
	gid, ok := d.GID(local)
	if !ok {
		return netip.Addr{}, fmt.Errorf("no GID for %v on %s", local, d.Name())
	}
	return gid, nil
}
