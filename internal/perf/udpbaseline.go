package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/udpbatch"
)

// The UDP baseline is the socket code a careful user writes for bulk and
// for ping-pong traffic: batches of datagrams per system call
// (sendmmsg/recvmmsg through headers allocated once, no allocation per
// batch), datagrams that fit the link, and for bulk the kernel's UDP
// segmentation and receive coalescing (UDP_SEGMENT, UDP_GRO) where it has
// them.
//
// A message never crosses as one datagram bigger than the link MTU: the
// kernel would cut it into IP fragments, and a receiver that loses one
// fragment keeps the others for ipfrag_time (30 s) in reassembly memory
// (ipfrag_high_thresh, 4 MiB a namespace); some 50 incomplete 64 KiB
// datagrams fill it, after which the kernel drops every fragment that
// arrives. `perf send --size 65536 --compare` printed a UDP baseline of
// 0.00 Gb/s so, once a run before it had lost a few fragments.

// udpPlan is how the baseline carries one message of size bytes: as
// datagrams of at most dg bytes (what crosses the link whole), handed to
// the kernel in sends of at most chunk bytes each, perMsg sends a
// message; a send longer than dg the kernel cuts into datagrams of dg
// (UDP_SEGMENT).
type udpPlan struct {
	size, dg, chunk, perMsg int
}

// udpSegments is the most segments one UDP_SEGMENT send may carry on
// every kernel that has it (UDP_MAX_SEGMENTS, 64 before 6.x).
const udpSegments = 64

// newUDPPlan plans messages of size bytes over a link of MTU mtu towards
// addr; gso says whether the socket segments (UDP_SEGMENT).
func newUDPPlan(size, mtu int, addr netip.Addr, gso bool) udpPlan {
	dg := mtu - 20 - 8
	if !addr.Unmap().Is4() {
		dg = mtu - 40 - 8
	}
	dg = max(1, min(dg, maxUDP))
	p := udpPlan{size: size, dg: min(size, dg), chunk: min(size, dg)}
	if gso && size > dg {
		p.chunk = min(size, maxUDP/dg*dg, udpSegments*dg)
	}
	p.perMsg = (size + p.chunk - 1) / p.chunk
	return p
}

// datagrams is how many datagrams of at most dg bytes a message is.
func (p udpPlan) datagrams() int { return (p.size + p.dg - 1) / p.dg }

// sends lays out the sends of whole messages that fit a batch of n:
// each message's chunks, the last one shorter when size is not a
// multiple of chunk, all over one payload buffer.
func (p udpPlan) sends(n int) [][]byte {
	payload := make([]byte, p.chunk)
	out := make([][]byte, max(1, n/p.perMsg)*p.perMsg)
	last := p.size - (p.perMsg-1)*p.chunk
	for i := range out {
		out[i] = payload
		if i%p.perMsg == p.perMsg-1 {
			out[i] = payload[:last]
		}
	}
	return out
}

// udpSender sends messages as a plan lays them out, a batch of sends per
// sendmmsg(2).
type udpSender struct {
	b     *udpbatch.Conn
	p     udpPlan
	sends [][]byte
}

func newUDPSender(b *udpbatch.Conn, p udpPlan) *udpSender {
	return &udpSender{b: b, p: p, sends: p.sends(link.IdealBatch)}
}

// send hands the kernel the next batch of sends, sent of total done, and
// returns how many it took.
func (s *udpSender) send(sent, total int) (int, error) {
	// Each batch starts where the last left off in the message.
	off := sent % s.p.perMsg
	n, err := s.b.Send(s.sends[off:min(len(s.sends), off+total-sent)])
	if errors.Is(err, unix.ENOBUFS) {
		return n, nil // the device queue is full: try again
	}
	return n, err
}

// udpSink is a baseline server's socket: it counts what arrives, echoing
// it back for latency tests.
type udpSink struct {
	b    *udpbatch.Conn
	echo bool
	t    tally
}

// poll receives one batch, without blocking, and returns how many
// datagrams (or coalesced buffers) it got.
func (s *udpSink) poll() (int, error) {
	n, err := s.b.Recv()
	if err != nil || n == 0 {
		return 0, err
	}
	bytes := 0
	for i := range n {
		bytes += s.b.Len(i)
	}
	if s.echo {
		if err := s.b.Echo(n); err != nil {
			return 0, err
		}
	}
	s.t.add(n, bytes)
	return n, nil
}

// tally is what a baseline's receiver counted: frames or datagrams, their
// bytes, and when the first and the last arrived.
type tally struct {
	count, bytes int
	first, last  time.Time
}

func (t *tally) add(n, bytes int) {
	now := time.Now()
	if t.count == 0 {
		t.first = now
	}
	t.last = now
	t.count += n
	t.bytes += bytes
}

// stats is the server's end-of-test reply for t: "count bytes ns".
func (t *tally) stats() string {
	return fmt.Sprintf("%d %d %d", t.count, t.bytes, t.last.Sub(t.first).Nanoseconds())
}

func serveUDP(ctx context.Context, c *conn, cfg Config) (Result, error) {
	local, err := localAddr(c.c)
	if err != nil {
		return Result{}, err
	}
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return Result{}, err
	}
	defer pc.Close()
	setSockBuf(pc, unix.SO_RCVBUFFORCE, 8<<20, pc.SetReadBuffer)
	// Datagrams are at most the message size; coalesced ones (GRO) up to
	// 64 KiB.
	bufSize := min(cfg.Size, 1<<16)
	if !cfg.Lat {
		bufSize = 1 << 16
	}
	b, err := udpbatch.New(pc, link.IdealBatch, bufSize)
	if err != nil {
		return Result{}, err
	}
	if !cfg.Lat {
		// Bulk: the bytes count, not the datagram boundaries.
		_ = b.SetGRO(true)
	}
	s := &udpSink{b: b, echo: cfg.Lat}
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if err := c.send("OK port=%d", port); err != nil {
		return Result{}, err
	}
	done := c.expectAsync("DONE")
	c0 := cpuNow()
	// Poll as the engine does: spin while datagrams come, back off to
	// short sleeps when none does.
	var idle backoff
	for {
		n, err := s.poll()
		if err != nil {
			return Result{}, err
		}
		if n > 0 {
			idle.Busy()
			continue
		}
		select {
		case err := <-done:
			if err != nil {
				return Result{}, err
			}
			if err := c.sendStats(c0.since(), "STATS %s", s.t.stats()); err != nil {
				return Result{}, err
			}
			// Messages, counted by their bytes as the client counts them.
			return Result{Op: "udp", Bytes: cfg.Size, Received: s.t.bytes / cfg.Size}, nil
		case <-ctx.Done():
			return Result{}, ctx.Err()
		default:
		}
		idle.Idle()
	}
}

// setSockBuf sets a socket buffer to n bytes, past the sysctl cap where
// the process may (SO_RCVBUFFORCE, SO_SNDBUFFORCE: CAP_NET_ADMIN, which
// the device needs anyway), else as far as the cap allows.
func setSockBuf(pc *net.UDPConn, force, n int, set func(int) error) {
	rc, err := pc.SyscallConn()
	if err == nil {
		var serr error
		if err = rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, force, n) }); err == nil && serr == nil {
			return
		}
	}
	_ = set(n)
}

func runUDP(ctx context.Context, d *device.Device, c *conn, cfg Config, ok []string) (Result, error) {
	port := 0
	for _, kv := range ok {
		if v, found := cutPrefix(kv, "port="); found {
			port, _ = strconv.Atoi(v)
		}
	}
	remote, err := netip.ParseAddrPort(c.c.RemoteAddr().String())
	if err != nil || port == 0 {
		return Result{}, fmt.Errorf("udp baseline: bad server answer %v", ok)
	}
	pc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(remote.Addr(), uint16(port))))
	if err != nil {
		return Result{}, err
	}
	defer pc.Close()
	setSockBuf(pc, unix.SO_SNDBUFFORCE, 8<<20, pc.SetWriteBuffer)
	mtu := d.MTU()
	b, err := udpbatch.New(pc, link.IdealBatch, max(1, min(cfg.Size, mtu)))
	if err != nil {
		return Result{}, err
	}
	gso := b.SetSegment(newUDPPlan(cfg.Size, mtu, remote.Addr(), false).dg) == nil
	plan := newUDPPlan(cfg.Size, mtu, remote.Addr(), gso)
	if plan.chunk == plan.dg {
		_ = b.SetSegment(0)
	}
	s := newUDPSender(b, plan)
	r := Result{Op: "udp", Bytes: cfg.Size, QPs: 1}
	start, c0 := time.Now(), cpuNow()
	sent := 0
	if cfg.Lat {
		lats := make([]time.Duration, 0, cfg.Iters)
		for i := 0; i < cfg.Iters; i++ {
			t0 := time.Now()
			if err := s.pingPong(t0.Add(2 * time.Second)); err != nil {
				return Result{}, err
			}
			lats = append(lats, time.Since(t0))
		}
		r.Iters = cfg.Iters
		r.Seconds = time.Since(start).Seconds()
		fillLatency(&r, lats)
	} else if sent, err = s.blast(ctx, cfg); err != nil {
		return Result{}, err
	}
	cpu := c0.since()
	if !cfg.Lat {
		time.Sleep(50 * time.Millisecond) // let the last datagrams arrive
	}
	st, err := c.finish()
	if err != nil {
		return Result{}, err
	}
	if !cfg.Lat {
		if err := fillUDPRates(&r, st, sent/plan.perMsg, plan); err != nil {
			return r, err
		}
	}
	scpu, known := parseCPU(st[min(3, len(st)):])
	setCPU(&r, cpu, scpu, known)
	return r, nil
}

// blast sends cfg.Iters messages (or for cfg.Duration) and returns the
// sends it made.
func (s *udpSender) blast(ctx context.Context, cfg Config) (int, error) {
	total := cfg.Iters * s.p.perMsg
	var deadline time.Time
	if cfg.Duration > 0 {
		total = int(^uint(0) >> 1)
		deadline = time.Now().Add(cfg.Duration)
	}
	sent := 0
	for sent < total {
		n, err := s.send(sent, total)
		if err != nil {
			return sent, err
		}
		sent += n
		if sent&1023 < n || n == 0 {
			if ctx.Err() != nil {
				return sent, ctx.Err()
			}
			if cfg.Duration > 0 && time.Now().After(deadline) {
				break
			}
		}
	}
	return sent, nil
}

// pingPong sends one message and spins until the server has echoed all
// of it, or deadline.
func (s *udpSender) pingPong(deadline time.Time) error {
	for sent := 0; sent < s.p.perMsg; {
		n, err := s.send(sent, s.p.perMsg)
		if err != nil {
			return err
		}
		sent += n
	}
	for got, i := 0, 0; got < s.p.size; i++ {
		n, err := s.b.Recv()
		if err != nil {
			return err
		}
		for k := range n {
			got += s.b.Len(k)
		}
		if n == 0 && i&1023 == 0 && time.Now().After(deadline) {
			return fmt.Errorf("udp baseline: %d of a %d-byte message's bytes came back within 2 s: the message or its echo was lost", got, s.p.size)
		}
	}
	return nil
}

// fillUDPRates fills r from the UDP server's "STATS count bytes ns":
// messages are counted by their bytes, as datagrams may arrive coalesced.
// A baseline that received nothing is an error that says so.
func fillUDPRates(r *Result, st []string, sentMsgs int, p udpPlan) error {
	fillReceiverRates(r, st, sentMsgs)
	bytes := 0
	if len(st) >= 2 {
		bytes, _ = strconv.Atoi(st[1])
	}
	if bytes == 0 {
		return &BaselineError{Op: "udp", Reason: fmt.Sprintf("the server received none of the %d datagrams sent (%d-byte messages, %d datagrams of at most %d bytes each); likely the kernel dropped them before its socket (receive buffer: nstat UdpRcvbufErrors; the link: ip -s link)",
			sentMsgs*p.datagrams(), p.size, p.datagrams(), p.dg)}
	}
	r.Received = bytes / p.size
	if r.Seconds > 0 {
		r.MsgRateMpps = float64(bytes) / float64(p.size) / r.Seconds / 1e6
	}
	return nil
}
