package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric/internal/cm"
)

// MaxCMData is the most private data a connection request, accept or
// reject carries: what an RDMA-CM REQ holds behind rdma_cm's header (56
// bytes), less the length byte that libfabric's verbs provider puts in
// front of it, as ours does, so that the peer gets what was sent and not
// the message's zero padding.
const MaxCMData = cmReqPrivate - 1

// connRequest is a connection request waiting for Accept or Reject: one
// that came over RDMA-CM (rcm), or over the TCP stand-in (req).
type connRequest struct {
	rcm  *rcmConn
	sidr *sidrRequest // a DGRAM endpoint's (rdma_cm's UDP port space)
	req  *cm.Request
	peer QPInfo
}

// cmLink is an established connection's management link, RDMA-CM's or
// the TCP stand-in's.
type cmLink interface {
	Disconnect() error
	Done() <-chan struct{}
	Err() error
}

// Connection managers of a MSG endpoint (OptCM).
const (
	// CMRDMA: RDMA-CM's wire protocol, IB CM MADs on queue pair 1, as
	// rdma_cm peers (rping, perftest -R, MPI, storage) speak it. The
	// default.
	CMRDMA = iota
	// CMTCP: softfabric's own exchange over a TCP connection to the
	// passive endpoint's address and service, for peers that predate
	// RDMA-CM support.
	CMTCP
)

// The seam's opaque parameters are a QPInfo: GID, QPN, first PSN.
const qpInfoSize = 24

func marshalQPInfo(q QPInfo) []byte {
	b := make([]byte, qpInfoSize)
	gid := q.GID.As16()
	copy(b, gid[:])
	binary.BigEndian.PutUint32(b[16:], q.QPN)
	binary.BigEndian.PutUint32(b[20:], q.PSN)
	return b
}

func parseQPInfo(b []byte) (QPInfo, error) {
	if len(b) != qpInfoSize {
		return QPInfo{}, fmt.Errorf("%w: %d bytes of connection parameters", ErrInvalid, len(b))
	}
	return QPInfo{GID: netip.AddrFrom16([16]byte(b[:16])), QPN: binary.BigEndian.Uint32(b[16:]),
		PSN: binary.BigEndian.Uint32(b[20:])}, nil
}

// connectRC moves the endpoint's queue pair to RTS towards peer: the one
// connection step of Connect, Accept and ConnectQP. The path is resolved
// first, off the worker.
func (ep *Endpoint) connectRC(ctx context.Context, peer QPInfo, o QPOptions) error {
	if _, err := ep.d.dev.Path(ctx, peer.GID, ep.rcqp.QPN(), peer.QPN); err != nil {
		return fmt.Errorf("%w: no path to %v: %w", ErrAddrNotAvail, peer.GID.Unmap(), err)
	}
	return ep.d.exec(ep.w, func() error {
		return ep.d.dev.ConnectRC(ctx, ep.rcqp, ep.psn, device.Remote{QPN: peer.QPN, PSN: peer.PSN, GID: peer.GID},
			device.ConnectOptions{PathMTU: o.PathMTU, RdAtomic: o.RdAtomic, Timeout: o.Timeout, RetryCnt: o.RetryCnt,
				RNRRetry: o.RNRRetry, MinRNRTimer: o.MinRNRTimer, FlowLabel: o.FlowLabel})
	})
}

// connected marks the endpoint connected and lets its worker send what
// waited for the connection.
func (ep *Endpoint) connected() {
	ep.state.CompareAndSwap(epEnabled, epConnected)
	ep.w.kick()
}

// Connect connects a MSG endpoint to the passive endpoint at addr (its
// host's address and service), sending private data (at most MaxCMData
// bytes). It returns when the connection is up, and posts EventConnected
// (with the peer's private data) to the bound EQ; a rejection returns an
// error matching ErrRejected and posts EventRejected.
func (ep *Endpoint) Connect(ctx context.Context, addr netip.AddrPort, private []byte) error {
	if ep.typ != EPMsg {
		return fmt.Errorf("connecting: %w: a %v endpoint", ErrNotSupported, ep.typ)
	}
	if ep.state.Load() != epEnabled || ep.info.req != nil {
		return fmt.Errorf("connecting: %w: enable a fresh endpoint first", ErrInvalid)
	}
	if len(private) > MaxCMData {
		return fmt.Errorf("connecting: %w: %d bytes of private data", ErrInvalid, len(private))
	}
	if ep.cmKind == CMRDMA {
		return ep.connectCM(ctx, addr, private)
	}
	conn, reply, err := cm.Dial(ctx, cmDialAddr(ep.d, addr), marshalQPInfo(ep.QPInfo()), private)
	if errors.Is(err, cm.ErrRejected) {
		var rj *cm.RejectError
		errors.As(err, &rj)
		var data []byte
		if rj != nil {
			data = rj.Data
		}
		ep.event(Event{Kind: EventRejected, EP: ep, Data: data, Err: ErrRejected})
		return fmt.Errorf("connecting to %v: %w", addr, ErrRejected)
	}
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	peer, err := parseQPInfo(reply.Params)
	if err == nil {
		err = ep.connectRC(ctx, peer, ep.rcOpts)
	}
	if err != nil {
		_ = conn.Disconnect()
		return fmt.Errorf("connecting to %v: %w", addr, err)
	}
	ep.established(conn, reply.PrivateData)
	return nil
}

// Accept accepts the connection request the endpoint was opened with
// (Info from an EventConnReq), replying with private data. It returns
// when the requester confirmed, and posts EventConnected. A DGRAM
// endpoint answers a SIDR request (sidr.go) with its queue pair and
// Q_Key, and returns at once: there is nothing to confirm.
func (ep *Endpoint) Accept(ctx context.Context, private []byte) error {
	r := ep.info.req
	if ep.typ == EPDgram && r != nil && r.sidr != nil {
		if ep.state.Load() != epEnabled {
			return fmt.Errorf("accepting: %w: enable the endpoint first", ErrInvalid)
		}
		return ep.acceptSIDR(r.sidr, private)
	}
	if ep.typ != EPMsg || r == nil {
		return fmt.Errorf("accepting: %w: the endpoint was not opened from a connection request", ErrInvalid)
	}
	if ep.state.Load() != epEnabled {
		return fmt.Errorf("accepting: %w: enable the endpoint first", ErrInvalid)
	}
	if len(private) > MaxCMData {
		return fmt.Errorf("accepting: %w: %d bytes of private data", ErrInvalid, len(private))
	}
	if r.rcm != nil {
		return ep.acceptCM(ctx, r, private)
	}
	if err := ep.connectRC(ctx, r.peer, ep.rcOpts); err != nil {
		_ = r.req.Reject(nil)
		return fmt.Errorf("accepting: %w", err)
	}
	conn, err := r.req.Accept(ctx, marshalQPInfo(ep.QPInfo()), private)
	if err != nil {
		return fmt.Errorf("accepting: %w", err)
	}
	ep.established(conn, nil)
	return nil
}

// established records an up connection and watches for its end.
func (ep *Endpoint) established(conn cmLink, private []byte) {
	ep.conn = conn
	ep.connected()
	ep.event(Event{Kind: EventConnected, EP: ep, Data: private})
	go func() {
		<-conn.Done()
		if ep.state.CompareAndSwap(epConnected, epShutdown) {
			ep.event(Event{Kind: EventShutdown, EP: ep, Err: conn.Err()})
		}
	}()
}

// Shutdown disconnects: the peer gets EventShutdown; posted operations
// complete (flushed, if the transport had not finished them).
func (ep *Endpoint) Shutdown() error {
	if ep.conn == nil {
		return fmt.Errorf("shutting down: %w", ErrNotConnected)
	}
	ep.state.CompareAndSwap(epConnected, epShutdown)
	return ep.conn.Disconnect()
}

// event reports e on the endpoint's EQ, never blocking the endpoint.
func (ep *Endpoint) event(e Event) {
	if ep.eq != nil {
		ep.eq.offer(e)
	}
}

// PassiveEndpoint listens for connection requests to MSG endpoints, or
// SIDR requests to DGRAM endpoints (rdma_cm's UDP port space, sidr.go):
// each arrives on its EQ as an EventConnReq.
type PassiveEndpoint struct {
	f    *Fabric
	info Info
	eq   *EQ
	l    *cm.Listener
	// cms is the connection manager of the domain on the device that
	// listens for RDMA-CM requests to service, if any.
	cms     *cmService
	service uint64
	cancel  context.CancelFunc
	done    chan struct{}
	refs    refs
	memKey  netip.AddrPort
	// opened is the domain held for passive endpoints that this one
	// listens through (no domain of the application's was open on the
	// device: Fabric.listenDomain), given back when it closes.
	opened *Domain
}

// PassiveEndpoint opens a passive endpoint for info (a MSG offer, or a
// DGRAM one for SIDR; its Service is the port it listens on,
// DefaultService if 0).
func (f *Fabric) PassiveEndpoint(info *Info) (*PassiveEndpoint, error) {
	if info == nil || info.EP.Type != EPMsg && info.EP.Type != EPDgram {
		return nil, fmt.Errorf("opening a passive endpoint: %w: needs a MSG or DGRAM offer", ErrInvalid)
	}
	if err := f.refs.add(); err != nil {
		return nil, err
	}
	p := &PassiveEndpoint{f: f, info: *info}
	if p.info.Service == 0 {
		p.info.Service = DefaultService
	}
	return p, nil
}

// Bind attaches the EQ that receives the connection requests.
func (p *PassiveEndpoint) Bind(eq *EQ) error {
	if p.eq != nil {
		return fmt.Errorf("binding: %w: an EQ is bound already", ErrInvalid)
	}
	if err := eq.refs.add(); err != nil {
		return err
	}
	p.eq = eq
	return nil
}

// Listen starts accepting connection requests.
func (p *PassiveEndpoint) Listen() error {
	if p.eq == nil {
		return fmt.Errorf("listening: %w: no EQ bound", ErrInvalid)
	}
	if p.l != nil || p.cms != nil {
		return fmt.Errorf("listening: %w: already listening", ErrInvalid)
	}
	at := netip.AddrPortFrom(p.info.Src, p.info.Service)
	if p.info.EP.Type == EPDgram {
		return p.listenSIDR(at)
	}
	l, key, err := cmListen(p.info.Domain.Name, at)
	if err != nil {
		return fmt.Errorf("listening on %v: %w", at, err)
	}
	p.l, p.memKey = l, key
	if err := p.listenCM(mad.ServiceID(mad.PortSpaceTCP, p.info.Service)); err != nil {
		_ = l.Close()
		cmUnlisten(key)
		p.l = nil
		return fmt.Errorf("listening on %v: %w", at, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go p.loop(ctx)
	return nil
}

func (p *PassiveEndpoint) loop(ctx context.Context) {
	defer close(p.done)
	for {
		req, err := p.l.Next(ctx)
		if err != nil {
			return
		}
		peer, err := parseQPInfo(req.Params())
		if err != nil {
			_ = req.Reject(nil)
			continue
		}
		info := p.info
		info.Service = 0
		info.Dst = req.Peer()
		info.req = &connRequest{req: req, peer: peer}
		p.eq.post(ctx, Event{Kind: EventConnReq, Info: &info, Data: req.PrivateData()})
	}
}

// Addr is where the passive endpoint listens.
func (p *PassiveEndpoint) Addr() netip.AddrPort {
	return netip.AddrPortFrom(p.info.Src, p.info.Service)
}

// Reject rejects a connection request (the Info of its EventConnReq),
// with private data for the requester.
func (p *PassiveEndpoint) Reject(info *Info, private []byte) error {
	if info == nil || info.req == nil {
		return fmt.Errorf("rejecting: %w: not a connection request", ErrInvalid)
	}
	if len(private) > MaxCMData {
		return fmt.Errorf("rejecting: %w: %d bytes of private data", ErrInvalid, len(private))
	}
	if info.req.rcm != nil {
		return info.req.rcm.reject(private)
	}
	if info.req.sidr != nil {
		return info.req.sidr.reply(ibcm.SIDRReplyParams{Status: mad.SIDRReject, PrivateData: framePrivate(private)})
	}
	return info.req.req.Reject(private)
}

// Close stops listening. Closing twice is not an error.
func (p *PassiveEndpoint) Close() error {
	first, err := p.refs.closing()
	if !first {
		return err
	}
	if p.l != nil {
		p.cancel()
		err = p.l.Close()
		<-p.done
		cmUnlisten(p.memKey)
	}
	if p.cms != nil {
		p.cms.unlisten(p.service)
	}
	if p.opened != nil {
		if cerr := p.f.release(p.opened); err == nil {
			err = cerr
		}
	}
	if p.eq != nil {
		p.eq.refs.done()
	}
	p.f.refs.done()
	return err
}

// listenCM listens for RDMA-CM requests (or SIDR's) to service through
// the connection manager of a domain on the device: the application's,
// or one opened for the purpose (Fabric.listenDomain).
func (p *PassiveEndpoint) listenCM(service uint64) error {
	d, opened, err := p.f.listenDomain(p)
	if err != nil {
		return err
	}
	s, err := d.cm()
	if err == nil {
		err = s.listen(p, service)
	}
	if err != nil {
		if opened {
			_ = p.f.release(d)
		}
		return err
	}
	if opened {
		p.opened = d
	}
	p.cms, p.service = s, service
	return nil
}

// cmListen listens for connection requests to at. In-process devices
// listen on loopback and record where (their addresses are not the
// host's).
func cmListen(domain string, at netip.AddrPort) (*cm.Listener, netip.AddrPort, error) {
	if !strings.HasPrefix(domain, memPrefix) {
		l, err := cm.Listen(at)
		return l, netip.AddrPort{}, err
	}
	memSwitch()
	memNet.mu.Lock()
	defer memNet.mu.Unlock()
	if _, ok := memNet.listeners[at]; ok {
		return nil, netip.AddrPort{}, fmt.Errorf("%w: %v is in use", ErrBusy, at)
	}
	l, err := cm.Listen(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0))
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	memNet.listeners[at] = l.Addr()
	return l, at, nil
}

func cmUnlisten(key netip.AddrPort) {
	if !key.IsValid() {
		return
	}
	memNet.mu.Lock()
	delete(memNet.listeners, key)
	memNet.mu.Unlock()
}

// cmDialAddr is where a connection request to addr goes.
func cmDialAddr(d *Domain, addr netip.AddrPort) netip.AddrPort {
	if !strings.HasPrefix(d.info.Domain.Name, memPrefix) {
		return addr
	}
	memNet.mu.Lock()
	defer memNet.mu.Unlock()
	if a, ok := memNet.listeners[netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())]; ok {
		return a
	}
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 1) // nobody: refused
}

// qpnErr turns a taken well-known queue pair number into ErrBusy.
func qpnErr(err error) error {
	if errors.Is(err, device.ErrQPNInUse) {
		return fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return err
}
