package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/msgdomain"
)

// udaddy (librdmacm/examples/udaddy.c): cmatose's exchange over UD queue
// pairs, "connected" by SIDR in rdma_cm's UDP port space (port 7174), on
// each of Connections queue pairs:
//
//	client                                   server
//	post Count receives of Size bytes        (each request: a UD QP, Count
//	SIDR_REQ (CMA header, port 7174)   ──▶    receives posted, then accepted)
//	                                    ◀──  SIDR_REP: QPN, Q_Key 0x01234567
//	      (all Connections resolved on the client)
//	Count SENDs with immediate data
//	(its QPN) of Size bytes, unsignaled ──▶
//	                                         wait for Count receives; the
//	                                         first names the reply address
//	                                         (source GID, QPN from the
//	                                         immediate data)
//	                                    ◀──  Count SENDs with immediate data
//	wait for Count receives                  wait for its Count sends
//
// Nothing disconnects. A datagram lost leaves its receiver waiting for
// ever, as udaddy does; --timeout bounds the wait here.

// udaddy's defaults.
const (
	// UDDefaultPort is udaddy.c's port ("7174").
	UDDefaultPort = 7174
	// UDDefaultTimeout bounds each side's resolution and data transfers.
	UDDefaultTimeout = 30 * time.Second
)

// UDConfig is one udaddy run: its options and where it runs.
type UDConfig struct {
	Provider string     // as Config's
	Iface    string     // as Config's
	Server   netip.Addr // -s: the server's address; invalid for the server
	Bind     netip.Addr // -b: the local address
	Port     uint16     // -p (0: UDDefaultPort)
	// Connections is -c; Count is -C and Size -S (Size 0 makes Count 0;
	// start from UDDefaults() for udaddy's 1, 10 and 100).
	Connections, Count, Size int
	// Timeout bounds the client's resolution, the server's wait for each
	// request, and the data transfers (0: UDDefaultTimeout).
	Timeout time.Duration
}

// UDDefaults returns the configuration of a udaddy run without options.
func UDDefaults() UDConfig {
	return UDConfig{Port: UDDefaultPort, Connections: DefaultConnections, Count: DefaultCount, Size: DefaultSize}
}

func (c UDConfig) withDefaults() UDConfig {
	m := Config{Provider: c.Provider, Port: c.Port, Connections: c.Connections, Count: c.Count, Size: c.Size}.withDefaults()
	c.Provider, c.Connections, c.Count = m.Provider, m.Connections, m.Count
	if c.Port == 0 {
		c.Port = UDDefaultPort
	}
	if c.Timeout == 0 {
		c.Timeout = UDDefaultTimeout
	}
	return c
}

func (c UDConfig) check() error {
	return Config{Connections: c.Connections, Count: c.Count, Size: c.Size}.check()
}

// udError says why a resolution failed, as the rdma_cm event a librdmacm
// client would have seen: UNREACHABLE with -ECONNREFUSED when the server
// refused or nobody listens (cma_sidr_rep_handler), or -ETIMEDOUT when
// nobody answered; ADDR_ERROR when the host is not there.
func udError(ctx context.Context, server netip.AddrPort, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("resolving %v: %w", server, ctx.Err())
	case errors.Is(err, fabric.ErrRejected):
		return &CMError{"RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ECONNREFUSED), fmt.Errorf("refused by %v: %w", server, err)}
	case errors.Is(err, fabric.ErrAddrNotAvail):
		return &CMError{"RDMA_CM_EVENT_ADDR_ERROR", -int(syscall.ETIMEDOUT), fmt.Errorf("nobody answers for %v: %w", server.Addr(), err)}
	case errors.Is(err, fabric.ErrTimedOut), errors.Is(err, context.DeadlineExceeded):
		return &CMError{"RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT), fmt.Errorf("no answer from %v in %v: %w", server, timeout, err)}
	}
	return &CMError{"RDMA_CM_EVENT_UNREACHABLE", -int(syscall.EINVAL), fmt.Errorf("resolving %v: %w", server, err)}
}

// udDomain opens the device for DGRAM endpoints, and the AV they share.
func udDomain(ctx context.Context, cfg UDConfig, local netip.Addr) (*domain, *fabric.AV, error) {
	depth := max(cfg.Count, 1)
	d, err := msgdomain.Open(ctx, msgdomain.Options{Provider: cfg.Provider, Iface: cfg.Iface, Type: fabric.EPDgram,
		Port: cfg.Port, Local: local, TX: depth, RX: depth})
	if err != nil {
		return nil, nil, err
	}
	av, err := d.Dom.AV(cfg.Connections)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, av, nil
}

// udNode is one of udaddy's nodes: a DGRAM endpoint, its one CQ and its
// message buffer, and the peer it answers.
type udNode struct {
	id        int
	ep        *fabric.Endpoint
	cq        *fabric.CQ
	mr        *fabric.MR
	size      int
	connected bool
	peer      fabric.Addr // where sends go: the resolved server, or the client that sent first
	hasPeer   bool
	comps     [8]fabric.Completion
}

// newUDNode sets a node up as udaddy's verify_test_params, init_node and
// post_recvs do: one CQ for both directions, a DGRAM endpoint on info
// with the domain's AV, the message buffer, and count receives posted.
func newUDNode(d *domain, av *fabric.AV, info *fabric.Info, cfg UDConfig, id int) (n *udNode, err error) {
	n = &udNode{id: id, size: cfg.Size}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if cfg.Count > 0 && cfg.Size > info.EP.MaxMsgSize {
		return n, fmt.Errorf("udaddy: message_size %d is larger than active mtu %d", cfg.Size, info.EP.MaxMsgSize)
	}
	depth := max(cfg.Count, 1)
	if n.cq, err = d.Dom.CQ(2 * depth); err != nil {
		return n, fmt.Errorf("udaddy: unable to create CQ: %w", err)
	}
	if n.ep, err = d.Dom.Endpoint(info); err != nil {
		return n, fmt.Errorf("udaddy: unable to create QP: %w", err)
	}
	for _, step := range []func() error{
		func() error { return n.ep.Bind(n.cq, 0) },
		func() error { return n.ep.Bind(av, 0) },
		n.ep.Enable,
	} {
		if err = step(); err != nil {
			return n, fmt.Errorf("udaddy: unable to create QP: %w", err)
		}
	}
	n.mr, err = postRecvs(d, n.ep, cfg.Count, cfg.Size)
	return n, err
}

func (n *udNode) close() {
	if n.ep != nil {
		_ = n.ep.Close()
	}
	if n.mr != nil {
		_ = n.mr.Close()
	}
	if n.cq != nil {
		_ = n.cq.Close()
	}
}

// postSends is post_sends: count sends with immediate data, the node's
// QPN, to its peer.
func (n *udNode) postSends(count int) error {
	if !n.connected || count == 0 {
		return nil
	}
	b := n.mr.Bytes()[n.size:]
	qpn := uint64(n.ep.Name().QPN)
	for range count {
		if err := n.ep.SendData(b, n.mr.Desc(), qpn, n.peer, 1); err != nil {
			return fmt.Errorf("failed to post sends: connection %d: %w", n.id, err)
		}
	}
	return nil
}

// poll waits for count completions of kind (FlagSend or FlagRecv) on the
// node's CQ, as poll_cqs does for one node; the other kind is passed
// over. The first receive on a node with no peer makes its reply address
// (create_reply_ah): the client's address, with the QPN its immediate
// data carries, and the node's own Q_Key.
func (n *udNode) poll(ctx context.Context, kind fabric.Flags, count int, from netip.Addr, av *fabric.AV) error {
	what := map[fabric.Flags]string{fabric.FlagSend: "send", fabric.FlagRecv: "receive"}[kind]
	for done := 0; done < count; {
		k, err := n.cq.ReadContext(ctx, n.comps[:])
		if k == 0 && err != nil {
			return fmt.Errorf("udaddy: failed polling CQ: connection %d, %d of %d %ss complete: %w", n.id, done, count, what, err)
		}
		for _, c := range n.comps[:k] {
			if err := c.Err(); err != nil {
				return fmt.Errorf("connection %d: %s %d of %d failed: %w", n.id, what, done+1, count, err)
			}
			if c.Flags&kind == 0 {
				continue
			}
			done++
			if kind == fabric.FlagRecv && !n.hasPeer {
				if n.peer, err = av.Insert(fabric.Address{IP: from, QPN: uint32(c.Data)}); err != nil {
					return fmt.Errorf("udaddy: failed to create reply AH: %w", err)
				}
				n.hasPeer = true
			}
		}
	}
	return nil
}

// RunUD is udaddy's client (-s SERVER): it resolves cfg.Server's port on
// cfg.Connections nodes at once, sends Count datagrams from each, and
// waits for Count back on each. It prints what udaddy prints, its last
// lines too; a resolution that fails prints the rdma_cm event ("udaddy:
// event: RDMA_CM_EVENT_UNREACHABLE, error: -111") and returns a
// *CMError.
func RunUD(ctx context.Context, cfg UDConfig, stdout, stderr io.Writer) error {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return err
	}
	return client("udaddy", cfg.Server, stdout, stderr, func(o *out) error { return runUDClient(ctx, cfg, o) })
}

func runUDClient(ctx context.Context, cfg UDConfig, o *out) error {
	d, av, err := udDomain(ctx, cfg, cfg.Bind)
	if err != nil {
		return err
	}
	defer d.Close()
	defer av.Close()
	info := d.Info
	info.Service = 0 // the client's queue pairs: any number
	o.printf("udaddy: connecting")
	server := netip.AddrPortFrom(cfg.Server, cfg.Port)
	nodes := make([]*udNode, cfg.Connections)
	defer func() { closeUD(nodes) }()
	first := connectAll(ctx, cfg.Timeout, o, "udaddy", len(nodes), func(cctx context.Context, i int) error {
		n, err := newUDNode(d, av, &info, cfg, i)
		if err != nil {
			return err
		}
		nodes[i] = n
		if n.peer, _, err = av.InsertCM(cctx, server, nil); err != nil {
			return udError(ctx, server, cfg.Timeout, err)
		}
		n.connected, n.hasPeer = true, true
		return nil
	})
	if first != nil || cfg.Count == 0 {
		return first
	}
	o.printf("initiating data transfers")
	for _, n := range nodes {
		if err := n.postSends(cfg.Count); err != nil {
			return err
		}
	}
	o.printf("receiving data transfers")
	dctx, cancelData := context.WithTimeout(ctx, cfg.Timeout)
	defer cancelData()
	for _, n := range nodes {
		if err := n.poll(dctx, fabric.FlagRecv, cfg.Count, cfg.Server, av); err != nil {
			return err
		}
	}
	o.printf("data transfers complete")
	return nil
}

func closeUD(nodes []*udNode) {
	for _, n := range nodes {
		if n != nil {
			n.close()
		}
	}
}

// UDServer is udaddy's server (no -s), listening.
type UDServer struct {
	cfg UDConfig
	o   *out
	d   *domain
	av  *fabric.AV
	eq  *fabric.EQ
	pep *fabric.PassiveEndpoint
}

// ListenUD opens the device of cfg and listens on cfg.Port of the UDP port
// space, as run_server's rdma_bind_addr and rdma_listen do; it prints
// "udaddy: starting server" first. Serve runs the test.
func ListenUD(ctx context.Context, cfg UDConfig, stdout, stderr io.Writer) (*UDServer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &UDServer{cfg: cfg, o: &out{stdout: stdout, stderr: stderr}}
	s.o.printf("udaddy: starting server")
	var err error
	if s.d, s.av, err = udDomain(ctx, cfg, cfg.Bind); err != nil {
		s.end(err)
		return nil, err
	}
	s.eq, s.pep, err = s.d.Listen(cfg.Connections+64, nil)
	if err != nil {
		err = fmt.Errorf("udaddy: failure trying to listen on %v: %w", netip.AddrPortFrom(s.d.Info.Src, cfg.Port), err)
		s.Close()
		s.end(err)
		return nil, err
	}
	return s, nil
}

// Addr is where the server listens.
func (s *UDServer) Addr() netip.AddrPort { return s.pep.Addr() }

// Close stops listening and closes the device.
func (s *UDServer) Close() {
	if s.pep != nil {
		_ = s.pep.Close()
	}
	if s.eq != nil {
		_ = s.eq.Close()
	}
	if s.av != nil {
		_ = s.av.Close()
	}
	if s.d != nil {
		s.d.Close()
		s.d = nil
	}
}

func (s *UDServer) end(err error) {
	s.o.printf("test complete")
	s.o.printf("return status %d", status(err))
}

// Serve is run_server from rdma_listen on: it answers cfg.Connections
// requests, waits for Count datagrams on each, answers each with Count,
// and waits for its sends. It prints what udaddy prints, its last lines
// too.
func (s *UDServer) Serve(ctx context.Context) error {
	err := s.serve(ctx)
	s.end(err)
	return err
}

func (s *UDServer) serve(ctx context.Context) error {
	cfg := s.cfg
	nodes := make([]*udNode, 0, cfg.Connections)
	peers := make([]netip.Addr, 0, cfg.Connections)
	defer func() { closeUD(nodes) }()
	// connect_events: each request answered in turn.
	for len(nodes) < cfg.Connections {
		ev, err := s.eq.Read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for connection %d of %d: %w", len(nodes)+1, cfg.Connections, err)
		}
		if ev.Kind != fabric.EventConnReq {
			continue
		}
		n, err := newUDNode(s.d, s.av, ev.Info, cfg, len(nodes))
		if err == nil {
			err = n.ep.Accept(ctx, nil)
		}
		if err != nil {
			n.close()
			s.o.printf("udaddy: failing connection request")
			_ = s.pep.Reject(ev.Info, nil)
			return err
		}
		n.connected = true
		nodes = append(nodes, n)
		peers = append(peers, ev.Info.Dst.Addr())
	}
	// Later requests: udaddy has no node left for them.
	rctx, stop := context.WithCancel(ctx)
	rejecting := make(chan struct{})
	go func() {
		defer close(rejecting)
		for {
			ev, err := s.eq.Read(rctx)
			if err != nil {
				return
			}
			if ev.Kind == fabric.EventConnReq {
				s.o.printf("udaddy: failing connection request")
				_ = s.pep.Reject(ev.Info, nil)
			}
		}
	}()
	defer func() {
		stop()
		<-rejecting
	}()
	if cfg.Count == 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	s.o.printf("receiving data transfers")
	for i, n := range nodes {
		if err := n.poll(dctx, fabric.FlagRecv, cfg.Count, peers[i], s.av); err != nil {
			return err
		}
	}
	s.o.printf("sending replies")
	for _, n := range nodes {
		if err := n.postSends(cfg.Count); err != nil {
			return err
		}
	}
	for i, n := range nodes {
		if err := n.poll(dctx, fabric.FlagSend, cfg.Count, peers[i], s.av); err != nil {
			return err
		}
	}
	s.o.printf("data transfers complete")
	return nil
}
