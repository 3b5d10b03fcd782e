package perf

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// lanes spread a test's queue pairs over the domain's workers: queue pair
// i belongs to lane i % len(lanes), a session of its own (completion
// queue, buffer, endpoints) on worker i % len(lanes), used only from one
// goroutine, which (with manual progress) drives that worker by reading
// the lane's CQ. Latency tests (one request in flight) use one lane.
type lanes []*session

// newLanes makes one lane per worker, as many as there are queue pairs;
// latency tests use one. selective: the client's endpoints report only
// the last request of each burst.
func newLanes(fb *fab, nqps, size int, lat, selective bool) (lanes, error) {
	n := min(fb.dom.Queues(), nqps)
	if lat || n < 1 {
		n = 1
	}
	ls := make(lanes, 0, n)
	for w := range n {
		s, err := newSessionOn(fb, w, size, selective, (nqps+n-1)/n)
		if err != nil {
			ls.close()
			return nil, err
		}
		ls = append(ls, s)
	}
	for i := range nqps {
		s, _ := ls.at(i)
		if err := s.addEP(); err != nil {
			ls.close()
			return nil, err
		}
	}
	return ls, nil
}

// at returns queue pair i's lane and its index there.
func (ls lanes) at(i int) (*session, int) { return ls[i%len(ls)], i / len(ls) }

func (ls lanes) nqps() int {
	n := 0
	for _, s := range ls {
		n += len(s.eps)
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
		q := s.eps[k].QPInfo()
		out[i] = qpInfo{QPN: q.QPN, PSN: q.PSN, GID: gid, RKey: uint32(s.mr.Key()), VA: s.mr.Addr()}
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
// done delivers; then it returns the receives counted. The domain's
// workers drive the transport (automatic progress); serve only reads the
// CQs: a goroutine per lane, parked on its CQ while nothing arrives, so
// that a receive is posted again as soon as its message is in (a loop
// that slept between polls left latency runs waiting on RNR retries).
func (ls lanes) serve(ctx context.Context, recv bool, done <-chan error) (int, error) {
	if !recv {
		select {
		case err := <-done:
			return 0, err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var received atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(ls))
	for _, s := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// serveRecv returns only with an error: a real one while the
			// run goes on, the cancellation once it is over.
			err := s.serveRecv(lctx, &received)
			if lctx.Err() == nil {
				errc <- err
			}
		}()
	}
	var err error
	select {
	case err = <-done:
	case err = <-errc:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel()
	wg.Wait()
	if err != nil {
		return 0, err
	}
	// The client said DONE once every send was acknowledged, and the
	// responder completes a receive before it acknowledges it: what the
	// lanes had not read when DONE came is in their CQs now.
	for _, s := range ls {
		for n := s.cq.Read(s.cs); n > 0; n = s.cq.Read(s.cs) {
			received.Add(int64(n))
		}
	}
	return int(received.Load()), nil
}

// serveRecv reposts the lane's receives as they complete, until ctx ends.
func (s *session) serveRecv(ctx context.Context, received *atomic.Int64) error {
	for {
		if err := s.flush(); err != nil {
			return err
		}
		n, err := s.cq.ReadContext(ctx, s.cs)
		if err != nil {
			return err
		}
		for _, c := range s.cs[:n] {
			if err := c.Err(); err != nil {
				return fmt.Errorf("receive completed with %v", err)
			}
			if err := s.repost(int(c.Context)); err != nil {
				return err
			}
		}
		received.Add(int64(n))
	}
}

// run is the client's measurement: each lane posts its share of the
// requests and completes them on a goroutine of its own, pinned to its
// worker's CPU when the domain has CPUs, driving its worker as it reads
// its CQ (manual progress) until every lane is done.
func (ls lanes) run(ctx context.Context, fb *fab, cfg Config, peers []qpInfo) (Result, error) {
	start := time.Now()
	// Each lane does its queue pairs' share of the requests; the first
	// takes the remainder.
	shares := make([]int, len(ls))
	sum := 0
	for w, s := range ls {
		shares[w] = cfg.Iters * len(s.eps) / ls.nqps()
		sum += shares[w]
	}
	shares[0] += cfg.Iters - sum
	rs := make([]*runner, len(ls))
	for w, s := range ls {
		rs[w] = newRunner(s, cfg, ls.peersOf(w, peers), shares[w], start)
	}
	var left atomic.Int32
	left.Store(int32(len(rs)))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for w, r := range rs {
		wg.Add(1)
		// On a goroutine of its own, whose thread may be pinned and then
		// dies with it.
		go func() {
			defer wg.Done()
			errs[w] = r.loop(ctx, fb.dom, &left)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	if len(rs) == 1 {
		return rs[0].result(ls.transport()), nil
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
	reqs     []request
	iters    int
	deadline time.Time
	window   int // requests in flight: cfg.Window per queue pair
	burst    int
	lats     []time.Duration
	postedAt time.Time
	marks    []time.Time // peak bandwidth: when each 20th of the run ended
	posted   int
	// completed counts the requests done: each reported completion's
	// context is its burst's size.
	completed int
	next      int // the queue pair of the next burst, round robin
	stop      bool
	start     time.Time
	end       time.Time
}

// peakSlices is how many equal slices of a run peak bandwidth is the best
// of.
const peakSlices = 20

func newRunner(s *session, cfg Config, peers []qpInfo, iters int, start time.Time) *runner {
	r := &runner{s: s, cfg: cfg, iters: iters, start: start, reqs: make([]request, len(s.eps))}
	for i := range r.reqs {
		r.reqs[i].init(s, i, cfg.Op, false, cfg.Size, peers[i])
	}
	if cfg.Duration > 0 {
		r.iters = int(^uint(0) >> 1)
		r.deadline = start.Add(cfg.Duration)
	}
	if cfg.Lat {
		r.lats = make([]time.Duration, 0, min(r.iters, 1<<20))
	}
	// Requests go out in bursts, only the last of each reporting a
	// completion (perftest's post list and CQ moderation): a burst fills
	// one transmit batch, and one completion accounts for it. Latency
	// runs use bursts of one.
	r.window = cfg.Window * max(1, len(s.eps))
	if cfg.Lat {
		r.window = 1
	}
	r.burst = min(64, cfg.Window)
	if cfg.Lat {
		r.burst = 1
	}
	if r.iters == 0 || len(s.eps) == 0 {
		r.stop, r.end = true, start
	}
	return r
}

// loop runs the lane on the calling goroutine until it is done, then
// keeps driving its worker (frames for other lanes' queue pairs may
// arrive on its queue) until every lane is.
func (r *runner) loop(ctx context.Context, dom *fabric.Domain, left *atomic.Int32) error {
	if err := dom.PinThread(r.s.worker); err != nil {
		left.Add(-1)
		return err
	}
	for !r.done() {
		if _, err := r.step(ctx); err != nil {
			left.Add(-1)
			return err
		}
	}
	left.Add(-1)
	for left.Load() > 0 {
		r.s.cq.Read(r.s.cs[:0])
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
		i := r.next % len(s.eps)
		r.next++
		if cfg.Lat {
			r.postedAt = time.Now()
		}
		if err := r.reqs[i].post(n); err != nil {
			return false, fmt.Errorf("posting %s: %w", cfg.Op, err)
		}
		r.posted += n
		did = true
	}
	var n int
	if r.posted > r.completed && (r.stop || r.posted >= r.iters || r.posted-r.completed > r.window-r.burst) {
		// Nothing more to post until something completes: wait for it,
		// spinning first, then asleep on the worker's socket (on a host
		// whose cores both ends share, a spinning waiter takes the time
		// its peer needs to answer).
		var err error
		if n, err = s.cq.ReadContext(ctx, s.cs); err != nil {
			return false, err
		}
	} else {
		n = s.cq.Read(s.cs)
	}
	if n == 0 {
		return did, nil
	}
	now := time.Now()
	for _, e := range s.cs[:n] {
		if err := e.Err(); err != nil {
			return false, fmt.Errorf("%s completed with %v after %d requests (%s)", cfg.Op, err, r.completed, s.qpStats(int(e.Context>>32)))
		}
		r.completed += int(uint32(e.Context))
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
