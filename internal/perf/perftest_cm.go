package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// perftest's RDMA-CM mode (ib_*_bw -R; internal/oob/perftest's cm.go
// says what differs from the TCP exchange): the exchange runs over an
// RDMA-CM connection on the test's port (perftest.MsgConn), and every
// test QP is one more RDMA-CM connection to the same port, made between
// two barriers after the prelude. The rest is RunPerftest's and
// ServePerftest's.

const (
	// ptCMTries and ptCMRetry: a rejected connection is tried again, as
	// rdma_cm_client_connection does 100 ms apart: perftest's server
	// listens for the test QPs only once it has answered the barrier
	// before them, and its answer is a SEND it waits to see completed.
	// When our ACK of it is lost, rxe repeats it only after the CM's ACK
	// timeout (about 2.1 s: docs/perftest-rdmacm.md), so where perftest's
	// client gives up after 10 tries, ours tries for 6 s.
	ptCMTries = 60
	ptCMRetry = 100 * time.Millisecond
	// ptCMChannelTries: perftest's client tries its channel once; ours
	// gives a server that is still starting 5 s.
	ptCMChannelTries = 50
	// ptCMLinger bounds how long a server waits for its client to
	// disconnect the test QPs and the channel (rdma_cm_disconnect_nodes).
	ptCMLinger = 3 * time.Second
)

// resolveAddrPort is server (host or host:port) as an address and port,
// defaultPort if it names none.
func resolveAddrPort(ctx context.Context, server string, defaultPort int) (netip.AddrPort, error) {
	host, port := server, strconv.Itoa(defaultPort)
	if h, p, err := net.SplitHostPort(server); err == nil {
		host, port = h, p
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return netip.AddrPort{}, fmt.Errorf("perftest: bad port in %q", server)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("perftest: resolving %q (perftest's RDMA-CM mode is IPv4): %w", host, err)
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(n)), nil
}

// routeLocal is the local address the host's routes pick for dst (no
// packet is sent); invalid if there is no route.
func routeLocal(dst netip.AddrPort) netip.Addr {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return netip.Addr{}
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// retryRejected runs try until it is not rejected, tries times at most;
// each failed try is cleaned up by try itself.
func retryRejected(ctx context.Context, tries int, try func() error) error {
	var err error
	for range tries {
		if err = try(); !errors.Is(err, fabric.ErrRejected) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(ptCMRetry):
		}
	}
	return err
}

// RunPerftestCM is RunPerftest in perftest's RDMA-CM mode: the client of
// an unmodified ib_*_bw -R server (or ServePerftestCM) at server (host or
// host:port, default port 18515).
func RunPerftestCM(ctx context.Context, d *Device, server string, cfg PerftestConfig) (PerftestOutcome, error) {
	var run PerftestOutcome
	if cfg.Lat {
		return PerftestOutcome{}, errPerftestLatCM
	}
	if err := cfg.check(); err != nil {
		return run, err
	}
	addr, err := resolveAddrPort(ctx, server, PerftestDefaultPort)
	if err != nil {
		return run, err
	}
	// Manual progress, as over TCP: the test's loop drives the transport
	// (a worker goroutine spinning beside it costs a small host dearly);
	// the connection manager drives worker 0 itself while it connects.
	fb, err := d.open(ctx, routeLocal(addr), fabric.EPMsg, fabric.ProgressManual, 2*ptTxDepth, 16)
	if err != nil {
		return run, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}
	var mc *perftest.MsgConn
	err = retryRejected(ctx, ptCMChannelTries, func() error {
		var err error
		if mc, err = perftest.NewMsgConn(fb.f, fb.dom, &fb.info); err != nil {
			return err
		}
		if err = mc.Dial(ctx, addr); err != nil {
			mc.Close()
			mc = nil
		}
		return err
	})
	if err != nil {
		return run, fmt.Errorf("perftest: connecting to the server's RDMA-CM listener at %v: %w", addr, err)
	}
	defer mc.Close()
	c, stop := cmConn(ctx, mc, false)
	defer stop()

	p, err := c.Prelude(cfg.MTU)
	if err != nil {
		return run, err
	}
	run.PeerVersion, run.MTU = p.Version, p.MTU
	s, err := openSession(fb, cfg.QPs, cfg.Size, cfg.Op != "atomic")
	if err != nil {
		return run, err
	}
	defer s.close()
	mine, err := ptCMDests(fb, s)
	if err != nil {
		return run, err
	}
	if err := c.Barrier("before the QPs' connections", mine[0]); err != nil {
		return run, err
	}
	for i := range s.eps {
		if err := s.connectCM(ctx, i, addr); err != nil {
			return run, err
		}
	}
	if mine, err = ptCMDests(fb, s); err != nil { // renewed endpoints
		return run, err
	}
	if err := c.Barrier("after the QPs' connections", mine[0]); err != nil {
		return run, err
	}
	theirs, err := c.Keys("QP keys", mine)
	if err != nil {
		return run, err
	}
	run.Peer = perftestQPs(theirs)
	err = ptClientTest(ctx, &run, c, fb, s, cfg, p, mine, theirs)
	if err == nil {
		// rdma_cm_disconnect_nodes: the client disconnects each QP.
		for _, ep := range s.eps {
			_ = ep.Shutdown()
		}
	}
	return run, err
}

// connectCM connects the session's endpoint i to the server's listener
// at addr, on a fresh endpoint after each rejection.
func (s *session) connectCM(ctx context.Context, i int, addr netip.AddrPort) error {
	first := true
	err := retryRejected(ctx, ptCMTries, func() error {
		if !first {
			// A rejected endpoint is done with: a fresh one in its place
			// (its CQ holds room for the session's endpoints only).
			_ = s.eps[i].Close()
			ep, err := s.newEP(&s.fb.info, nil)
			if err != nil {
				return err
			}
			s.eps[i] = ep
		}
		first = false
		return s.eps[i].Connect(ctx, addr, nil)
	})
	if err != nil {
		return fmt.Errorf("perftest: connecting QP %d of %d over RDMA-CM to %v: %w", i+1, len(s.eps), addr, err)
	}
	return nil
}

// ptCMDests are the key messages for s's endpoints; the GID is the
// domain's.
func ptCMDests(fb *fab, s *session) ([]perftest.Dest, error) {
	gid, err := fb.gid()
	if err != nil {
		return nil, err
	}
	return ptDests(s, gid), nil
}

// cmConn is the exchange over mc, cut short when ctx ends until stop.
func cmConn(ctx context.Context, mc *perftest.MsgConn, server bool) (c *perftest.Conn, stop func() bool) {
	stop = context.AfterFunc(ctx, func() { _ = mc.SetDeadline(time.Now()) })
	return &perftest.Conn{C: mc, Ctx: ctx, Timeout: 60 * time.Second, Server: server, CM: true}, stop
}
