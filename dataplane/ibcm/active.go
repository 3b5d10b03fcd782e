package ibcm

import (
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// ConnectParams describes a connection request. Zero values select the
// defaults noted.
type ConnectParams struct {
	ServiceID uint64   // e.g. mad.ServiceID(mad.PortSpaceTCP, port) for rdma_cm
	RemoteGID [16]byte // the peer's port GID, where the REQ goes
	LocalGID  [16]byte // default Config.LocalGID

	QPN                 uint32 // our QP, 24 bits, nonzero
	StartingPSN         uint32 // our first send PSN, 24 bits
	Transport           mad.Transport
	ResponderResources  uint8 // RDMA reads/atomics we accept in flight
	InitiatorDepth      uint8 // RDMA reads/atomics we issue in flight
	RetryCount          uint8 // 3 bits
	RNRRetryCount       uint8 // 3 bits; 7 is infinite
	SRQ                 bool
	EndToEndFlowControl bool

	PathMTU      mad.MTU // default 1024, what a 1500-byte netdev gets
	PKey         uint16  // default 0xffff, the only RoCE P_Key
	HopLimit     uint8   // default 64, an IPv4 route's; over 1 means routed
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits; see RDMACMFlowLabel
	SL           uint8  // 4 bits
	PacketRate   uint8  // 6 bits; 0 is "port current", what rdma_cm sends on RoCE

	// PrivateData, at most 92 bytes, starts with a mad.CMAHeader when the
	// peer is an rdma_cm listener.
	PrivateData []byte
}

// RDMACMFlowLabel returns the flow label rdma_cm puts in a RoCEv2 REQ for
// an IPv4 connection from srcPort to dstPort (cma_get_roce_udp_flow_label:
// srcPort × 31 + dstPort, cut to 20 bits). The peer derives its UDP source
// port from it, spreading connections over ECMP paths.
func RDMACMFlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & (1<<20 - 1)
}

func (p *ConnectParams) check() error {
	switch {
	case p.QPN == 0 || p.QPN > 1<<24-1:
		return fmt.Errorf("%w: QPN %#x", ErrParam, p.QPN)
	case p.StartingPSN > 1<<24-1:
		return fmt.Errorf("%w: PSN %#x", ErrParam, p.StartingPSN)
	case p.Transport != mad.TransportRC && p.Transport != mad.TransportUC:
		return fmt.Errorf("%w: transport %v", ErrParam, p.Transport)
	case p.RetryCount > 7 || p.RNRRetryCount > 7:
		return fmt.Errorf("%w: retry counts %d, %d", ErrParam, p.RetryCount, p.RNRRetryCount)
	case p.PathMTU > mad.MTU4096:
		return fmt.Errorf("%w: path MTU %d", ErrParam, p.PathMTU)
	case p.FlowLabel > 1<<20-1 || p.SL > 15 || p.PacketRate > 63:
		return fmt.Errorf("%w: flow label, SL or rate", ErrParam)
	}
	return checkPriv(p.PrivateData, mad.REQPrivateDataSize)
}

// Connect sends a REQ and returns the new connection's ID. The REQ is
// retransmitted until the peer answers; EventReply, EventRejected or
// EventTimeout follows.
func (a *Agent) Connect(now int64, p ConnectParams) (ID, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	id, ok := a.newID()
	if !ok {
		return 0, ErrNoID
	}
	if p.PathMTU == 0 {
		p.PathMTU = mad.MTU1024
	}
	if p.PKey == 0 {
		p.PKey = 0xffff
	}
	if p.HopLimit == 0 {
		p.HopLimit = 64
	}
	if p.LocalGID == [16]byte{} {
		p.LocalGID = a.cfg.LocalGID
	}
	if p.LocalGID == [16]byte{} || p.RemoteGID == [16]byte{} {
		// The receiving kernel resolves its route from these GIDs and
		// rejects the REQ ("invalid GID") when it cannot.
		return 0, fmt.Errorf("%w: zero GID", ErrParam)
	}
	c := &conn{
		id: id, peer: Peer{GID: p.RemoteGID}, state: StateREQSent, active: true,
		maxRetries: a.cfg.MaxCMRetries, pktLife: a.cfg.PacketLifeTime, tid: a.newTID(),
		localQPN: p.QPN, heapIdx: -1, retryCap: a.cfg.MaxRetryInterval,
	}
	// As cm_format_req fills a RoCE path: LIDs are permissive and the path
	// not subnet-local when it is routed (hop limit above 1), zero and
	// local otherwise; the receiving kernel takes the rest of the path
	// (flow label, traffic class, rate, SL) from here.
	lid, local := uint16(0), true
	if p.HopLimit > 1 {
		lid, local = mad.PermissiveLID, false
	}
	mad.REQ(cmMAD(c.out[:], mad.AttrREQ, c.tid).Data()).Encode(&mad.REQFields{
		LocalCommID: id, ServiceID: p.ServiceID, LocalCAGUID: a.cfg.LocalGUID,
		LocalQPN: p.QPN, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: a.cfg.CMResponseTimeout, Transport: p.Transport,
		EndToEndFlowControl: p.EndToEndFlowControl, StartingPSN: p.StartingPSN,
		LocalCMResponseTimeout: a.cfg.CMResponseTimeout, RetryCount: p.RetryCount,
		PKey: p.PKey, PathMTU: p.PathMTU, RNRRetryCount: p.RNRRetryCount,
		MaxCMRetries: a.cfg.MaxCMRetries, SRQ: p.SRQ,
		Primary: mad.PathFields{
			LocalLID: lid, RemoteLID: lid, LocalGID: p.LocalGID, RemoteGID: p.RemoteGID,
			FlowLabel: p.FlowLabel, PacketRate: p.PacketRate, TrafficClass: p.TrafficClass,
			HopLimit: p.HopLimit, SL: p.SL, SubnetLocal: local,
			LocalACKTimeout: ackTimeout(a.cfg.AckDelay, a.cfg.PacketLifeTime),
		},
		PrivateData: p.PrivateData,
	})
	a.conns[id] = c
	a.transmit(now, c)
	return ID(id), nil
}

// handleREP takes the peer's answer to our REQ (cm_rep_handler) or a
// duplicate of it (cm_dup_rep_handler).
func (a *Agent) handleREP(now int64, from Peer, m mad.MAD) {
	r := mad.REP(m.Data())
	c := a.lookup(r.RemoteCommID(), 0)
	if c == nil || c.state != StateREQSent && c.state != StateMRAREQRcvd {
		a.dupREP(r)
		return
	}
	if r.LocalCommID() == 0 || r.LocalQPN() == 0 {
		a.drop(DropInvalid)
		return
	}
	guid := r.LocalCAGUID()
	if a.byRemote[remoteKey{r.LocalCommID(), guid}] != nil {
		a.drop(DropState) // another connection already has this remote ID
		return
	}
	if old := a.byQP[qpKey{r.LocalQPN(), guid}]; old != nil {
		// The peer's QP still has a connection here: stale. The REQ keeps
		// retransmitting, as in the kernel, until it is answered anew.
		a.issueREJ(from, m, mad.RejectStaleConn, mad.MsgREP)
		a.disconnectStale(now, old)
		return
	}
	a.setRemote(c, r.LocalCommID(), guid, r.LocalQPN())
	st := c.state
	c.state = StateREPRcvd
	a.unschedule(c)
	// The passive kernel retransmits its REP every
	// cm_convert_to_ms(our local CM response timeout), MaxCMRetries times.
	a.callerDeadline(now, c, int(a.cfg.MaxCMRetries)+1, kernelMs(a.cfg.CMResponseTimeout))
	a.emit(Event{Type: EventReply, ID: ID(c.id), Peer: c.peer, State: st, Reply: r.Fields()})
}

// dupREP answers a REP for a connection past REQ_SENT: the RTU again once
// established, the MRA again if we sent one (cm_dup_rep_handler).
func (a *Agent) dupREP(r mad.REP) {
	c := a.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil || !c.active {
		a.drop(DropUnknownID)
		return
	}
	a.stats.Duplicates++
	if c.state == StateEstablished || c.state == StateMRAREPSent {
		a.resendResp(c)
	}
}

// SendRTU completes an active connection after EventReply: it sends the RTU
// and the connection is established. privateData is at most 224 bytes.
func (a *Agent) SendRTU(now int64, id ID, privateData []byte) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	if c.state != StateREPRcvd && c.state != StateMRAREPSent {
		return ErrState
	}
	if err := checkPriv(privateData, mad.RTUPrivateDataSize); err != nil {
		return err
	}
	mad.RTU(cmMAD(c.resp[:], mad.AttrRTU, c.tid).Data()).Encode(&mad.RTUFields{
		LocalCommID: c.id, RemoteCommID: c.remoteID, PrivateData: privateData,
	})
	c.hasResp = true
	c.state = StateEstablished
	a.unschedule(c)
	a.send(c.peer, c.resp[:])
	return nil
}
