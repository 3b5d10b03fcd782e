package fabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// RDMA-CM, as rdma_cm peers speak it: IB CM MADs on queue pair 1
// (dataplane/ibcm over the domain's GSI), the service ID from rdma_cm's
// TCP port space and the port, and rdma_cm's header (the IP addresses and
// the requester's port) at the head of the REQ's private data.
//
// A domain runs one connection manager, started by the first MSG
// endpoint or passive endpoint that needs it: a goroutine that owns the
// ibcm agent (which is not safe for concurrent use) and feeds it the MADs
// the worker received, the API's calls and its timers. Calls reach it as
// closures on a channel; connection events go back to the goroutine
// waiting on that connection, and requests to the passive endpoint
// listening on their service.

const (
	// cmReqPrivate is the most private data a connection request carries
	// behind rdma_cm's header.
	cmReqPrivate = mad.REQPrivateDataSize - mad.CMAHeaderSize
	// cmDisconnectWait bounds how long Shutdown waits for the peer's DREP:
	// long enough for three DREQs (at 0, 1 and 3 s), since a process that
	// exits after Shutdown takes the retransmissions with it, and a peer
	// that never hears the DREQ (rping's server) waits for ever.
	cmDisconnectWait = 4 * time.Second
	// cmRdAtomic is the RDMA reads and atomics in flight a MSG endpoint
	// offers each way (its responder resources and initiator depth).
	cmRdAtomic = 16
	// cmBacklog bounds the requests a listener holds unanswered.
	cmBacklog = 128
	// cmIdlePoll is how often an idle manual-progress domain's connection
	// manager looks at QP1.
	cmIdlePoll = 20 * time.Millisecond
)

// cmService is a domain's connection manager.
type cmService struct {
	d     *Domain
	g     *gsi
	agent *ibcm.Agent
	epoch time.Time
	calls chan func()
	stop  chan struct{}
	done  chan struct{}

	// Owned by the service's goroutine.
	conns     map[ibcm.ID]*rcmConn
	listeners map[uint64]*PassiveEndpoint
	ahs       map[netip.Addr]cmPath
	in        []gsiMAD
}

// cmPath is a peer's resolved GSI address, or the failure to resolve it,
// until a time (the service's clock).
type cmPath struct {
	ah    *verbs.AddressHandle // nil: resolution failed
	until int64
}

// How long a resolved peer, and a failed resolution, are remembered. The
// failures keep a flood of requests from addresses nobody answers for
// from stalling the service a second each.
const (
	cmPathTTL   = int64(30 * time.Second)
	cmNoPathTTL = int64(5 * time.Second)
	cmMaxPaths  = 1024
)

// rcmConn is one connection's RDMA-CM side.
type rcmConn struct {
	s  *cmService
	id ibcm.ID
	// ev carries the handshake's events to the goroutine waiting for them
	// (Connect, Accept), copied out of the MAD.
	ev   chan ibcm.Event
	done chan struct{}
	once sync.Once
	err  error
	// req is the request, on the passive side.
	req mad.REQFields
}

// cm returns the domain's connection manager, starting it.
func (d *Domain) cm() (*cmService, error) {
	d.cmMu.Lock()
	defer d.cmMu.Unlock()
	if d.cms != nil {
		return d.cms, nil
	}
	if err := d.goneErr(); err != nil {
		return nil, err
	}
	g, err := d.openGSI()
	if err != nil {
		return nil, err
	}
	s := &cmService{d: d, g: g, epoch: time.Now(), calls: make(chan func()), stop: make(chan struct{}),
		done: make(chan struct{}), conns: map[ibcm.ID]*rcmConn{}, listeners: map[uint64]*PassiveEndpoint{},
		ahs: map[netip.Addr]cmPath{}}
	cfg := ibcm.Config{LocalGUID: nodeGUID(d.dev.MAC()), Send: s.send, Event: s.event}
	if gid, ok := d.dev.GID(d.info.Src); ok {
		cfg.LocalGID = gid.As16()
	}
	if p, ok := d.dev.CommIDPrefix(); ok {
		cfg.Rand = prefixed{prefix: p}
	}
	s.agent = ibcm.New(cfg)
	go s.run()
	d.cms = s
	return s, nil
}

// closeCM stops the domain's connection manager: its connections end
// (their endpoints see ErrClosed), its queue pair goes.
func (d *Domain) closeCM() {
	d.cmMu.Lock()
	s := d.cms
	d.cms = nil
	d.cmMu.Unlock()
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
	for _, c := range s.conns {
		c.end(ErrClosed)
	}
	s.g.close()
}

// nodeGUID is the CA GUID made from the MAC as an EUI-64, as rxe makes
// its node GUID (addrconf_addr_eui48).
func nodeGUID(mac [6]byte) uint64 {
	id := wire.EUI64(mac)
	return binary.BigEndian.Uint64(id[:])
}

// prefixed draws random numbers whose bits 16–31 are a daemon's number
// for this application, so that its communication IDs name it
// (device.ServiceRegistrar).
type prefixed struct{ prefix uint32 }

func (p prefixed) Uint64() uint64 {
	v := rand.Uint64()
	return v&^0xffff0000 | uint64(p.prefix&0xffff)<<16
}

func (s *cmService) now() int64 { return int64(time.Since(s.epoch)) }

// run is the service's goroutine.
func (s *cmService) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// With manual progress nobody may be driving worker 0 while the
	// application waits for a connection, or does not use the domain at
	// all: the service drives it itself, every millisecond while it has
	// listeners or connections, else every cmIdlePoll (a request for a
	// service nobody listens on is still rejected, a little later).
	var poll *time.Ticker
	period := cmIdlePoll
	if s.d.manual {
		poll = time.NewTicker(period)
		defer poll.Stop()
	}
	for {
		now := s.now()
		if next := s.agent.Next(now); next != ibcm.NoDeadline {
			timer.Reset(time.Duration(max(next-now, 0)))
		} else {
			timer.Reset(time.Hour)
		}
		var tick <-chan time.Time
		if poll != nil {
			want := cmIdlePoll
			if len(s.listeners) > 0 || len(s.conns) > 0 {
				want = time.Millisecond
			}
			if want != period {
				period = want
				poll.Reset(period)
			}
			tick = poll.C
		}
		select {
		case <-s.g.ready:
			s.in = s.g.receive(s.in[:0])
			for i := range s.in {
				s.agent.Receive(s.now(), ibcm.PeerFromAddr(s.in[i].from), s.in[i].mad[:])
			}
		case f := <-s.calls:
			f()
		case <-timer.C:
			s.agent.Tick(s.now())
		case <-tick:
			s.d.workers[0].progress()
		case <-s.stop:
			return
		}
	}
}

// do runs f on the service's goroutine and returns its error.
func (s *cmService) do(f func() error) error {
	r := make(chan error, 1)
	select {
	case s.calls <- func() { r <- f() }:
	case <-s.done:
		return ErrClosed
	}
	select {
	case err := <-r:
		return err
	case <-s.done:
		return ErrClosed
	}
}

// send hands a MAD to the GSI (the agent's Send callback).
func (s *cmService) send(to ibcm.Peer, m []byte) {
	a, now := to.Addr(), s.now()
	p, ok := s.ahs[a]
	if !ok || now >= p.until {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ah, err := s.g.addressHandle(ctx, a)
		cancel()
		p = cmPath{ah: ah, until: now + cmPathTTL}
		if err != nil {
			p = cmPath{until: now + cmNoPathTTL}
		}
		if len(s.ahs) >= cmMaxPaths {
			clear(s.ahs)
		}
		s.ahs[a] = p
	}
	if p.ah != nil {
		s.g.send(p.ah, m)
	} // else: the agent sends again; the peer's own retries too
}

// event takes the agent's events (on the service's goroutine).
func (s *cmService) event(e ibcm.Event) {
	switch e.Type {
	case ibcm.EventRequest:
		s.request(e)
		return
	case ibcm.EventSIDRRequest:
		s.sidrRequest(e)
		return
	}
	c := s.conns[e.ID]
	if c == nil {
		return
	}
	switch e.Type {
	case ibcm.EventReply, ibcm.EventEstablished, ibcm.EventRejected, ibcm.EventTimeout, ibcm.EventSIDRReply:
		select {
		case c.ev <- ownEvent(e):
		default:
		}
		if e.Type == ibcm.EventRejected {
			c.end(ErrRejected)
		} else if e.Type == ibcm.EventTimeout {
			c.end(ErrTimedOut)
		}
	case ibcm.EventDisconnectRequest, ibcm.EventDisconnected:
		c.end(nil)
	}
	if e.Freed || e.Type == ibcm.EventTimeWaitExit {
		delete(s.conns, e.ID)
	}
}

// ownEvent copies what e holds of the MAD.
func ownEvent(e ibcm.Event) ibcm.Event {
	e.Request.PrivateData = slices.Clone(e.Request.PrivateData)
	e.Reply.PrivateData = slices.Clone(e.Reply.PrivateData)
	e.Reject.PrivateData = slices.Clone(e.Reject.PrivateData)
	e.PrivateData = slices.Clone(e.PrivateData)
	e.SIDRReply.PrivateData = slices.Clone(e.SIDRReply.PrivateData)
	e.SIDRReply.Info = slices.Clone(e.SIDRReply.Info)
	e.SIDRRequest.PrivateData = slices.Clone(e.SIDRRequest.PrivateData)
	return e
}

// request hands a connection request to the passive endpoint listening
// on its service. The agent only raises it for a service we listen on.
func (s *cmService) request(e ibcm.Event) {
	p := s.listeners[e.Request.ServiceID]
	h := mad.CMAHeader(e.Request.PrivateData)
	if p == nil || p.info.EP.Type != EPMsg || !h.IsValid() || h.Version() != 0 {
		_ = s.agent.Reject(s.now(), e.ID, mad.RejectConsumerDefined, nil)
		return
	}
	// As rdma_cm does (CMA_CM_MRA_SETTING): an MRA recorded now goes out
	// if the requester repeats itself while the application decides.
	_ = s.agent.SendMRA(s.now(), e.ID, ibcm.MRADelay|24)
	e = ownEvent(e)
	c := &rcmConn{s: s, id: e.ID, ev: make(chan ibcm.Event, 4), done: make(chan struct{}), req: e.Request}
	s.conns[e.ID] = c
	src := netip.AddrPortFrom(h.Src(), h.Port())
	// The requester's GID, as its REQ names it (the MAD's source when
	// it does not).
	peer := QPInfo{GID: netip.AddrFrom16(e.Request.Primary.LocalGID), QPN: e.Request.LocalQPN, PSN: e.Request.StartingPSN}
	if peer.GID.IsUnspecified() {
		peer.GID = netip.AddrFrom16(e.Peer.GID)
	}
	info := p.info
	info.Service = 0
	info.Dst = src
	info.req = &connRequest{rcm: c, peer: peer}
	p.eq.offer(Event{Kind: EventConnReq, Info: &info, Data: unframePrivate(e.Request.PrivateData[mad.CMAHeaderSize:])})
}

// end records that the connection is over.
func (c *rcmConn) end(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}

// Done is closed when the connection ended.
func (c *rcmConn) Done() <-chan struct{} { return c.done }

// Err is why it ended: nil for a disconnect.
func (c *rcmConn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Disconnect sends a DREQ and waits (briefly) for the peer's DREP.
func (c *rcmConn) Disconnect() error {
	err := c.s.do(func() error {
		if st, ok := c.s.agent.State(c.id); !ok || st != ibcm.StateEstablished {
			return nil
		}
		return c.s.agent.Disconnect(c.s.now(), c.id, nil)
	})
	if err != nil {
		c.end(nil)
		return err
	}
	select {
	case <-c.done:
	case <-time.After(cmDisconnectWait):
		c.end(nil)
	}
	return nil
}

// wait waits for the next handshake event of the connection.
func (c *rcmConn) wait(ctx context.Context) (ibcm.Event, error) {
	select {
	case e := <-c.ev:
		return e, nil
	case <-ctx.Done():
		c.abandon()
		return ibcm.Event{}, ctx.Err()
	case <-c.s.done:
		return ibcm.Event{}, ErrClosed
	}
}

// abandon gives up a handshake the caller stopped waiting for.
func (c *rcmConn) abandon() {
	_ = c.s.do(func() error {
		if st, ok := c.s.agent.State(c.id); ok {
			if st == ibcm.StateEstablished {
				return c.s.agent.Disconnect(c.s.now(), c.id, nil)
			}
			if c.s.agent.Reject(c.s.now(), c.id, mad.RejectConsumerDefined, nil) != nil {
				_ = c.s.agent.Destroy(c.s.now(), c.id)
			}
		}
		delete(c.s.conns, c.id)
		return nil
	})
	c.end(context.Canceled)
}

// reject refuses the request or reply, with private data.
func (c *rcmConn) reject(private []byte) error {
	err := c.s.do(func() error {
		delete(c.s.conns, c.id)
		return c.s.agent.Reject(c.s.now(), c.id, mad.RejectConsumerDefined, framePrivate(private))
	})
	c.end(ErrRejected)
	return err
}

// listen routes requests for p's service to it.
func (s *cmService) listen(p *PassiveEndpoint, service uint64) error {
	if err := s.d.dev.Listen(service); err != nil {
		return err
	}
	err := s.do(func() error {
		if s.listeners[service] != nil {
			return fmt.Errorf("%w: service %#x has a listener", ErrBusy, service)
		}
		if err := s.agent.Listen(service, cmBacklog); err != nil {
			return err
		}
		s.listeners[service] = p
		return nil
	})
	if err != nil {
		_ = s.d.dev.Unlisten(service)
	}
	return err
}

func (s *cmService) unlisten(service uint64) {
	_ = s.do(func() error {
		delete(s.listeners, service)
		return s.agent.Unlisten(service)
	})
	_ = s.d.dev.Unlisten(service)
}

// framePrivate puts the length byte in front of private data.
func framePrivate(b []byte) []byte { return append([]byte{byte(len(b))}, b...) }

// unframePrivate takes private data out of a message's private-data
// field: behind its length byte when the byte fits, whole when it does
// not (a peer, such as rping, that sends its own bytes or none: then the
// application sees the field's zero padding, as rdma_cm's do).
func unframePrivate(b []byte) []byte {
	if len(b) > 0 && int(b[0]) < len(b) {
		return b[1 : 1+int(b[0])]
	}
	return b
}

// mtuCode is the IBTA code of a path MTU in bytes.
func mtuCode(n int) mad.MTU {
	for c := mad.MTU4096; c > mad.MTU256; c-- {
		if c.Bytes() <= n {
			return c
		}
	}
	return mad.MTU256
}

// rdAtomic clamps a peer's read/atomic depth to ours, at least 1.
func rdAtomic(peer uint8) uint8 { return max(1, min(peer, cmRdAtomic)) }

// cmLocal is the local address rdma_cm's header names, and its GID:
// src, or the device's first address when src is unspecified.
func (d *Domain) cmLocal(src netip.Addr) (netip.Addr, netip.Addr, error) {
	if !src.IsValid() {
		if g, ok := d.dev.GID(netip.Addr{}); ok {
			src = g.Unmap()
		}
	}
	gid, ok := d.dev.GID(src)
	if !ok {
		return src, gid, fmt.Errorf("%w: no GID for %v", ErrAddrNotAvail, src)
	}
	return src, gid, nil
}

// reach resolves the peer's GSI first, as rdma_resolve_addr does: a host
// nobody has fails here, not after the request's retries. (The
// in-process switch resolves any address, for AVs that name absent
// hosts; its ports are its neighbour table.)
func (s *cmService) reach(ctx context.Context, dst netip.Addr) error {
	if _, err := s.g.addressHandle(ctx, dst); err != nil {
		return fmt.Errorf("%w: %w", ErrAddrNotAvail, err)
	}
	if strings.HasPrefix(s.d.info.Domain.Name, memPrefix) && !memSwitch().Has(memMAC(dst)) {
		return fmt.Errorf("%w: no such host on the in-process switch", ErrAddrNotAvail)
	}
	return nil
}

// open starts an exchange on the service's goroutine (start: the agent's
// Connect or ResolveSIDR) and returns its connection, whose events the
// caller waits for.
func (s *cmService) open(start func(now int64) (ibcm.ID, error)) (*rcmConn, error) {
	c := &rcmConn{s: s, ev: make(chan ibcm.Event, 4), done: make(chan struct{})}
	err := s.do(func() error {
		id, err := start(s.now())
		if err == nil {
			c.id = id
			s.conns[id] = c
		}
		return err
	})
	return c, err
}

// connectCM connects ep to the rdma_cm listener at addr.
func (ep *Endpoint) connectCM(ctx context.Context, addr netip.AddrPort, private []byte) error {
	s, err := ep.d.cm()
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	dst := addr.Addr().Unmap()
	src, lgid, err := ep.d.cmLocal(ep.info.Src)
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	priv := make([]byte, mad.CMAHeaderSize+1+len(private))
	h := mad.CMAHeader(priv)
	port := uint16(ep.rcqp.QPN()) // rdma_cm's is a bound port; any will do
	h.Encode(&mad.CMAHeaderFields{SrcPort: port, Src: src, Dst: dst})
	copy(priv[mad.CMAHeaderSize:], framePrivate(private))
	o := ep.rcOpts
	p := ibcm.ConnectParams{
		ServiceID: mad.ServiceID(mad.PortSpaceTCP, addr.Port()), RemoteGID: netip.AddrFrom16(dst.As16()).As16(),
		LocalGID: lgid.As16(), QPN: ep.rcqp.QPN(), StartingPSN: ep.psn, Transport: mad.TransportRC,
		ResponderResources: cmRdAtomic, InitiatorDepth: cmRdAtomic, RetryCount: 7, RNRRetryCount: 7,
		PathMTU: mtuCode(ep.d.ActiveMTU()), PrivateData: priv,
		// As rdma_cm: the flow label (and so both sides' UDP source port)
		// from the ports, the same each way.
		FlowLabel: ibcm.RDMACMFlowLabel(port, addr.Port()),
	}
	if o.RetryCnt != 0 {
		p.RetryCount = o.RetryCnt
	}
	if err := s.reach(ctx, dst); err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	c, err := s.open(func(now int64) (ibcm.ID, error) { return s.agent.Connect(now, p) })
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	e, err := c.wait(ctx)
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	switch e.Type {
	case ibcm.EventRejected:
		ep.event(Event{Kind: EventRejected, EP: ep, Data: unframePrivate(e.Reject.PrivateData), Err: ErrRejected})
		return fmt.Errorf("connecting to %v: %w: %v", addr, ErrRejected, e.Reject.Reason)
	case ibcm.EventTimeout:
		ep.event(Event{Kind: EventRejected, EP: ep, Err: ErrTimedOut})
		return fmt.Errorf("connecting to %v: %w: no answer to the connection request", addr, ErrTimedOut)
	case ibcm.EventReply:
	default:
		c.abandon()
		return fmt.Errorf("connecting to %v: %w: unexpected %v", addr, ErrInvalid, e.Type)
	}
	r := e.Reply
	o.PathMTU = p.PathMTU.Bytes()
	o.RdAtomic = rdAtomic(r.ResponderResources)
	o.FlowLabel = p.FlowLabel
	if o.RNRRetry == 0 {
		o.RNRRetry = p.RNRRetryCount
	}
	// Each side advertises the PSN it receives from, and sends from the
	// one its peer advertised, as Linux's CM and rdma_cm set up their
	// queue pairs (cm_rep_handler's sq_psn, rdma_init_qp_attr's rq_psn).
	peer := QPInfo{GID: netip.AddrFrom16(dst.As16()), QPN: r.LocalQPN, PSN: ep.psn}
	ep.psn = r.StartingPSN
	if err := ep.connectRC(ctx, peer, o); err != nil {
		_ = c.reject(nil)
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	if err := s.do(func() error { return s.agent.SendRTU(s.now(), c.id, nil) }); err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	ep.established(c, unframePrivate(r.PrivateData))
	return nil
}

// acceptCM accepts an rdma_cm connection request.
func (ep *Endpoint) acceptCM(ctx context.Context, r *connRequest, private []byte) error {
	c := r.rcm
	q := c.req
	o := ep.rcOpts
	o.PathMTU = min(q.PathMTU.Bytes(), ep.d.ActiveMTU())
	o.RdAtomic = rdAtomic(q.ResponderResources)
	o.FlowLabel = q.Primary.FlowLabel
	if o.RetryCnt == 0 {
		o.RetryCnt = q.RetryCount
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = q.RNRRetryCount
	}
	// We receive from the PSN the REP advertises and send from the REQ's
	// (cm_req_handler's sq_psn).
	adv := ep.psn
	peer := r.peer
	peer.PSN, ep.psn = adv, q.StartingPSN
	if err := ep.connectRC(ctx, peer, o); err != nil {
		_ = c.reject(nil)
		return fmt.Errorf("accepting: %w", err)
	}
	s := c.s
	rep := ibcm.RepParams{QPN: ep.rcqp.QPN(), StartingPSN: adv, ResponderResources: rdAtomic(q.InitiatorDepth),
		InitiatorDepth: rdAtomic(q.ResponderResources), RNRRetryCount: 7, PrivateData: framePrivate(private)}
	if err := s.do(func() error { return s.agent.Accept(s.now(), c.id, rep) }); err != nil {
		return fmt.Errorf("accepting: %w", err)
	}
	e, err := c.wait(ctx)
	if err != nil {
		return fmt.Errorf("accepting: %w", err)
	}
	switch e.Type {
	case ibcm.EventEstablished:
	case ibcm.EventRejected:
		return fmt.Errorf("accepting: %w: %v", ErrRejected, e.Reject.Reason)
	case ibcm.EventTimeout:
		return fmt.Errorf("accepting: %w: no RTU", ErrTimedOut)
	default:
		return fmt.Errorf("accepting: %w: unexpected %v", ErrInvalid, e.Type)
	}
	ep.established(c, nil)
	return nil
}
