package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// perftest's latency tests (ib_send_lat, ib_write_lat, ib_read_lat,
// ib_atomic_lat of perftest 6.06; src/*_lat.c and run_iter_lat*), both
// roles, one queue pair. After the prelude the mains differ from the BW
// tests' (internal/oob/perftest's package comment) in their hand-shakes:
//
//	write, read,  1 key message (my_dest[0]) before the N key messages,
//	atomic        connect, N key messages again, 1 barrier (after RTR).
//	              write: both sides run the test and exit, nothing more
//	              on the socket. read, atomic: the server's part ends
//	              there: it goes straight into ctx_close_connection (1
//	              barrier, "done"), where it waits while the client runs
//	              its test and then closes the same way.
//	send          N key messages, connect, 1 barrier, N key messages
//	              again; per size: receives posted, 1 barrier, the test;
//	              then ctx_close_connection.
//
// The tests (run_iter_lat_send, run_iter_lat_write, run_iter_lat):
//
//	send   ping-pong of sends, the client first: each side waits for a
//	       receive, then sends, as many times as -n.
//	write  ping-pong of RDMA writes, the server first: each side writes
//	       its message to the peer's buffer with its count in the last
//	       byte, polls its own buffer's last byte for the peer's count,
//	       and waits for its write's completion.
//	read,  the client alone: one request at a time, each awaited.
//	atomic
//
// Each side notes the time of every post, and print_report_lat reports
// the gaps between successive posts: halved for send and write (a gap is
// a round trip there), whole for read and atomic.

// errPerftestLatCM refuses the latency tests in perftest's RDMA-CM mode,
// which this side does not speak yet.
var errPerftestLatCM = errors.New("perftest: the latency tests run over perftest's TCP exchange only (no RDMA-CM, -R)")

// ptLatTail is LAT_MEASURE_TAIL: the largest gaps print_report_lat leaves
// out of its figures.
const ptLatTail = 2

// ptLatYield is how many empty polls a waiting latency loop makes before
// it yields its processor.
const ptLatYield = 64

// ptLatIters is the latency tests' default -n (DEF_ITERS).
const ptLatIters = 1000

// ptLatSize is the latency tests' default -s (DEF_SIZE_LAT).
const ptLatSize = 2

// ptLatLinger bounds how long the write test's sides keep their queue
// pair answering after their loop, waiting for the peer to close the
// socket: ib_write_lat ends without a hand-shake, so a lost ACK of the
// peer's last write is repeated to a queue pair that must still be there.
const ptLatLinger = 5 * time.Second

// PerftestLatLine is one row of perftest's latency table
// (print_report_lat), in microseconds.
type PerftestLatLine struct {
	Bytes    uint64  `json:"bytes"`
	Iters    uint64  `json:"iterations"`
	TMin     float64 `json:"t_min_us"`
	TMax     float64 `json:"t_max_us"`
	TTypical float64 `json:"t_typical_us"`
	TAvg     float64 `json:"t_avg_us"`
	TStdev   float64 `json:"t_stdev_us"`
	T99      float64 `json:"t_99_us"`
	T999     float64 `json:"t_99_9_us"`
}

// checkLat is check for the latency tests.
func (cfg *PerftestConfig) checkLat() error {
	if cfg.QPs > 1 {
		return errors.New("perftest: the latency tests run one queue pair (no --qps)")
	}
	cfg.QPs = 1
	if cfg.Duration != 0 {
		return errors.New("perftest: the latency tests run --iters, not --duration")
	}
	if cfg.Op == "atomic" {
		if cfg.All {
			return errors.New("perftest: ib_atomic_lat has no -a (its messages are 8 bytes)")
		}
		if cfg.Size != 0 && cfg.Size != 8 {
			return errors.New("perftest: atomic operations are 8 bytes (ib_atomic_lat has no -s)")
		}
		cfg.Size = 8
	} else if cfg.CmpSwap {
		return errors.New("perftest: -A (CMP_AND_SWAP) is for the atomic test")
	}
	if cfg.Size == 0 {
		cfg.Size = ptLatSize
	}
	if cfg.All {
		cfg.Size = ptMaxSize
		if cfg.allMax > 0 {
			cfg.Size = cfg.allMax
		}
	}
	if cfg.Size < 1 || cfg.Size > 1<<30 {
		return fmt.Errorf("perftest: size %d outside 1 B..1 GiB", cfg.Size)
	}
	if cfg.Iters == 0 {
		cfg.Iters = ptLatIters
	}
	if cfg.Iters < 5 || cfg.Iters > 100000000 {
		return fmt.Errorf("perftest: iterations %d outside perftest's %d..%d (MIN_ITER, MAX_ITER)", cfg.Iters, 5, 100000000)
	}
	return nil
}

// ptLatRegion is BUFF_SIZE: the size of each of the two halves of a
// latency test's buffer, the first the messages sent (and, for send,
// received), the second what the peer writes or reads (the address the
// key message announces).
func ptLatRegion(cfg PerftestConfig, cycle int) int { return max(cfg.Size, cycle) }

// openLatSession opens a latency test's session: one queue pair, its
// buffer the two regions, and for write a counter of the peer's writes.
func openLatSession(fb *fab, cfg PerftestConfig, p perftest.Prelude) (*session, error) {
	s, err := newSessionOn(fb, 0, 2*ptLatRegion(cfg, p.Cycle), false, 1)
	if err != nil {
		return nil, err
	}
	if cfg.Op == "write" {
		if s.wrote, err = fb.dom.Counter(); err != nil {
			s.close()
			return nil, err
		}
	}
	if err := s.addEP(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// ptLatProgress is the progress a latency test's domain runs with: the
// sides that loop drive their transport themselves (manual progress), as
// perftest's loops poll; a read or atomic server only answers, beside
// its blocking wait for the client's last hand-shake (automatic).
func ptLatProgress(op string, server bool) fabric.Progress {
	if server && (op == "read" || op == "atomic") {
		return fabric.ProgressAuto
	}
	return fabric.ProgressManual
}

// ptLatKeysFirst is the key message the write, read and atomic mains
// exchange before their loop over the QPs' keys.
func ptLatKeysFirst(c *perftest.Conn, cfg PerftestConfig, mine []perftest.Dest) error {
	if cfg.Op == "send" {
		return nil
	}
	_, err := c.Keys("first QP key", mine[:1])
	return err
}

// ptLat is a latency test's exchange and loop, for either side, once its
// queue pair is connected and the keys exchanged once. It fills out's
// Lat and Results with what this side prints: nothing on a read or
// atomic server.
func ptLat(ctx context.Context, out *PerftestOutcome, c *perftest.Conn, fb *fab, s *session, cfg PerftestConfig, p perftest.Prelude, mine, theirs []perftest.Dest) error {
	server := c.Server
	barrier := func(what string) error { return c.Barrier(what, mine[0]) }
	peer := qpInfo{QPN: theirs[0].QPN, PSN: theirs[0].PSN, GID: theirs[0].GID, RKey: theirs[0].RKey, VA: theirs[0].VA}
	region := ptLatRegion(cfg, p.Cycle)
	loop := &ptLatLoop{s: s, cfg: cfg, server: server, region: region, posted: make([]time.Duration, cfg.Iters)}
	if err := ptKeysAgain(c, cfg.Op, mine); err != nil {
		return err
	}
	if cfg.Op == "send" {
		if err := s.postRecvs(cfg.Size); err != nil {
			return err
		}
	} else {
		if server && cfg.Op != "write" {
			// ib_read_lat's and ib_atomic_lat's server: straight to the
			// close, whose hand-shake comes when the client is done.
			if err := ptWaitClose(c, mine[0]); err != nil {
				return err
			}
			c.Finish()
			return nil
		}
	}
	for _, size := range cfg.sizes() {
		if cfg.Op == "send" {
			if err := barrier(fmt.Sprintf("receives posted (%d bytes)", size)); err != nil {
				return err
			}
		}
		before := s.transport()
		if err := loop.run(ctx, size, peer); err != nil {
			return err
		}
		line := ptLatReport(size, loop.posted, ptRTTFactor(cfg.Op))
		out.Lat = append(out.Lat, line)
		r := line.result(cfg.Op, p.MTU)
		r.Transport = s.transport().since(before)
		out.Results = append(out.Results, r)
	}
	if cfg.Op == "write" {
		return ptLinger(ctx, c, fb)
	}
	// Let our last ACKs go out before the close lets the peer tear down.
	fb.drainUntil(time.Now().Add(5 * time.Millisecond))
	if err := barrier("close"); err != nil {
		return err
	}
	c.Finish()
	return nil
}

// ptWaitClose is the read and atomic server's ctx_close_connection
// hand-shake: it waits for the client's, however long its test runs.
func ptWaitClose(c *perftest.Conn, me perftest.Dest) error {
	rem, err := c.Read("close", c.KeySize(), 0)
	if err != nil {
		return err
	}
	if _, err := c.ParseKey(rem); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return c.Write("close", c.MarshalKey(me))
}

// ptLinger ends the write test: ib_write_lat closes its socket as it
// exits, with no hand-shake. We close our half, then keep the transport
// running until the peer closes its own (it has all its completions
// then) or ptLatLinger passes.
func ptLinger(ctx context.Context, c *perftest.Conn, fb *fab) error {
	if cw, ok := c.C.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		_ = c.C.SetReadDeadline(time.Now().Add(ptLatLinger))
		_, _ = io.Copy(io.Discard, c.C)
	}()
	for {
		select {
		case <-eof:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		fb.drainUntil(time.Now().Add(time.Millisecond))
	}
}

func ptRTTFactor(op string) int {
	if op == "read" || op == "atomic" {
		return 1
	}
	return 2
}

// ptLatLoop runs one size of a latency test on one side.
type ptLatLoop struct {
	s      *session
	cfg    PerftestConfig
	server bool
	region int
	req    request
	wrote  *fabric.Counter // the peer's writes (write)
	wrote0 uint64          // the peer's writes of the sizes before: -n each
	posted []time.Duration // since epoch, of every post
	epoch  time.Time
	// Completions taken while waiting for something else.
	sends, recvs int
}

// run is run_iter_lat_send, run_iter_lat_write or run_iter_lat for one
// size. Nothing in its loop allocates.
func (l *ptLatLoop) run(ctx context.Context, size int, peer qpInfo) error {
	l.req.init(l.s, 0, l.cfg.Op, l.cfg.CmpSwap, size, peer)
	l.epoch = time.Now()
	l.sends, l.recvs = 0, 0
	switch l.cfg.Op {
	case "send":
		return l.send(ctx)
	case "write":
		// Not the counter's value now: the peer may have written already.
		l.wrote = l.s.wrote
		defer func() { l.wrote0 += uint64(l.cfg.Iters) }()
		return l.write(ctx, size)
	}
	return l.request(ctx)
}

// post notes the time of post i and posts one request, reporting its
// completion.
func (l *ptLatLoop) post(i int) error {
	l.posted[i] = time.Since(l.epoch)
	return l.req.post(1)
}

// poll takes the completions there are; false when there were none.
func (l *ptLatLoop) poll() (bool, error) {
	s := l.s
	n := s.cq.Read(s.cs)
	for _, e := range s.cs[:n] {
		if err := e.Err(); err != nil {
			return false, fmt.Errorf("%s latency test: a completion with %v after %d sent and %d received (%s)", l.cfg.Op, err, l.sends, l.recvs, s.qpStats(0))
		}
		if e.Flags&fabric.FlagRecv != 0 {
			l.recvs++
			if err := s.repost(0); err != nil {
				return false, err
			}
		} else {
			l.sends++
		}
	}
	if err := s.flush(); err != nil {
		return false, err
	}
	return n > 0, nil
}

// wait polls until cond holds. It spins as perftest does, but lets the
// process's other goroutines run every ptLatYield empty polls: a peer in
// the same process, or the connection manager, would otherwise wait for
// the scheduler to preempt the spinning loop (10 ms and more).
func (l *ptLatLoop) wait(ctx context.Context, what string, cond func() bool) error {
	for k := 1; !cond(); k++ {
		did, err := l.poll()
		if err != nil {
			return err
		}
		if !did && k%ptLatYield == 0 {
			runtime.Gosched()
		}
		if k&4095 == 0 && ctx.Err() != nil {
			return fmt.Errorf("%s latency test: waiting for %s after %d sent and %d received: %w", l.cfg.Op, what, l.sends, l.recvs, ctx.Err())
		}
	}
	return nil
}

// send is run_iter_lat_send: the client sends first, each side sends
// once it has received.
func (l *ptLatLoop) send(ctx context.Context) error {
	n := l.cfg.Iters
	for scnt, rcnt := 0, 0; scnt < n || rcnt < n; {
		if rcnt < n && !(scnt < 1 && !l.server) {
			rcnt++
			if err := l.wait(ctx, "a message", func() bool { return l.recvs >= rcnt }); err != nil {
				return err
			}
		}
		if scnt < n {
			if err := l.post(scnt); err != nil {
				return err
			}
			scnt++
		}
	}
	return l.wait(ctx, "the last send's completion", func() bool { return l.sends >= n })
}

// write is run_iter_lat_write: the server writes first; each side writes
// its count into the last byte of its message, polls the last byte of
// the peer's in its own buffer, and waits for each write's completion.
func (l *ptLatLoop) write(ctx context.Context, size int) error {
	n := l.cfg.Iters
	buf := l.s.buf
	mark, watch := size-1, l.region+size-1
	for scnt, rcnt := 0, 0; scnt < n || l.sends < n || rcnt < n; {
		if rcnt < n && !(scnt < 1 && l.server) {
			rcnt++
			// The counter rises once the write is placed whole (whichever
			// goroutine drove the transport), so its last byte may be read
			// then; perftest polls that byte, which must be the count.
			if err := l.wait(ctx, "the peer's write", func() bool { return l.wrote.Read()-l.wrote0 >= uint64(rcnt) }); err != nil {
				return err
			}
			if got := buf[watch]; got != byte(rcnt) {
				return fmt.Errorf("write latency test: the peer's write %d ends in %d, not its count %d", rcnt, got, byte(rcnt))
			}
		}
		if scnt < n {
			buf[mark] = byte(scnt + 1)
			if err := l.post(scnt); err != nil {
				return err
			}
			scnt++
			if err := l.wait(ctx, "a write's completion", func() bool { return l.sends >= scnt }); err != nil {
				return err
			}
		}
	}
	return nil
}

// request is run_iter_lat: one read or atomic at a time.
func (l *ptLatLoop) request(ctx context.Context) error {
	for i := range l.cfg.Iters {
		if err := l.post(i); err != nil {
			return err
		}
		if err := l.wait(ctx, "a completion", func() bool { return l.sends > i }); err != nil {
			return err
		}
	}
	return nil
}

// ptLatReport is print_report_lat for the post times of one size: the
// gaps between successive posts, sorted, less the ptLatTail largest,
// divided by rtt (2 where a gap is a round trip). Its quirks are kept so
// that the two sides' tables mean the same: t_max is the largest gap
// kept, the median of an even count is the mean of the middle two, and
// the deviation sums squares of whole microseconds (perftest's int
// temporaries).
func ptLatReport(size int, posted []time.Duration, rtt int) PerftestLatLine {
	iters := len(posted)
	delta := make([]time.Duration, iters-1)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	slices.Sort(delta)
	m := len(delta) - ptLatTail
	us := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(rtt) }
	median := delta[m/2]
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += us(d)
	}
	avg := sum / float64(m)
	var sq float64
	for _, d := range delta[:m] {
		t := int(avg - us(d))
		sq += float64(int(math.Pow(float64(t), 2)))
	}
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	return PerftestLatLine{Bytes: uint64(size), Iters: uint64(iters),
		TMin: us(delta[0]), TMax: us(delta[m]), TTypical: us(median), TAvg: avg,
		TStdev: math.Sqrt(sq / float64(m)), T99: us(delta[i99]), T999: us(delta[i999])}
}

// result is a latency line in softfabric's units, for --json.
func (l PerftestLatLine) result(op string, mtu int) Result {
	return Result{Op: op, Bytes: int(l.Bytes), Iters: int(l.Iters), QPs: 1, MTU: mtu,
		LatMinUs: l.TMin, LatMedianUs: l.TTypical, LatP99Us: l.T99, LatMaxUs: l.TMax, LatAvgUs: l.TAvg}
}
