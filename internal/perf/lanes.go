package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
)

// lanes spread a test's queue pairs over the device's workers: queue pair
// i belongs to lane i % len(lanes), a session of its own (completion
// queues, receive queue, buffer) on worker i % len(lanes), used only from
// that worker's goroutine. With one lane everything runs on the caller's
// goroutine, as before there were workers.
type lanes []*session

// newLanes makes one lane per worker, as many as there are queue pairs;
// latency tests (one request in flight) use one.
func newLanes(d *device.Device, nqps, size int, lat bool) (lanes, error) {
	n := min(d.Workers(), nqps)
	if lat || n < 1 {
		n = 1
	}
	ls := make(lanes, n)
	for w := range ls {
		k := nqps / n
		if w < nqps%n {
			k++
		}
		s, err := newSessionOn(d, w, k, size)
		if err != nil {
			ls[:w].close()
			return nil, err
		}
		ls[w] = s
	}
	return ls, nil
}

// at returns queue pair i's lane and its index there.
func (ls lanes) at(i int) (*session, int) { return ls[i%len(ls)], i / len(ls) }

func (ls lanes) nqps() int {
	n := 0
	for _, s := range ls {
		n += len(s.qps)
	}
	return n
}

func (ls lanes) close() {
	for _, s := range ls {
		s.close()
	}
}

// infos lists every queue pair, in queue pair order.
func (ls lanes) infos(gid netip.Addr) []qpInfo {
	out := make([]qpInfo, ls.nqps())
	for i := range out {
		s, k := ls.at(i)
		q := s.qps[k]
		out[i] = qpInfo{QPN: q.QPN(), PSN: s.psns[k], GID: gid, RKey: s.buf.RKey(), VA: s.buf.Addr()}
	}
	return out
}

// peersOf picks lane w's peers out of the peers of every queue pair.
func (ls lanes) peersOf(w int, peers []qpInfo) []qpInfo {
	var out []qpInfo
	for i := w; i < len(peers); i += len(ls) {
		out = append(out, peers[i])
	}
	return out
}

func (ls lanes) connect(ctx context.Context, peers []qpInfo, mtu int) error {
	for w, s := range ls {
		if err := s.connect(ctx, ls.peersOf(w, peers), mtu); err != nil {
			return err
		}
	}
	return nil
}

func (ls lanes) postRecvs(size int) error {
	for _, s := range ls {
		if err := s.postRecvs(size); err != nil {
			return err
		}
	}
	return nil
}

func (ls lanes) transport() Transport {
	var t Transport
	for _, s := range ls {
		t = t.plus(s.transport())
	}
	return t
}

// serve keeps the lanes' receive queues full and counts receives until
// done delivers; then it returns the receives counted.
func (ls lanes) serve(ctx context.Context, d *device.Device, size int, done <-chan error) (int, error) {
	var finished atomic.Bool
	var doneErr error
	go func() {
		select {
		case doneErr = <-done:
		case <-ctx.Done():
		}
		finished.Store(true)
	}()
	received := make([]int, len(ls))
	hook := func(w int) func() (bool, error) {
		s := ls[w]
		return func() (bool, error) {
			n := s.recvCQ.Poll(s.cs)
			if n > 0 {
				for _, e := range s.cs[:n] {
					if e.Status != verbs.Success {
						return false, fmt.Errorf("receive completed with %v", e.Status)
					}
				}
				received[w] += n
				if err := s.postRecvs(size); err != nil {
					return false, err
				}
			}
			if finished.Load() {
				return false, errFinished
			}
			return n > 0, nil
		}
	}
	var err error
	if len(ls) == 1 {
		err = d.Run(ctx, hook(0))
	} else {
		hooks := make([]func() (bool, error), d.Workers())
		for w := range ls {
			hooks[w] = hook(w)
		}
		err = d.RunWorkers(ctx, hooks)
	}
	if err != errFinished {
		return 0, err
	}
	if doneErr != nil {
		return 0, doneErr
	}
	total := 0
	for _, n := range received {
		total += n
	}
	return total, nil
}

// run is the client's measurement: each lane posts its share of the
// requests and completes them, on its worker's goroutine (RunWorkers), or
// on this goroutine with every worker's progress when there is one lane.
func (ls lanes) run(ctx context.Context, d *device.Device, cfg Config, peers []qpInfo) (Result, error) {
	start := time.Now()
	// Each lane does its queue pairs' share of the requests; the first
	// takes the remainder.
	shares := make([]int, len(ls))
	sum := 0
	for w, s := range ls {
		shares[w] = cfg.Iters * len(s.qps) / ls.nqps()
		sum += shares[w]
	}
	shares[0] += cfg.Iters - sum
	rs := make([]*runner, len(ls))
	for w, s := range ls {
		rs[w] = newRunner(s, cfg, ls.peersOf(w, peers), shares[w], start)
	}
	if len(ls) == 1 {
		// On a goroutine of its own, whose thread may be pinned and then
		// dies with it.
		errc := make(chan error, 1)
		go func() { errc <- rs[0].loop(ctx, d) }()
		if err := <-errc; err != nil {
			return Result{}, err
		}
		return rs[0].result(ls.transport()), nil
	}
	var left atomic.Int32
	left.Store(int32(len(rs)))
	errAllDone := errors.New("all lanes done")
	hooks := make([]func() (bool, error), d.Workers())
	for w, r := range rs {
		counted := false
		hooks[w] = func() (bool, error) {
			did := false
			if !r.done() {
				var err error
				if did, err = r.step(ctx); err != nil {
					return false, err
				}
			} else if !counted {
				counted = true
				left.Add(-1)
			}
			if left.Load() == 0 {
				return false, errAllDone
			}
			return did, nil
		}
	}
	if err := d.RunWorkers(ctx, hooks); err != errAllDone {
		return Result{}, err
	}
	return combine(cfg, rs, start, ls.transport()), nil
}

// combine sums the lanes' figures. Peak bandwidth is the average: the
// lanes' slices do not line up in time.
func combine(cfg Config, rs []*runner, start time.Time, t Transport) Result {
	var end time.Time
	completed := 0
	for _, r := range rs {
		completed += r.completed
		if r.end.After(end) {
			end = r.end
		}
	}
	elapsed := end.Sub(start)
	r := Result{Op: cfg.Op, Bytes: cfg.Size, Iters: completed, QPs: cfg.QPs, MTU: cfg.MTU, Seconds: elapsed.Seconds(), Transport: t}
	bytes := float64(completed) * float64(cfg.Size)
	r.BWAvgMBps = bytes / elapsed.Seconds() / 1e6
	r.BWAvgGbps = bytes * 8 / elapsed.Seconds() / 1e9
	r.MsgRateMpps = float64(completed) / elapsed.Seconds() / 1e6
	r.BWPeakMBps, r.BWPeakGbps = r.BWAvgMBps, r.BWAvgGbps
	return r
}

// runner is one lane's client loop, a step at a time: post requests in
// bursts while the window allows, reap completions, keep the figures.
type runner struct {
	s        *session
	cfg      Config
	wrs      []verbs.SendWR
	sge      [1]mr.SGE
	iters    int
	deadline time.Time
	window   int // requests in flight: cfg.Window per queue pair
	burst    int
	// pending holds, per queue pair, the sizes of its bursts in flight.
	pending           [][]int
	qpIndex           map[uint32]int
	lats              []time.Duration
	postedAt          time.Time
	marks             []time.Time // peak bandwidth: when each 20th of the run ended
	posted, completed int
	next              int // the queue pair of the next burst, round robin
	stop              bool
	start, end        time.Time
}

// peakSlices is how many equal slices of a run peak bandwidth is the best
// of.
const peakSlices = 20

func newRunner(s *session, cfg Config, peers []qpInfo, iters int, start time.Time) *runner {
	r := &runner{s: s, cfg: cfg, iters: iters, start: start, wrs: make([]verbs.SendWR, len(s.qps)),
		pending: make([][]int, len(s.qps)), qpIndex: make(map[uint32]int, len(s.qps))}
	r.sge[0] = mr.SGE{Addr: s.buf.Addr(), Length: uint32(cfg.Size), LKey: s.buf.LKey()}
	for i := range r.wrs {
		r.wrs[i] = verbs.SendWR{Flags: verbs.Signaled, SGL: r.sge[:], RemoteAddr: peers[i].VA, RKey: peers[i].RKey, CompareAdd: 1}
		switch cfg.Op {
		case "write":
			r.wrs[i].Op = verbs.OpWrite
		case "read":
			r.wrs[i].Op = verbs.OpRead
		case "send":
			r.wrs[i].Op = verbs.OpSend
		case "atomic":
			r.wrs[i].Op = verbs.OpFetchAdd
		}
	}
	for i, q := range s.qps {
		r.qpIndex[q.QPN()] = i
	}
	if cfg.Duration > 0 {
		r.iters = int(^uint(0) >> 1)
		r.deadline = start.Add(cfg.Duration)
	}
	if cfg.Lat {
		r.lats = make([]time.Duration, 0, min(r.iters, 1<<20))
	}
	// Requests go out in bursts, each signalled only on its last request
	// (perftest's post list and CQ moderation): a burst fills one transmit
	// batch, and one completion accounts for it. Latency runs use bursts
	// of one.
	r.window = cfg.Window * max(1, len(s.qps))
	if cfg.Lat {
		r.window = 1
	}
	r.burst = min(64, cfg.Window)
	if cfg.Lat {
		r.burst = 1
	}
	if r.iters == 0 || len(s.qps) == 0 {
		r.stop, r.end = true, start
	}
	return r
}

// loop drives every worker of d and the lane on the calling goroutine
// until the lane is done.
func (r *runner) loop(ctx context.Context, d *device.Device) error {
	if err := d.PinThread(r.s.worker); err != nil {
		return err
	}
	for !r.done() {
		if _, err := d.Progress(); err != nil {
			return err
		}
		if _, err := r.step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) done() bool { return r.completed >= r.posted && (r.stop || r.completed >= r.iters) }

// step posts what the window allows and reaps completions; it reports
// whether it did anything.
func (r *runner) step(ctx context.Context) (bool, error) {
	cfg, s := r.cfg, r.s
	did := false
	for !r.stop && r.posted < r.iters && r.posted-r.completed <= r.window-r.burst {
		n := min(r.burst, r.iters-r.posted)
		i := r.next % len(s.qps)
		r.next++
		if cfg.Lat {
			r.postedAt = time.Now()
		}
		for k := 0; k < n; k++ {
			r.wrs[i].Flags = 0
			if k == n-1 {
				r.wrs[i].Flags = verbs.Signaled
			}
			if err := s.qps[i].PostSend(&r.wrs[i]); err != nil {
				return false, err
			}
		}
		r.pending[i] = append(r.pending[i], n)
		r.posted += n
		did = true
	}
	n := s.sendCQ.Poll(s.cs)
	if n == 0 {
		return did, nil
	}
	now := time.Now()
	for _, e := range s.cs[:n] {
		if e.Status != verbs.Success {
			return false, fmt.Errorf("%s completed with %v after %d requests (QP %d: %s)", cfg.Op, e.Status, r.completed, e.QPN, s.qpStats(e.QPN))
		}
		i := r.qpIndex[e.QPN]
		r.completed += r.pending[i][0]
		r.pending[i] = r.pending[i][1:]
	}
	if cfg.Lat {
		r.lats = append(r.lats, now.Sub(r.postedAt))
	}
	if cfg.Duration > 0 {
		if now.After(r.deadline) {
			r.stop = true
		}
	} else if k := len(r.marks); k < peakSlices && r.completed >= (k+1)*r.iters/peakSlices {
		r.marks = append(r.marks, now)
	}
	if r.completed&1023 == 0 && ctx.Err() != nil {
		return false, ctx.Err()
	}
	if cfg.Duration == 0 && r.completed >= r.iters {
		r.stop = true
	}
	if r.done() {
		r.end = now
	}
	return true, nil
}

// result is the lane's figures as the whole test's: with one lane.
func (r *runner) result(t Transport) Result {
	cfg := r.cfg
	elapsed := r.end.Sub(r.start)
	res := Result{Op: cfg.Op, Bytes: cfg.Size, Iters: r.completed, QPs: cfg.QPs, MTU: cfg.MTU, Seconds: elapsed.Seconds(), Transport: t}
	if cfg.Lat {
		fillLatency(&res, r.lats)
		return res
	}
	bytes := float64(r.completed) * float64(cfg.Size)
	res.BWAvgMBps = bytes / elapsed.Seconds() / 1e6
	res.BWAvgGbps = bytes * 8 / elapsed.Seconds() / 1e9
	res.MsgRateMpps = float64(r.completed) / elapsed.Seconds() / 1e6
	res.BWPeakMBps, res.BWPeakGbps = res.BWAvgMBps, res.BWAvgGbps
	prev := r.start
	for _, m := range r.marks {
		if dt := m.Sub(prev).Seconds(); dt > 0 {
			mb := float64(r.iters/peakSlices) * float64(cfg.Size) / dt / 1e6
			if mb > res.BWPeakMBps {
				res.BWPeakMBps, res.BWPeakGbps = mb, mb*8/1e3
			}
		}
		prev = m
	}
	return res
}
