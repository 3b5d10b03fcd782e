package fabric

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
)

// DGRAM endpoints and rdma_cm's UDP port space: service ID resolution
// (SIDR, dataplane/ibcm) on the domain's connection manager. rdma_cm's UD
// users (udaddy, and anything on RDMA_PS_UDP) resolve a peer's IP address
// and port to the QPN and Q_Key of the UD queue pair behind it; here
//
//   - a passive endpoint opened for a DGRAM offer listens on the port (the
//     service ID mad.ServiceID(mad.PortSpaceUDP, port)): each SIDR_REQ
//     arrives on its EQ as an EventConnReq, whose Info opens the DGRAM
//     endpoint that Accept offers the requester (its QPN and Q_Key in the
//     SIDR_REP), or PassiveEndpoint.Reject refuses;
//   - AV.InsertCM sends a SIDR_REQ for an address and port and inserts
//     the queue pair the answer names, sends to which use the answer's
//     Q_Key.
//
// As rdma_cm, the SIDR_REQ's private data starts with its header (the IP
// addresses and the requester's port) and the SIDR_REP's is the
// accepter's own.

// cmSIDRPrivate is the most private data a SIDR request carries behind
// rdma_cm's header and the length byte.
const cmSIDRPrivate = mad.SIDRREQPrivateDataSize - mad.CMAHeaderSize - 1

// sidrRequest is a SIDR request waiting for Accept or Reject.
type sidrRequest struct {
	s  *cmService
	id ibcm.ID
}

// sidrRequest hands a SIDR request to the passive endpoint listening on
// its service (on the service's goroutine).
func (s *cmService) sidrRequest(e ibcm.Event) {
	p := s.listeners[e.SIDRRequest.ServiceID]
	h := mad.CMAHeader(e.SIDRRequest.PrivateData)
	if p == nil || p.info.EP.Type != EPDgram || !h.IsValid() || h.Version() != mad.CMAVersion {
		// What rdma_cm does with a request it cannot take (cma_ib_req_handler
		// fails, cm_destroy_id refuses).
		_ = s.agent.SIDRReply(s.now(), e.ID, ibcm.SIDRReplyParams{Status: mad.SIDRReject})
		return
	}
	info := p.info
	info.Service = 0
	info.Dst = netip.AddrPortFrom(h.Src(), h.Port())
	info.req = &connRequest{sidr: &sidrRequest{s: s, id: e.ID}}
	data := unframePrivate(e.SIDRRequest.PrivateData[mad.CMAHeaderSize:])
	p.eq.offer(Event{Kind: EventConnReq, Info: &info, Data: append([]byte(nil), data...)})
}

// reply answers the request.
func (r *sidrRequest) reply(p ibcm.SIDRReplyParams) error {
	return r.s.do(func() error { return r.s.agent.SIDRReply(r.s.now(), r.id, p) })
}

// acceptSIDR answers the SIDR request ep was opened from with ep's queue
// pair and Q_Key.
func (ep *Endpoint) acceptSIDR(r *sidrRequest, private []byte) error {
	if len(private) > mad.SIDRREPPrivateDataSize-1 {
		return fmt.Errorf("accepting: %w: %d bytes of private data", ErrInvalid, len(private))
	}
	// The receives posted so far reach the queue pair before the answer
	// leaves, as ibv_post_recv's have before rdma_accept: the requester
	// may send as soon as it has the answer, and UD drops what finds no
	// receive.
	_ = ep.d.exec(ep.w, func() error {
		ep.submitRx()
		return nil
	})
	err := r.reply(ibcm.SIDRReplyParams{Status: mad.SIDRSuccess, QPN: ep.udqp.QPN(), QKey: ep.qkey, PrivateData: framePrivate(private)})
	if err != nil {
		return fmt.Errorf("accepting: %w", err)
	}
	return nil
}

// InsertCM resolves the rdma_cm UD service at addr (its host's address
// and port) by SIDR, as rdma_connect does for a UDP-port-space ID, and
// inserts the queue pair it names; sends to it use the Q_Key it named.
// private (at most 179 bytes) goes to the peer behind rdma_cm's header;
// the peer's private data comes back. It fails with ErrRejected (wrapped)
// when the peer refuses or nothing listens on the port, ErrTimedOut when
// nobody answers, and ErrAddrNotAvail when the host cannot be reached.
func (a *AV) InsertCM(ctx context.Context, addr netip.AddrPort, private []byte) (Addr, []byte, error) {
	if !addr.Addr().IsValid() || len(private) > cmSIDRPrivate {
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w", addr, ErrInvalid)
	}
	d := a.d
	s, err := d.cm()
	if err != nil {
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w", addr, err)
	}
	dst := addr.Addr().Unmap()
	src, _, err := d.cmLocal(d.info.Src)
	if err == nil {
		err = s.reach(ctx, dst)
	}
	if err != nil {
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w", addr, err)
	}
	priv := make([]byte, mad.CMAHeaderSize, mad.CMAHeaderSize+1+len(private))
	// rdma_cm's source port is the ID's bound port, an ephemeral one.
	mad.CMAHeader(priv).Encode(&mad.CMAHeaderFields{SrcPort: uint16(32768 + rand.N(28232)), Src: src, Dst: dst})
	priv = append(priv, framePrivate(private)...)
	p := ibcm.SIDRParams{ServiceID: mad.ServiceID(mad.PortSpaceUDP, addr.Port()), RemoteGID: dst.As16(), PrivateData: priv}
	c, err := s.open(func(now int64) (ibcm.ID, error) { return s.agent.ResolveSIDR(now, p) })
	if err != nil {
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w", addr, err)
	}
	e, err := c.wait(ctx)
	if err != nil {
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w", addr, err)
	}
	switch {
	case e.Type == ibcm.EventTimeout:
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w: no answer to the SIDR request", addr, ErrTimedOut)
	case e.Type != ibcm.EventSIDRReply:
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w: unexpected %v", addr, ErrInvalid, e.Type)
	case e.SIDRReply.Status != mad.SIDRSuccess:
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w: SIDR status %d", addr, ErrRejected, e.SIDRReply.Status)
	case e.SIDRReply.QPN == 0:
		return AddrUnspec, nil, fmt.Errorf("resolving %v: %w: SIDR reply without a QPN", addr, ErrInvalid)
	}
	r := e.SIDRReply
	x, err := a.insert(Address{IP: dst, QPN: r.QPN}, r.QKey, true)
	if err != nil {
		return AddrUnspec, nil, err
	}
	return x, unframePrivate(r.PrivateData), nil
}

// listenSIDR has the domain's connection manager take SIDR requests for
// the port (a DGRAM passive endpoint's Listen).
func (p *PassiveEndpoint) listenSIDR(at netip.AddrPort) error {
	if err := p.listenCM(mad.ServiceID(mad.PortSpaceUDP, p.info.Service)); err != nil {
		return fmt.Errorf("listening on %v: %w", at, err)
	}
	return nil
}
