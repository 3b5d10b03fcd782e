package perf

import (
	"context"
	"fmt"
	"math"
	"time"
)

// The data path of perftest's BW tests, counted as perftest counts it:
// every QP runs Iters requests (run_iter_bw) and a send server expects
// Iters messages on every QP (run_iter_bw_server), so the totals are
// Iters × QPs on both sides, whatever the order of the requests.

const (
	ptTxDepth = 128 // DEF_TX_BW: requests in flight per QP
	ptBurst   = 64  // requests per post, the last one signalled
	ptSlices  = 20  // peak bandwidth: the best of up to this many equal slices
	mib       = 1 << 20
)

// ptRun is run_iter_bw for one size: the client's side of a write, read,
// send or atomic test, timed from the first post to the last completion.
// Nothing in its loop allocates.
func (s *session) ptRun(ctx context.Context, cfg PerftestConfig, size, mtu int, peers []qpInfo) (Result, PerftestLine, error) {
	nq := len(s.eps)
	reqs := make([]request, nq)
	for i := range reqs {
		reqs[i].init(s, i, cfg.Op, cfg.CmpSwap, size, peers[i])
	}
	perQP, total := cfg.Iters, cfg.Iters*nq
	var deadline time.Time
	if cfg.Duration > 0 {
		perQP, total = math.MaxInt, math.MaxInt
		deadline = time.Now().Add(cfg.Duration)
	}
	// Per QP: requests posted and completed (each reported completion's
	// context names its QP and counts its burst).
	posted := make([]int, nq)
	done := make([]int, nq)
	before := s.transport()
	// Completions come a burst at a time: a slice spans a few bursts at
	// least, or the run has a single slice (peak = average).
	slices := 1
	if cfg.Duration == 0 {
		slices = max(1, min(ptSlices, total/(4*ptBurst)))
	}
	marks := make([]time.Time, 0, slices)
	completed := 0
	stop := false
	start := time.Now()
	last := start
	for loop := 1; ; loop++ {
		for i := 0; i < nq && !stop; i++ {
			for posted[i] < perQP && posted[i]-done[i] < ptTxDepth {
				n := min(ptBurst, perQP-posted[i], ptTxDepth-(posted[i]-done[i]))
				if err := reqs[i].post(n); err != nil {
					return Result{}, PerftestLine{}, err
				}
				posted[i] += n
			}
		}
		n := s.cq.Read(s.cs)
		if n > 0 {
			last = time.Now()
			for _, e := range s.cs[:n] {
				i := int(e.Context >> 32)
				if err := e.Err(); err != nil {
					return Result{}, PerftestLine{}, fmt.Errorf("%s of %d bytes completed with %v after %d requests (%s)", cfg.Op, size, err, completed, s.qpStats(i))
				}
				b := int(uint32(e.Context))
				if i >= nq || posted[i]-done[i] < b {
					return Result{}, PerftestLine{}, fmt.Errorf("unexpected completion on QP %d", i)
				}
				done[i] += b
				completed += b
			}
			if cfg.Duration > 0 {
				stop = stop || last.After(deadline)
			} else {
				for k := len(marks); k < slices && completed >= (k+1)*total/slices; k++ {
					marks = append(marks, last)
				}
			}
		}
		if loop&4095 == 0 && ctx.Err() != nil {
			return Result{}, PerftestLine{}, ctx.Err()
		}
		if completed == total || stop && inFlight(posted, done) == 0 {
			break
		}
	}
	elapsed := max(last.Sub(start), time.Nanosecond)
	bytes := float64(completed) * float64(size)
	line := PerftestLine{Bytes: uint64(size), Iters: uint64(completed),
		BWAvg: bytes / elapsed.Seconds() / mib, MsgRate: float64(completed) / elapsed.Seconds() / 1e6}
	line.BWPeak = line.BWAvg
	prev := start
	for k, m := range marks {
		if dt := m.Sub(prev).Seconds(); dt > 0 && slices > 1 {
			n := (k+1)*total/slices - k*total/slices
			line.BWPeak = max(line.BWPeak, float64(n)*float64(size)/dt/mib)
		}
		prev = m
	}
	r := line.result(cfg.Op, cfg.QPs, mtu)
	r.Seconds = elapsed.Seconds()
	r.Transport = s.transport().since(before)
	return r, line, nil
}

func inFlight(posted, done []int) int {
	n := 0
	for i := range posted {
		n += posted[i] - done[i]
	}
	return n
}

// result is a line in softfabric's units (MB = 10^6 bytes), for --json.
func (l PerftestLine) result(op string, qps, mtu int) Result {
	r := Result{Op: op, Bytes: int(l.Bytes), Iters: int(l.Iters), QPs: qps, MTU: mtu, MsgRateMpps: l.MsgRate,
		BWAvgMBps: l.BWAvg * mib / 1e6, BWPeakMBps: l.BWPeak * mib / 1e6}
	r.BWAvgGbps, r.BWPeakGbps = r.BWAvgMBps*8/1e3, r.BWPeakMBps*8/1e3
	if l.BWAvg > 0 && l.MsgRate > 0 {
		r.Seconds = float64(l.Iters) / (l.MsgRate * 1e6)
	}
	return r
}

// ptReceiver is the send server's side of run_iter_bw_server: it counts
// receive completions per QP and keeps the receive queues full.
type ptReceiver struct {
	s           *session
	length      int // of each receive
	perQP       []int
	total       int
	first, last time.Time
}

func newPTReceiver(s *session, length int) *ptReceiver {
	return &ptReceiver{s: s, length: length, perQP: make([]int, len(s.eps))}
}

// reset starts counting a new size.
func (r *ptReceiver) reset() {
	clear(r.perQP)
	r.total = 0
	r.first, r.last = time.Time{}, time.Time{}
}

// poll takes the receive completions there are and reposts receives.
func (r *ptReceiver) poll() (bool, error) {
	if err := r.s.flush(); err != nil {
		return false, err
	}
	n := r.s.cq.Read(r.s.cs)
	if n == 0 {
		return false, nil
	}
	if r.first.IsZero() {
		r.first = time.Now() // set_on_first_rx_packet
	}
	for _, e := range r.s.cs[:n] {
		if err := e.Err(); err != nil {
			return false, fmt.Errorf("receive %d completed with %v (a message larger than --size %d?)", r.total+1, err, r.length)
		}
		i := int(e.Context)
		if i >= len(r.perQP) {
			return false, fmt.Errorf("receive completion on unknown QP %d", i)
		}
		r.perQP[i]++
		if err := r.s.repost(i); err != nil {
			return false, err
		}
	}
	r.total += n
	r.last = time.Now()
	return true, nil
}

// line is print_report_bw for the server: noPeak, and perftest's send
// server's clock: from its first poll that found a receive completion
// (set_on_first_rx_packet) to the end of the poll that took the last
// one. The client's clock runs from its first post to its last send's
// completion, so it also holds the first message's way there and the
// last ACK's way back, and whatever the receiver took to start polling:
// a short run's two figures differ by that much (perftest's own client
// and server alike), the server's the higher.
func (r *ptReceiver) line(size int) PerftestLine {
	dt := max(r.last.Sub(r.first), time.Nanosecond).Seconds()
	return PerftestLine{Bytes: uint64(size), Iters: uint64(r.total),
		BWAvg: float64(r.total) * float64(size) / dt / mib, MsgRate: float64(r.total) / dt / 1e6}
}
