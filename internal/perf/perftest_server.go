package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// The server side of perftest's exchange (see perftest.go): what the
// ib_*_bw mains do when started without a server name, so that unmodified
// perftest clients can measure softfabric.

// ptServe runs the server's steps once its QPs are connected: the
// domain's workers drive the transport (automatic progress) while each
// message is awaited, as a verbs device runs by itself beside perftest's
// blocking reads.
type ptServe struct {
	c    *perftest.Conn
	hook func() (bool, error) // polled while a message is awaited (the send server's receives)
}

// await waits until ch delivers, polling hook meanwhile and backing off
// while nothing happens; the hook allocates nothing.
func (sv *ptServe) await(ch <-chan perftest.Msg) ([]byte, error) {
	var got perftest.Msg
	err := sv.poll(func() (bool, error) {
		select {
		case got = <-ch:
			return false, errFinished
		default:
		}
		if sv.hook != nil {
			return sv.hook()
		}
		return false, nil
	})
	if err != errFinished {
		return nil, err
	}
	return got.B, got.Err
}

// poll calls f until it fails (errFinished: done), spinning while f
// does something and backing off while it does not.
func (sv *ptServe) poll(f func() (bool, error)) error {
	var idle backoff
	for n := 1; ; n++ {
		did, err := f()
		if err != nil {
			return err
		}
		if n&1023 == 0 && sv.c.Ctx.Err() != nil {
			return sv.c.Ctx.Err()
		}
		if did {
			idle.Busy()
		} else {
			idle.Idle()
		}
	}
}

// xchg is the server's half of a step: read the client's message (within
// to, 0 for no limit), then answer with msg.
func (sv *ptServe) xchg(what string, msg []byte, to time.Duration) ([]byte, error) {
	rem, err := sv.await(sv.c.ReadAsync(what, len(msg), to))
	if err != nil {
		return nil, err
	}
	return rem, sv.c.Write(what, msg)
}

// ServePerftest answers one unmodified perftest BW client (ib_write_bw,
// ib_read_bw, ib_send_bw or ib_atomic_bw -F -x N SERVER) accepted on l,
// as perftest's own server does, and returns what it printed. cfg must
// match the client's command line where perftest does not exchange it:
// -q, -a, and for send -s and -n (the server counts -n receives on each
// QP); write and read need a Size at least the client's -s.
func ServePerftest(ctx context.Context, d *Device, l net.Listener, cfg PerftestConfig) (PerftestOutcome, error) {
	var sv PerftestOutcome
	if err := cfg.check(); err != nil {
		return sv, err
	}
	if cfg.Duration > 0 {
		return sv, errors.New("perftest: a server runs as long as its client; no --duration")
	}
	if dl, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
		stop := context.AfterFunc(ctx, func() { _ = dl.SetDeadline(time.Now()) })
		defer stop()
	}
	nc, err := l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return sv, ctx.Err()
		}
		return sv, err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	c := &perftest.Conn{C: nc, Ctx: ctx, Timeout: 60 * time.Second, Server: true}
	local, _ := localAddr(nc)
	progress := fabric.ProgressAuto
	if cfg.Lat {
		progress = ptLatProgress(cfg.Op, true)
	}
	fb, err := d.open(ctx, local, fabric.EPMsg, progress, 16, epQueue)
	if err != nil {
		return sv, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}

	p, err := c.Prelude(cfg.MTU)
	if err != nil {
		return sv, err
	}
	sv.PeerVersion, sv.MTU = p.Version, p.MTU

	// The client's requests of a QP land at its VA onwards, stepping
	// through one cycle buffer for messages up to half of it
	// (increase_rem_addr), through the message itself for larger ones.
	var s *session
	if cfg.Lat {
		s, err = openLatSession(fb, cfg, p)
	} else {
		s, err = openSession(fb, cfg.QPs, max(cfg.Size, p.Cycle)+p.Cycle, false)
	}
	if err != nil {
		return sv, err
	}
	defer s.close()
	gid, err := fb.gid()
	if err != nil {
		return sv, err
	}
	mine := ptDests(s, gid)
	if cfg.Lat {
		mine[0].VA += uint64(ptLatRegion(cfg, p.Cycle))
		if err := ptLatKeysFirst(c, cfg, mine); err != nil {
			return sv, err
		}
	}
	theirs, err := c.Keys("QP keys", mine)
	if err != nil {
		return sv, err
	}
	sv.Peer = perftestQPs(theirs)
	if err := perftest.CheckGIDs(gid, theirs, "client"); err != nil {
		return sv, err
	}
	for i, ep := range s.eps {
		// Our responder resources are the out_reads we announced, which
		// the client takes as its initiator depth.
		if err := ep.ConnectQP(ctx, theirs[i].QPInfo, fabric.QPOptions{PathMTU: p.MTU, RdAtomic: ptOutReads}); err != nil {
			return sv, fmt.Errorf("connecting QP %d: %w", mine[i].QPN, err)
		}
	}

	if cfg.Lat {
		return sv, ptLat(ctx, &sv, c, fb, s, cfg, p, mine, theirs)
	}
	err = ptServerTest(&sv, c, s, cfg, p, mine)
	return sv, err
}

// ptServerTest is the server's exchange and test once its QPs are
// connected and the keys exchanged once: the same over TCP and RDMA-CM.
func ptServerTest(sv *PerftestOutcome, c *perftest.Conn, s *session, cfg PerftestConfig, p perftest.Prelude, mine []perftest.Dest) error {
	var err error
	srv := &ptServe{c: c}
	barrier := func(what string, to time.Duration) error {
		return srv.barrier(what, mine[0], to)
	}
	keysAgain := func() error {
		for i := range mine {
			if err := srv.barrier("QP keys again", mine[i], c.Timeout); err != nil {
				return err
			}
		}
		return nil
	}
	if cfg.Op == "send" {
		if err := barrier("after connect", c.Timeout); err != nil {
			return err
		}
		if err := keysAgain(); err != nil {
			return err
		}
		if sv.Lines, err = srv.receive(s, cfg, mine[0]); err != nil {
			return err
		}
		if cfg.All {
			if err := barrier("close", c.Timeout); err != nil {
				return err
			}
		}
	} else {
		if err := keysAgain(); err != nil {
			return err
		}
		if err := barrier("after RTR", c.Timeout); err != nil {
			return err
		}
		// The test runs; the client's next message says it has finished,
		// whenever that is.
		if err := barrier("end of test", 0); err != nil {
			return err
		}
		rep, err := srv.report(p.RV)
		if err != nil {
			return err
		}
		sv.Lines = []PerftestLine{{Bytes: rep.Size, Iters: rep.Iters, BWPeak: rep.BWPeak, BWAvg: rep.BWAvg, MsgRate: rep.MsgRate}}
		if err := barrier("close", c.Timeout); err != nil {
			return err
		}
	}
	c.Finish()
	for _, l := range sv.Lines {
		r := l.result(cfg.Op, cfg.QPs, p.MTU)
		if cfg.Op == "send" {
			r.Received = int(l.Iters)
		}
		sv.Results = append(sv.Results, r)
	}
	return nil
}

// report is the server's half of xchg_bw_reports: it reads the client's
// fields and answers each with its own, which perftest's server never
// fills in (zeros here).
func (sv *ptServe) report(remote float64) (perftest.Report, error) {
	var f [][]byte
	for _, n := range perftest.ReportSizes(remote) {
		b, err := sv.xchg("BW report", make([]byte, n), sv.c.Timeout)
		if err != nil {
			return perftest.Report{}, err
		}
		f = append(f, b)
	}
	return perftest.ParseReport(f)
}

// barrier is the server's half of Conn.Barrier.
func (sv *ptServe) barrier(what string, me perftest.Dest, to time.Duration) error {
	rem, err := sv.xchg(what, sv.c.MarshalKey(me), to)
	if err == nil {
		_, err = sv.c.ParseKey(rem)
	}
	return err
}

// receive is the send server's test, size by size: post receives, 1
// barrier, count Iters receives on every QP (run_iter_bw_server), then
// answer the client's next message: the barrier after each size with -a,
// else the closing one (ctx_close_connection's hand-shake).
func (sv *ptServe) receive(s *session, cfg PerftestConfig, me perftest.Dest) ([]PerftestLine, error) {
	rcv := newPTReceiver(s, cfg.Size)
	if err := s.postRecvs(cfg.Size); err != nil {
		return nil, err
	}
	sv.hook = rcv.poll
	defer func() { sv.hook = nil }()
	want := cfg.Iters * cfg.QPs
	var lines []PerftestLine
	for _, size := range cfg.sizes() {
		rcv.reset()
		if err := sv.barrier(fmt.Sprintf("receives posted (%d bytes)", size), me, sv.c.Timeout); err != nil {
			return nil, err
		}
		what := fmt.Sprintf("after %d bytes", size)
		if !cfg.All {
			what = "close"
		}
		next := sv.c.ReadAsync(what, sv.c.KeySize(), 0)
		var early *perftest.Msg
		err := sv.poll(func() (bool, error) {
			select {
			case m := <-next:
				early = &m
				return false, errFinished
			default:
			}
			did, err := rcv.poll()
			if err == nil && rcv.total >= want {
				err = errFinished
			}
			return did, err
		})
		if err != errFinished {
			return nil, err
		}
		if early != nil {
			// The client has finished: whatever it sent is in by now, if
			// not yet taken from the queue.
			for end := time.Now().Add(10 * time.Millisecond); rcv.total < want && time.Now().Before(end); {
				if _, err := rcv.poll(); err != nil {
					return nil, err
				}
			}
			if early.Err != nil {
				return nil, early.Err
			}
			if rcv.total < want {
				return nil, fmt.Errorf("perftest: the client finished %d-byte messages after sending %d of %d (its -n and -q must match --iters %d and --qps %d)", size, rcv.total, want, cfg.Iters, cfg.QPs)
			}
		}
		lines = append(lines, rcv.line(size))
		if err := sv.answer(what, next, early, rcv, want, cfg, me); err != nil {
			return nil, err
		}
	}
	return lines, nil
}

// answer waits for the client's message after a size, checks that no
// more messages came than counted, and answers it.
func (sv *ptServe) answer(what string, next <-chan perftest.Msg, early *perftest.Msg, rcv *ptReceiver, want int, cfg PerftestConfig, me perftest.Dest) error {
	var rem []byte
	var err error
	if early != nil {
		rem = early.B
	} else if rem, err = sv.await(next); err != nil {
		return err
	}
	if err := sv.checkCount(rcv, want, cfg); err != nil {
		return err
	}
	if _, err := sv.c.ParseKey(rem); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return sv.c.Write(what, sv.c.MarshalKey(me))
}

func (sv *ptServe) checkCount(rcv *ptReceiver, want int, cfg PerftestConfig) error {
	if rcv.total > want {
		return fmt.Errorf("perftest: the client sent %d messages, more than --iters %d × --qps %d", rcv.total, cfg.Iters, cfg.QPs)
	}
	for i, n := range rcv.perQP {
		if n != cfg.Iters {
			return fmt.Errorf("perftest: QP %d received %d messages; perftest's clients send -n (--iters %d) on each QP", i, n, cfg.Iters)
		}
	}
	return nil
}
