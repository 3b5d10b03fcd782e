package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// Both sides of perftest's own out-of-band exchange (internal/oob/perftest
// speaks it; see its package comment for the messages and their order),
// so that `softfabric perf` can drive unmodified ib_write_bw, ib_read_bw,
// ib_send_bw and ib_atomic_bw servers (RunPerftest) and answer their
// clients (ServePerftest). Each of the -q QPs runs -n iterations
// (run_iter_bw, run_iter_bw_server), and the report's iterations are
// their total (num_of_calculated_iters).

// PerftestVersion is the perftest version this client announces.
const PerftestVersion = perftest.Version

// PerftestDefaultPort is perftest's default TCP port (DEF_PORT).
const PerftestDefaultPort = perftest.DefaultPort

// ptOutReads is the out_reads we announce: the responder resources our
// QPs get (device.ConnectOptions.RdAtomic's default).
const ptOutReads = 16

// perftestIters is a perftest BW server's default -n: DEF_ITERS_WB (5000)
// for ib_write_bw, DEF_ITERS (1000) for the others.
func perftestIters(op string) int {
	if op == "write" {
		return 5000
	}
	return 1000
}

// ptDests are the key messages announcing s's queue pairs.
func ptDests(s *session, gid netip.Addr) []perftest.Dest {
	infos := s.infos(gid)
	mine := make([]perftest.Dest, len(infos))
	for i, q := range infos {
		mine[i] = perftest.Dest{OutReads: ptOutReads, QPInfo: fabric.QPInfo{QPN: q.QPN, PSN: q.PSN, GID: gid}, RKey: q.RKey, VA: q.VA}
	}
	return mine
}

func perftestQPs(ds []perftest.Dest) []PerftestQP {
	out := make([]PerftestQP, len(ds))
	for i, t := range ds {
		out[i] = PerftestQP{QPN: t.QPN, PSN: t.PSN, RKey: t.RKey, OutReads: t.OutReads, VA: t.VA, GID: t.GID}
	}
	return out
}

// PerftestConfig is a perftest BW test as both ends must agree on it:
// perftest exchanges none of these, so each side's must match the other's
// command line (-s, -n, -q, -a, -A).
type PerftestConfig struct {
	Op    string // write, read, send or atomic (ib_write_bw ...)
	Size  int    // -s; 0: DEF_SIZE_BW, 65536 (atomic: always 8)
	Iters int    // -n, per queue pair; 0: 5000 for write, 1000 for the others
	QPs   int    // -q; 0: 1
	MTU   int    // largest path MTU to offer (-m); 0: the device's active MTU
	// All is -a: every size from 2 to 2^23 bytes, the size doubling
	// (write, read and send only: perftest refuses it for atomics).
	All bool
	// CmpSwap is -A CMP_AND_SWAP: the atomic test's operation instead of
	// FETCH_AND_ADD.
	CmpSwap bool
	// Duration runs a write, read or atomic client for this long instead
	// of Iters.
	Duration time.Duration
	// Lat runs perftest's latency test instead (ib_write_lat ...: one
	// queue pair, default Size 2 and Iters 1000): perftest_lat.go.
	Lat bool

	allMax int // tests: -a's largest size instead of perftest's 2^23
}

// ptMaxSize is MAX_SIZE, -a's largest message.
const ptMaxSize = 1 << 23

func (cfg *PerftestConfig) check() error {
	switch cfg.Op {
	case "write", "read", "send", "atomic":
	default:
		return fmt.Errorf("perftest: %q is not a perftest test (want write, read, send or atomic)", cfg.Op)
	}
	if cfg.Lat {
		return cfg.checkLat()
	}
	if cfg.Op == "atomic" {
		if cfg.Size != 0 && cfg.Size != 8 {
			return errors.New("perftest: atomic operations are 8 bytes (ib_atomic_bw has no -s)")
		}
		if cfg.All {
			return errors.New("perftest: ib_atomic_bw has no -a (its messages are 8 bytes)")
		}
		cfg.Size = 8 // DEF_SIZE_ATOMIC
	} else if cfg.CmpSwap {
		return errors.New("perftest: -A (CMP_AND_SWAP) is for the atomic test")
	}
	if cfg.Size == 0 {
		cfg.Size = 65536 // DEF_SIZE_BW
	}
	if cfg.All {
		cfg.Size = ptMaxSize // force_dependecies
		if cfg.allMax > 0 {
			cfg.Size = cfg.allMax
		}
	}
	if cfg.Size < 1 || cfg.Size > 1<<30 {
		return fmt.Errorf("perftest: size %d outside 1 B..1 GiB", cfg.Size)
	}
	if cfg.Iters == 0 {
		cfg.Iters = perftestIters(cfg.Op)
	}
	if cfg.Iters < 5 || cfg.Iters > 100000000 {
		return fmt.Errorf("perftest: iterations %d outside perftest's %d..%d (MIN_ITER, MAX_ITER)", cfg.Iters, 5, 100000000)
	}
	if cfg.QPs == 0 {
		cfg.QPs = 1
	}
	if cfg.QPs < 1 || cfg.QPs > 64 {
		return fmt.Errorf("perftest: %d QPs outside 1..64", cfg.QPs)
	}
	if cfg.Duration < 0 || cfg.Duration > 0 && (cfg.Op == "send" || cfg.All) {
		return errors.New("perftest: --duration is for write, read and atomic at one size (ib_send_bw's server counts -n receives)")
	}
	return nil
}

// sizes are the message sizes of the test in order.
func (cfg *PerftestConfig) sizes() []int {
	if !cfg.All {
		return []int{cfg.Size}
	}
	var out []int
	for s := 2; s <= cfg.Size; s *= 2 {
		out = append(out, s)
	}
	return out
}

// PerftestLine is one row of perftest's BW table (print_full_bw_report):
// bandwidth in MiB/s, which perftest labels MB/sec.
type PerftestLine struct {
	Bytes   uint64  `json:"bytes"`
	Iters   uint64  `json:"iterations"`
	BWPeak  float64 `json:"bw_peak_mib_s"`
	BWAvg   float64 `json:"bw_avg_mib_s"`
	MsgRate float64 `json:"msg_rate_mpps"`
}

// PerftestOutcome is what one side of a perftest BW test saw: the peer's
// version and queue pairs, the path MTU both sides agreed, and the
// measurements.
type PerftestOutcome struct {
	PeerVersion string
	Peer        []PerftestQP // the peer's queue pairs
	MTU         int
	// Lines are the rows perftest prints on this side. A client measures
	// one per size (the server was sent the last one). A server prints,
	// for write, read and atomic, the client's own report (one, of its
	// last size, even with -a), and for send the receive bandwidth it
	// measured, per size.
	Lines []PerftestLine
	// Lat are the rows of a latency test's table, one per size: each
	// side prints its own, but for a read or atomic server, which prints
	// none.
	Lat []PerftestLatLine
	// Results are the lines in softfabric's units, for --json; a send
	// server's have Received set.
	Results []Result
}

// PerftestQP is what a perftest peer announced for one queue pair.
type PerftestQP struct {
	QPN, PSN, RKey, OutReads uint32
	VA                       uint64
	GID                      netip.Addr
}

// RunPerftest is a perftest BW client (ib_write_bw, ib_read_bw,
// ib_send_bw or ib_atomic_bw SERVER) against an unmodified perftest
// server, or ServePerftest, at server (host or host:port, default port
// 18515). The server's command line must agree with cfg where perftest
// does not exchange it: -q, -a, and for send -s and -n; write and read
// need a Size no larger than the server's -s. Connection type RC only, no
// --report-per-port or -b on the server.
func RunPerftest(ctx context.Context, d *Device, server string, cfg PerftestConfig) (PerftestOutcome, error) {
	var run PerftestOutcome
	if err := cfg.check(); err != nil {
		return run, err
	}
	nc, err := oob.Dial(ctx, server, PerftestDefaultPort, "perftest")
	if err != nil {
		return run, err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	c := &perftest.Conn{C: nc, Ctx: ctx, Timeout: 60 * time.Second}
	local, _ := localAddr(nc)
	rx := 16
	if cfg.Lat {
		rx = epQueue // ib_send_lat's client receives too
	}
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressManual, 2*ptTxDepth, rx)
	if err != nil {
		return run, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}

	p, err := c.Prelude(cfg.MTU)
	if err != nil {
		return run, err
	}
	run.PeerVersion, run.MTU = p.Version, p.MTU

	var s *session
	if cfg.Lat {
		s, err = openLatSession(fb, cfg, p)
	} else {
		s, err = openSession(fb, cfg.QPs, cfg.Size, cfg.Op != "atomic")
	}
	if err != nil {
		return run, err
	}
	defer s.close()
	gid, err := fb.gid()
	if err != nil {
		return run, err
	}
	mine := ptDests(s, gid)
	if cfg.Lat {
		mine[0].VA += uint64(ptLatRegion(cfg, p.Cycle))
		if err := ptLatKeysFirst(c, cfg, mine); err != nil {
			return run, err
		}
	}
	theirs, err := c.Keys("QP keys", mine)
	if err != nil {
		return run, err
	}
	run.Peer = perftestQPs(theirs)
	if err := perftest.CheckGIDs(gid, theirs, "server"); err != nil {
		return run, err
	}
	for i, ep := range s.eps {
		t := theirs[i]
		// ctx_connect: the initiator depth is the peer's out_reads.
		rd := uint8(min(ptOutReads, max(t.OutReads, 1)))
		if err := ep.ConnectQP(ctx, t.QPInfo, fabric.QPOptions{PathMTU: p.MTU, RdAtomic: rd}); err != nil {
			return run, fmt.Errorf("connecting QP %d: %w", mine[i].QPN, err)
		}
	}
	if cfg.Lat {
		return run, ptLat(ctx, &run, c, fb, s, cfg, p, mine, theirs)
	}
	err = ptClientTest(ctx, &run, c, fb, s, cfg, p, mine, theirs)
	return run, err
}

// ptKeysAgain is the mains' steps after connect, the same in the BW and
// latency tests and either role over Conn: for send 1 barrier, then the
// keys again; for the others the keys again, then 1 barrier (after RTR).
func ptKeysAgain(c *perftest.Conn, op string, mine []perftest.Dest) error {
	if op == "send" {
		if err := c.Barrier("after connect", mine[0]); err != nil {
			return err
		}
		_, err := c.Keys("QP keys again", mine)
		return err
	}
	if _, err := c.Keys("QP keys again", mine); err != nil {
		return err
	}
	return c.Barrier("after RTR", mine[0])
}

// ptClientTest is the client's exchange and test once its QPs are
// connected and the keys exchanged once: the same over TCP and RDMA-CM.
func ptClientTest(ctx context.Context, run *PerftestOutcome, c *perftest.Conn, fb *fab, s *session, cfg PerftestConfig, p perftest.Prelude, mine, theirs []perftest.Dest) error {
	peers := make([]qpInfo, cfg.QPs)
	for i, t := range theirs {
		peers[i] = qpInfo{QPN: t.QPN, PSN: t.PSN, GID: t.GID, RKey: t.RKey, VA: t.VA}
	}
	barrier := func(what string) error { return c.Barrier(what, mine[0]) }
	send := cfg.Op == "send"
	if err := ptKeysAgain(c, cfg.Op, mine); err != nil {
		return err
	}

	for _, size := range cfg.sizes() {
		if send {
			// The server has posted its receives for this size.
			if err := barrier(fmt.Sprintf("receives posted (%d bytes)", size)); err != nil {
				return err
			}
		}
		res, line, err := s.ptRun(ctx, cfg, size, p.MTU, peers)
		if err != nil {
			return err
		}
		run.Results = append(run.Results, res)
		run.Lines = append(run.Lines, line)
		if send && cfg.All {
			if err := barrier(fmt.Sprintf("after %d bytes", size)); err != nil {
				return err
			}
		}
	}
	// Let the last ACKs (and, for read, our last acknowledgement of the
	// responses) settle before the server tears its QPs down.
	fb.drainUntil(time.Now().Add(5 * time.Millisecond))

	if !send {
		if err := barrier("end of test"); err != nil {
			return err
		}
		last := run.Lines[len(run.Lines)-1]
		rep := perftest.Report{Size: last.Bytes, Iters: last.Iters, BWPeak: last.BWPeak, BWAvg: last.BWAvg, MsgRate: last.MsgRate}
		if err := c.ExchangeReport(rep, p.RV); err != nil {
			return err
		}
	}
	if err := barrier("close"); err != nil {
		return err
	}
	c.Finish()
	return nil
}
