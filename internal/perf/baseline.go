package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/udpbatch"
)

// Baselines are the reference measurements perf runs next to the RDMA
// operations, over the same interface in the same run:
//
//   - xdp: raw AF_XDP frames, the same RoCEv2 frames the transport sends,
//     built once and blasted (bandwidth) or echoed (latency) with no
//     transport at all: the ceiling the transport works under;
//   - udp: a plain UDP socket through the kernel stack, spinning on
//     non-blocking receives for latency: what softfabric must beat.
//
// Bandwidth baselines are timed at the receiver, first frame to last.
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

func serveBaseline(ctx context.Context, d *device.Device, c *conn, cfg Config) (Result, error) {
	if err := cfg.checkBaseline(); err != nil {
		return Result{}, err
	}
	if cfg.Op == "udp" {
		return serveUDP(ctx, c, cfg)
	}
	return serveXDP(ctx, d, c, cfg)
}

func runBaseline(ctx context.Context, d *device.Device, c *conn, cfg Config) (Result, error) {
	if err := cfg.checkBaseline(); err != nil {
		return Result{}, err
	}
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

// spinRecv receives one datagram without blocking, spinning until one is
// there or the deadline passes.
func spinRecv(rc syscall.RawConn, buf []byte, deadline time.Time) (int, error) {
	for i := 0; ; i++ {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return true
		})
		if err != nil {
			return 0, err
		}
		if rerr == nil {
			return n, nil
		}
		if !errors.Is(rerr, unix.EAGAIN) {
			return 0, rerr
		}
		if i&1023 == 0 && time.Now().After(deadline) {
			return 0, errors.New("udp baseline: timed out waiting for a datagram")
		}
	}
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
	_ = pc.SetReadBuffer(8 << 20)
	port := pc.LocalAddr().(*net.UDPAddr).Port
	if err := c.send("OK port=%d", port); err != nil {
		return Result{}, err
	}
	rc, err := pc.SyscallConn()
	if err != nil {
		return Result{}, err
	}
	done := c.expectAsync("DONE")
	if !cfg.Lat {
		return sinkUDP(ctx, c, pc, cfg, done)
	}
	buf := make([]byte, 1<<16)
	var count, bytes int
	var first, last time.Time
	c0 := cpuNow()
	for i := 0; ; i++ {
		var n int
		var from unix.Sockaddr
		var rerr error
		_ = rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return true
		})
		if rerr == nil {
			now := time.Now()
			if count == 0 {
				first = now
			}
			last = now
			count++
			bytes += n
			if cfg.Lat {
				_ = rc.Write(func(fd uintptr) bool {
					_ = unix.Sendto(int(fd), buf[:n], 0, from)
					return true
				})
			}
			continue
		}
		if i&255 == 0 {
			select {
			case err := <-done:
				if err != nil {
					return Result{}, err
				}
				el := last.Sub(first)
				if err := c.send("STATS %d %d %d %s", count, bytes, el.Nanoseconds(), c0.since().fields()); err != nil {
					return Result{}, err
				}
				return Result{Op: "udp", Bytes: cfg.Size, Received: count}, nil
			case <-ctx.Done():
				return Result{}, ctx.Err()
			default:
			}
		}
	}
}

// sinkUDP counts the datagrams arriving on pc, a batch per recvmmsg(2),
// until done, and reports them as serveUDP does.
func sinkUDP(ctx context.Context, c *conn, pc *net.UDPConn, cfg Config, done <-chan error) (Result, error) {
	rb, err := udpbatch.New(pc, link.IdealBatch, 1<<16)
	if err != nil {
		return Result{}, err
	}
	var count, bytes int
	var first, last time.Time
	c0 := cpuNow()
	for i := 0; ; i++ {
		n, err := rb.Recv()
		if err != nil {
			return Result{}, err
		}
		if n > 0 {
			now := time.Now()
			if count == 0 {
				first = now
			}
			last = now
			count += n
			for k := range n {
				bytes += rb.Len(k)
			}
			continue
		}
		if i&255 == 0 {
			select {
			case err := <-done:
				if err != nil {
					return Result{}, err
				}
				if err := c.send("STATS %d %d %d %s", count, bytes, last.Sub(first).Nanoseconds(), c0.since().fields()); err != nil {
					return Result{}, err
				}
				return Result{Op: "udp", Bytes: cfg.Size, Received: count}, nil
			case <-ctx.Done():
				return Result{}, ctx.Err()
			default:
			}
		}
	}
}

// udpDatagram is the largest UDP payload that crosses a link of MTU mtu
// unfragmented, towards addr's family.
func udpDatagram(mtu int, addr netip.Addr) int {
	if addr.Unmap().Is4() {
		return mtu - 20 - 8
	}
	return mtu - 40 - 8
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
	_ = pc.SetWriteBuffer(8 << 20)
	rc, err := pc.SyscallConn()
	if err != nil {
		return Result{}, err
	}
	size := min(cfg.Size, maxUDP)
	r := Result{Op: "udp", Bytes: size, QPs: 1}
	start, c0 := time.Now(), cpuNow()
	sent := 0
	if cfg.Lat {
		payload := make([]byte, size)
		lats := make([]time.Duration, 0, cfg.Iters)
		buf := make([]byte, 1<<16)
		for i := 0; i < cfg.Iters; i++ {
			t0 := time.Now()
			if _, err := pc.Write(payload); err != nil {
				return Result{}, err
			}
			if _, err := spinRecv(rc, buf, time.Now().Add(2*time.Second)); err != nil {
				return Result{}, err
			}
			lats = append(lats, time.Since(t0))
		}
		r.Iters = cfg.Iters
		r.Seconds = time.Since(start).Seconds()
		fillLatency(&r, lats)
	} else {
		// A message larger than a datagram that crosses the link whole is
		// several datagrams, as the transport sends several packets: IP
		// fragments of a 64 KiB datagram are dropped wholesale when
		// reassembly memory runs short, and nobody sends bulk data so.
		r.Bytes = cfg.Size
		if sent, err = blastUDP(ctx, pc, cfg, udpDatagram(d.MTU(), remote.Addr())); err != nil {
			return Result{}, err
		}
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
		dg := udpDatagram(d.MTU(), remote.Addr())
		if err := fillMessageRates(&r, st, sent, (cfg.Size+dg-1)/dg, "datagrams"); err != nil {
			return r, err
		}
	}
	scpu, known := parseCPU(st[min(3, len(st)):])
	setCPU(&r, cpu, scpu, known)
	return r, nil
}

// blastUDP sends cfg.Iters messages of cfg.Size bytes (or for
// cfg.Duration), each as datagrams of at most dg bytes, in batches of one
// sendmmsg(2) each, and returns the datagrams sent.
func blastUDP(ctx context.Context, pc *net.UDPConn, cfg Config, dg int) (int, error) {
	sb, err := udpbatch.New(pc, link.IdealBatch, 1)
	if err != nil {
		return 0, err
	}
	payload := make([]byte, min(cfg.Size, dg))
	perMsg := (cfg.Size + dg - 1) / dg
	lastLen := cfg.Size - (perMsg-1)*dg
	// Enough datagrams for whole messages in every batch.
	batch := make([][]byte, max(1, link.IdealBatch/perMsg)*perMsg)
	for i := range batch {
		batch[i] = payload
		if i%perMsg == perMsg-1 {
			batch[i] = payload[:lastLen]
		}
	}
	total := cfg.Iters * perMsg
	var deadline time.Time
	if cfg.Duration > 0 {
		total = int(^uint(0) >> 1)
		deadline = time.Now().Add(cfg.Duration)
	}
	sent := 0
	for sent < total {
		// Start each batch at a message boundary of the pattern.
		off := sent % perMsg
		n, err := sb.Send(batch[off:min(len(batch), off+total-sent)])
		if err != nil && !errors.Is(err, unix.ENOBUFS) {
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

// fillMessageRates fills r from a server's STATS as fillReceiverRates does
// when a message crossed as perMsg frames or datagrams (units), sent of
// them sent: rates and counts per message. A baseline that received
// nothing is an error that says so, never a zero rate.
func fillMessageRates(r *Result, st []string, sent, perMsg int, units string) error {
	fillReceiverRates(r, st, sent/perMsg)
	if r.Received == 0 {
		return fmt.Errorf("%s baseline: the server received none of the %d %s sent (%d per %d-byte message); see softfabric stats and the kernel's drop counters on both ends", r.Op, sent, units, perMsg, r.Bytes)
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
	var count, bytes int
	var first, last time.Time
	c0 := cpuNow()
	if echo != nil {
		count, bytes, first, last, err = echoXDP(ctx, d.Link(), echo, done)
	} else {
		count, bytes, first, last, err = sinkXDP(ctx, d.Links(), done)
	}
	if err != nil {
		return Result{}, err
	}
	if err := c.send("STATS %d %d %d %s", count, bytes, last.Sub(first).Nanoseconds(), c0.since().fields()); err != nil {
		return Result{}, err
	}
	return Result{Op: "xdp", Bytes: cfg.Size, Received: count}, nil
}

// echoXDP answers every frame received on l with echo until done.
func echoXDP(ctx context.Context, l link.Link, echo [][]byte, done <-chan error) (count, bytes int, first, last time.Time, err error) {
	bufs, sizes := rxBuffers(l)
	for i := 0; ; i++ {
		n, err := l.Recv(bufs, sizes)
		if err != nil {
			return 0, 0, first, last, err
		}
		if n > 0 {
			now := time.Now()
			if count == 0 {
				first = now
			}
			last = now
			count += n
			for _, s := range sizes[:n] {
				bytes += s
			}
			for k := 0; k < n; k++ {
				for sent := 0; sent == 0; {
					if sent, err = l.Send(echo); err != nil {
						return 0, 0, first, last, err
					}
				}
			}
			continue
		}
		if i&255 == 0 {
			select {
			case err := <-done:
				return count, bytes, first, last, err
			case <-ctx.Done():
				return 0, 0, first, last, ctx.Err()
			default:
			}
		}
	}
}

// sinkXDP counts the frames arriving on every link, each drained by a
// goroutine of its own (the raw counterpart of a worker per queue), until
// done; first and last are the first and last arrivals over all links.
func sinkXDP(ctx context.Context, links []link.Link, done <-chan error) (count, bytes int, first, last time.Time, err error) {
	type tally struct {
		count, bytes int
		first, last  time.Time
		err          error
	}
	var stop atomic.Bool
	tallies := make([]tally, len(links))
	var wg sync.WaitGroup
	for i, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[i]
			bufs, sizes := rxBuffers(l)
			for k := 0; ; k++ {
				n, err := l.Recv(bufs, sizes)
				if err != nil {
					t.err = err
					return
				}
				if n == 0 {
					if k&255 == 0 && stop.Load() {
						return
					}
					continue
				}
				now := time.Now()
				if t.count == 0 {
					t.first = now
				}
				t.last = now
				t.count += n
				for _, s := range sizes[:n] {
					t.bytes += s
				}
			}
		}()
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop.Store(true)
	wg.Wait()
	for _, t := range tallies {
		if t.err != nil && err == nil {
			err = t.err
		}
		if t.count == 0 {
			continue
		}
		count += t.count
		bytes += t.bytes
		if first.IsZero() || t.first.Before(first) {
			first = t.first
		}
		if t.last.After(last) {
			last = t.last
		}
	}
	return count, bytes, first, last, err
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
		one := [][]byte{frame}
		lats := make([]time.Duration, 0, cfg.Iters)
		start := time.Now()
		for i := 0; i < cfg.Iters; i++ {
			t0 := time.Now()
			for sent := 0; sent == 0; {
				if sent, err = l.Send(one); err != nil {
					return Result{}, err
				}
			}
			for {
				n, err := l.Recv(bufs[:1], sizes[:1])
				if err != nil {
					return Result{}, err
				}
				if n > 0 {
					break
				}
				if time.Since(t0) > 2*time.Second {
					return Result{}, errors.New("xdp baseline: echo lost")
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
		if err := fillMessageRates(&r, st, msgs*perMsg, perMsg, "frames"); err != nil {
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
				fmt.Fprintf(w, "   vs %-4s median latency %.2f× (%.2f µs vs %.2f µs)\n", r.Op, base.LatMedianUs/r.LatMedianUs, base.LatMedianUs, r.LatMedianUs)
			}
		}
		return
	}
	for _, r := range rs[1:] {
		if r.MsgRateMpps == 0 || r.BWAvgGbps == 0 {
			continue
		}
		fmt.Fprintf(w, "   vs %-4s message rate %5.1f %%   bandwidth %5.1f %%", r.Op, 100*base.MsgRateMpps/r.MsgRateMpps, 100*base.BWAvgGbps/r.BWAvgGbps)
		if base.CPUClientNsPerKiB > 0 && r.CPUClientNsPerKiB > 0 {
			fmt.Fprintf(w, "   CPU per KiB: client %.2f×", base.CPUClientNsPerKiB/r.CPUClientNsPerKiB)
			if base.CPUServerNsPerKiB > 0 && r.CPUServerNsPerKiB > 0 {
				fmt.Fprintf(w, ", server %.2f×", base.CPUServerNsPerKiB/r.CPUServerNsPerKiB)
			}
		}
		fmt.Fprintln(w)
	}
}
