package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// cmListener is a server's RDMA-CM listener on perftest's port: the
// channel's connection request and then each test QP's arrive on it.
type cmListener struct {
	eq  *fabric.EQ
	pep *fabric.PassiveEndpoint
}

func listenCM(fb *fab, port uint16) (*cmListener, error) {
	info := fb.info
	info.Service = port
	l := &cmListener{}
	var err error
	if l.eq, err = fb.f.EQ(64); err == nil {
		if l.pep, err = fb.f.PassiveEndpoint(&info); err == nil {
			if err = l.pep.Bind(l.eq); err == nil {
				err = l.pep.Listen()
			}
		}
	}
	if err != nil {
		l.close()
		return nil, fmt.Errorf("perftest: listening for RDMA-CM connections on %v port %d: %w", info.Src, port, err)
	}
	return l, nil
}

// next waits for the next connection request.
func (l *cmListener) next(ctx context.Context, what string) (*fabric.Info, error) {
	for {
		ev, err := l.eq.Read(ctx)
		if err != nil {
			return nil, fmt.Errorf("perftest: waiting for %s: %w", what, err)
		}
		if ev.Kind == fabric.EventConnReq {
			return ev.Info, nil
		}
	}
}

func (l *cmListener) close() {
	if l.pep != nil {
		_ = l.pep.Close()
	}
	if l.eq != nil {
		_ = l.eq.Close()
	}
}

// ServePerftestCM is ServePerftest in perftest's RDMA-CM mode: it listens
// on port (rdma_listen; listening is told where, once it does), answers
// one unmodified ib_*_bw -R client (or RunPerftestCM) and returns what it
// printed.
func ServePerftestCM(ctx context.Context, d *Device, port uint16, cfg PerftestConfig, listening func(netip.AddrPort)) (PerftestOutcome, error) {
	var sv PerftestOutcome
	if cfg.Lat {
		return PerftestOutcome{}, errPerftestLatCM
	}
	if err := cfg.check(); err != nil {
		return sv, err
	}
	if cfg.Duration > 0 {
		return sv, errors.New("perftest: a server runs as long as its client; no --duration")
	}
	fb, err := d.open(ctx, d.ipv4(), fabric.EPMsg, fabric.ProgressAuto, 16, epQueue)
	if err != nil {
		return sv, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}
	l, err := listenCM(fb, port)
	if err != nil {
		return sv, err
	}
	defer l.close()
	if listening != nil {
		listening(l.pep.Addr())
	}
	req, err := l.next(ctx, "a perftest client")
	if err != nil {
		return sv, err
	}
	mc, err := perftest.NewMsgConn(fb.f, fb.dom, req)
	if err != nil {
		_ = l.pep.Reject(req, nil)
		return sv, err
	}
	defer mc.Close()
	if err := mc.Accept(ctx, l.pep.Addr(), req.Dst); err != nil {
		return sv, fmt.Errorf("perftest: accepting the client's RDMA-CM connection from %v: %w", req.Dst, err)
	}
	c, stop := cmConn(ctx, mc, true)
	defer stop()

	p, err := c.Prelude(cfg.MTU)
	if err != nil {
		return sv, err
	}
	sv.PeerVersion, sv.MTU = p.Version, p.MTU
	// The test QPs' events: their disconnects at the end.
	teq, err := fb.f.EQ(4 * cfg.QPs)
	if err != nil {
		return sv, err
	}
	defer teq.Close()
	s, err := newSessionOn(fb, 0, max(cfg.Size, p.Cycle)+p.Cycle, false, cfg.QPs)
	if err != nil {
		return sv, err
	}
	defer s.close()
	gid, err := fb.gid()
	if err != nil {
		return sv, err
	}
	var zero perftest.Dest
	if _, err := c.Xchg("before the QPs' connections", c.MarshalKey(zero)); err != nil {
		return sv, err
	}
	for i := range cfg.QPs {
		if err := s.acceptCM(ctx, l, teq, i); err != nil {
			return sv, err
		}
	}
	mine := ptDests(s, gid)
	if err := c.Barrier("after the QPs' connections", mine[0]); err != nil {
		return sv, err
	}
	theirs, err := c.Keys("QP keys", mine)
	if err != nil {
		return sv, err
	}
	sv.Peer = perftestQPs(theirs)
	if err := ptServerTest(&sv, c, s, cfg, p, mine); err != nil {
		return sv, err
	}
	// The client disconnects each QP, then the channel: wait (a little)
	// for it, so that our endpoints answer rather than go first.
	lingerCM(teq, cfg.QPs, mc)
	return sv, nil
}

// acceptCM accepts the next connection request on l as the session's
// endpoint i.
func (s *session) acceptCM(ctx context.Context, l *cmListener, teq *fabric.EQ, i int) error {
	req, err := l.next(ctx, fmt.Sprintf("the connection of QP %d", i+1))
	if err != nil {
		return err
	}
	ep, err := s.newEP(req, teq)
	if err != nil {
		_ = l.pep.Reject(req, nil)
		return fmt.Errorf("perftest: QP %d: %w", i+1, err)
	}
	s.eps = append(s.eps, ep)
	if err := ep.Accept(ctx, nil); err != nil {
		return fmt.Errorf("perftest: accepting QP %d's RDMA-CM connection from %v: %w", i+1, req.Dst, err)
	}
	return nil
}

// lingerCM waits up to ptCMLinger for n disconnects on teq and for the
// channel's.
func lingerCM(teq *fabric.EQ, n int, mc *perftest.MsgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), ptCMLinger)
	defer cancel()
	for n > 0 {
		ev, err := teq.Read(ctx)
		if err != nil {
			return
		}
		if ev.Kind == fabric.EventShutdown {
			n--
		}
	}
	select {
	case <-mc.Gone():
	case <-ctx.Done():
	}
}
