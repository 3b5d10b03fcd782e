package ibcm

import (
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// Listen accepts REQs and SIDR_REQs for serviceID (matched exactly). At most backlog of
// them may wait for Accept or Reject at once; more are dropped, or
// rejected with Config.RejectOnBacklog. A backlog of 0 or less means
// DefaultBacklog.
func (a *Agent) Listen(serviceID uint64, backlog int) error {
	if _, ok := a.listeners[serviceID]; ok {
		return ErrListening
	}
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	a.listeners[serviceID] = &listener{serviceID: serviceID, backlog: backlog}
	return nil
}

// Unlisten stops accepting REQs for serviceID; later ones are rejected with
// "invalid service ID". Requests already reported stay and may still be
// answered.
func (a *Agent) Unlisten(serviceID uint64) error {
	if _, ok := a.listeners[serviceID]; !ok {
		return ErrNotListened
	}
	delete(a.listeners, serviceID)
	return nil
}

// handleREQ takes a connection request (cm_req_handler, cm_match_req).
func (a *Agent) handleREQ(now int64, from Peer, m mad.MAD) {
	r := mad.REQ(m.Data())
	if r.LocalCommID() == 0 || r.LocalQPN() == 0 {
		a.drop(DropInvalid)
		return
	}
	guid := r.LocalCAGUID()
	if c := a.byRemote[remoteKey{r.LocalCommID(), guid}]; c != nil {
		a.dupREQ(c)
		return
	}
	if old := a.byQP[qpKey{r.LocalQPN(), guid}]; old != nil {
		a.issueREJ(from, m, mad.RejectStaleConn, mad.MsgREQ)
		a.disconnectStale(now, old)
		return
	}
	l := a.listeners[r.ServiceID()]
	if l == nil {
		// What rdma_cm peers see as RDMA_CM_EVENT_REJECTED, status 8.
		a.issueREJ(from, m, mad.RejectInvalidServiceID, mad.MsgREQ)
		return
	}
	if t := r.Transport(); t != mad.TransportRC && t != mad.TransportUC {
		a.issueREJ(from, m, mad.RejectInvalidTransportType, mad.MsgREQ)
		return
	}
	if l.pending >= l.backlog {
		a.drop(DropBacklog)
		if a.cfg.RejectOnBacklog {
			a.issueREJ(from, m, mad.RejectNoResources, mad.MsgREQ)
		}
		return
	}
	id, ok := a.newID()
	if !ok {
		a.issueREJ(from, m, mad.RejectNoResources, mad.MsgREQ)
		return
	}
	// The path's packet life time, as cm_format_paths_from_req recovers
	// it from the local ACK timeout.
	pl := r.Primary().LocalACKTimeout()
	if pl > 0 {
		pl--
	}
	c := &conn{
		id: id, peer: from, state: StateREQRcvd, maxRetries: r.MaxCMRetries(), pktLife: pl,
		tid: m.TransactionID(), lis: l, heapIdx: -1,
		// The kernel times REP and DREQ retransmissions by the REQ's local
		// CM response timeout (cm_req_handler); so do we, within our cap.
		retryCap: min(a.cfg.MaxRetryInterval, max(a.cfg.RetryInterval, kernelMs(r.LocalCMResponseTimeout()))),
	}
	l.pending++
	a.conns[id] = c
	a.setRemote(c, r.LocalCommID(), guid, r.LocalQPN())
	// The active kernel waits 2 × packet life + remote CM response timeout
	// per try (ib_send_cm_req).
	perTry := 2*kernelMs(pl) + kernelMs(r.RemoteCMResponseTimeout())
	a.callerDeadline(now, c, int(r.MaxCMRetries())+1, perTry)
	a.emit(Event{Type: EventRequest, ID: ID(id), Peer: from, State: StateREQRcvd, Request: r.Fields()})
}

// dupREQ answers a REQ we already have (cm_dup_req_handler).
func (a *Agent) dupREQ(c *conn) {
	a.stats.Duplicates++
	switch c.state {
	case StateMRAREQSent:
		a.resendResp(c)
	case StateREPSent, StateMRAREPRcvd:
		// The REQ came again, so our REP was probably lost: resend it
		// now rather than at the next REP timeout.
		a.stats.Retransmits[mad.AttrREP.CMIndex()]++
		a.send(c.peer, c.out[:])
	case StateTimeWait:
		a.formatREJ(a.scratch[:], c, mad.RejectStaleConn, nil, nil)
		a.send(c.peer, a.scratch[:])
	}
}

// RepParams describes our side of an accepted connection.
type RepParams struct {
	QPN                 uint32 // 24 bits, nonzero
	StartingPSN         uint32 // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	EndToEndFlowControl bool
	PrivateData         []byte // at most 196 bytes
}

// Accept answers a request with a REP, retransmitted until the RTU (or
// Established) comes; EventEstablished, EventRejected or EventTimeout
// follows.
func (a *Agent) Accept(now int64, id ID, p RepParams) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	if c.state != StateREQRcvd && c.state != StateMRAREQSent {
		return ErrState
	}
	switch {
	case p.QPN == 0 || p.QPN > 1<<24-1:
		return fmt.Errorf("%w: QPN %#x", ErrParam, p.QPN)
	case p.StartingPSN > 1<<24-1:
		return fmt.Errorf("%w: PSN %#x", ErrParam, p.StartingPSN)
	case p.RNRRetryCount > 7:
		return fmt.Errorf("%w: RNR retry count %d", ErrParam, p.RNRRetryCount)
	}
	if err := checkPriv(p.PrivateData, mad.REPPrivateDataSize); err != nil {
		return err
	}
	mad.REP(cmMAD(c.out[:], mad.AttrREP, c.tid).Data()).Encode(&mad.REPFields{
		LocalCommID: c.id, RemoteCommID: c.remoteID, LocalQPN: p.QPN, StartingPSN: p.StartingPSN,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		TargetACKDelay: a.cfg.AckDelay, EndToEndFlowControl: p.EndToEndFlowControl,
		RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, LocalCAGUID: a.cfg.LocalGUID,
		PrivateData: p.PrivateData,
	})
	c.localQPN = p.QPN
	c.state = StateREPSent
	c.unpend()
	c.hasResp = false
	c.sends, c.mraWait = 0, 0
	a.transmit(now, c)
	return nil
}

// handleRTU completes a connection we accepted (cm_rtu_handler).
func (a *Agent) handleRTU(m mad.MAD) {
	r := mad.RTU(m.Data())
	c := a.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		a.drop(DropUnknownID)
		return
	}
	if c.state != StateREPSent && c.state != StateMRAREPRcvd {
		a.stats.Duplicates++
		return
	}
	a.established(c, r.PrivateData())
}

// Established reports that the QP of a connection we accepted received
// traffic before the RTU (ib_cm_notify with IB_EVENT_COMM_EST): the RTU
// was lost or is late, and the connection is established. It is a no-op on
// an established connection.
func (a *Agent) Established(now int64, id ID) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	switch c.state {
	case StateEstablished:
		return nil
	case StateREPSent, StateMRAREPRcvd:
		a.established(c, nil)
		return nil
	}
	return ErrState
}

func (a *Agent) established(c *conn, priv []byte) {
	st := c.state
	c.state = StateEstablished
	a.unschedule(c)
	a.emit(Event{Type: EventEstablished, ID: ID(c.id), Peer: c.peer, State: st, PrivateData: priv})
}
