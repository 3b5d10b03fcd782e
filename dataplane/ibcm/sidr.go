package ibcm

import (
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// Service ID resolution (IBTA 12.11), with which rdma_cm sets up UD
// "connections" in its UDP port space: the requester sends a SIDR_REQ
// naming a service, the responder answers with a SIDR_REP carrying the QPN
// and Q_Key of the UD queue pair that serves it, or a status saying why
// not. There is no connection afterwards, only an ID while the request is
// out or being answered.
//
// As cm.c: a SIDR_REQ is retransmitted until its SIDR_REP (the kernel
// times it by the request's timeout and retries: rdma_cm's 4.096 s, 15
// retries; we retransmit on our own, shorter schedule as for REQs); a
// SIDR_REQ for a service nobody listens on is answered with status
// Unsupported (cm_reject_sidr_req); a duplicate of a request being
// answered is ignored (cm_insert_remote_sidr). Unlike cm.c, which forgets
// a request once answered (so that a requester whose SIDR_REP was lost
// resolves anew, and its listener hears of it twice), we keep the
// SIDR_REP for Config.SIDRHold and answer duplicates with it.

// SIDRParams describes a service ID resolution request.
type SIDRParams struct {
	ServiceID uint64   // e.g. mad.ServiceID(mad.PortSpaceUDP, port) for rdma_cm
	RemoteGID [16]byte // the peer's port GID, where the SIDR_REQ goes
	PKey      uint16   // default 0xffff, the only RoCE P_Key
	// PrivateData, at most 216 bytes, starts with a mad.CMAHeader when the
	// peer is an rdma_cm listener.
	PrivateData []byte
}

// ResolveSIDR sends a SIDR_REQ and returns its ID. It is retransmitted
// until the SIDR_REP comes; EventSIDRReply or EventTimeout follows, and
// frees the ID. The SIDR_REQ's request ID is the ID.
func (a *Agent) ResolveSIDR(now int64, p SIDRParams) (ID, error) {
	if p.RemoteGID == [16]byte{} {
		return 0, fmt.Errorf("%w: zero GID", ErrParam)
	}
	if err := checkPriv(p.PrivateData, mad.SIDRREQPrivateDataSize); err != nil {
		return 0, err
	}
	id, ok := a.newID()
	if !ok {
		return 0, ErrNoID
	}
	if p.PKey == 0 {
		p.PKey = 0xffff
	}
	c := &conn{
		id: id, peer: Peer{GID: p.RemoteGID}, state: StateSIDRREQSent, active: true,
		maxRetries: a.cfg.MaxCMRetries, tid: a.newTID(), heapIdx: -1, service: p.ServiceID,
		// rdma_cm's SIDR timeout is its CM response timeout
		// (cma_resolve_ib_udp); we retransmit no later.
		retryCap: min(a.cfg.MaxRetryInterval, max(a.cfg.RetryInterval, kernelMs(a.cfg.CMResponseTimeout))),
	}
	mad.SIDRREQ(cmMAD(c.out[:], mad.AttrSIDRREQ, c.tid).Data()).Encode(&mad.SIDRREQFields{
		RequestID: id, PKey: p.PKey, ServiceID: p.ServiceID, PrivateData: p.PrivateData,
	})
	a.conns[id] = c
	a.transmit(now, c)
	return ID(id), nil
}

// handleSIDRREP takes the answer to our SIDR_REQ (cm_sidr_rep_handler).
func (a *Agent) handleSIDRREP(m mad.MAD) {
	r := mad.SIDRREP(m.Data())
	c := a.conns[r.RequestID()]
	if c == nil || c.state != StateSIDRREQSent {
		// Answered already (a duplicate), abandoned, or not ours.
		a.drop(DropUnknownID)
		return
	}
	a.free(c)
	a.emit(Event{Type: EventSIDRReply, ID: ID(c.id), Peer: c.peer, State: StateSIDRREQSent, Freed: true, SIDRReply: r.Fields()})
}

// sidrKey identifies a SIDR request by its requester's port and request
// ID, what cm_insert_remote_sidr keys on.
type sidrKey struct {
	id  uint32
	gid [16]byte
}

// handleSIDRREQ takes a service ID resolution request
// (cm_sidr_req_handler).
func (a *Agent) handleSIDRREQ(now int64, from Peer, m mad.MAD) {
	r := mad.SIDRREQ(m.Data())
	if c := a.bySIDR[sidrKey{r.RequestID(), from.GID}]; c != nil {
		a.stats.Duplicates++
		if c.state == StateSIDRREPSent {
			a.stats.Retransmits[mad.AttrSIDRREP.CMIndex()]++
			a.send(c.peer, c.resp[:])
		}
		return
	}
	l := a.listeners[r.ServiceID()]
	if l == nil {
		// What rdma_cm peers see as RDMA_CM_EVENT_UNREACHABLE,
		// -ECONNREFUSED.
		a.issueSIDRREP(from, m, mad.SIDRUnsupported)
		return
	}
	if l.pending >= l.backlog {
		a.drop(DropBacklog) // the requester's retransmission may find room
		return
	}
	id, ok := a.newID()
	if !ok {
		a.drop(DropBacklog)
		return
	}
	c := &conn{
		id: id, peer: from, state: StateSIDRREQRcvd, remoteID: r.RequestID(), tid: m.TransactionID(),
		lis: l, heapIdx: -1, service: r.ServiceID(),
	}
	l.pending++
	a.conns[id] = c
	a.bySIDR[sidrKey{c.remoteID, from.GID}] = c
	c.inSIDR = true
	// rdma_cm's requester gives up after 16 tries of its CM response
	// timeout (cma_resolve_ib_udp); the SIDR_REQ does not say.
	a.callerDeadline(now, c, DefaultMaxCMRetries+1, kernelMs(DefaultCMResponseTimeout))
	a.emit(Event{Type: EventSIDRRequest, ID: ID(id), Peer: from, State: StateSIDRREQRcvd, SIDRRequest: r.Fields()})
}

// issueSIDRREP answers a SIDR_REQ without keeping state.
func (a *Agent) issueSIDRREP(to Peer, rcvd mad.MAD, status mad.SIDRStatus) {
	FormatIssuedSIDRREP(a.scratch[:], rcvd, status)
	a.send(to, a.scratch[:])
}

// FormatIssuedSIDRREP writes into buf (mad.Size bytes) the SIDR_REP that
// answers a received SIDR_REQ with status (not success) without any state
// kept, as the kernel's cm_reject_sidr_req does: the received TID, request
// ID and service ID. Whoever takes a request no agent has (a daemon
// routing QP1) answers with it too.
func FormatIssuedSIDRREP(buf []byte, rcvd mad.MAD, status mad.SIDRStatus) {
	r := mad.SIDRREQ(rcvd.Data())
	mad.SIDRREP(cmMAD(buf, mad.AttrSIDRREP, rcvd.TransactionID()).Data()).Encode(&mad.SIDRREPFields{
		RequestID: r.RequestID(), Status: status, ServiceID: r.ServiceID(),
	})
}

// SIDRReplyParams is the answer to a SIDR request.
type SIDRReplyParams struct {
	Status mad.SIDRStatus
	QPN    uint32 // the UD queue pair serving the service, 24 bits, nonzero with SIDRSuccess
	QKey   uint32 // its Q_Key (rdma_cm's UDP port space: 0x01234567)
	// PrivateData, at most 136 bytes: rdma_cm passes its user's data
	// as is, with no header.
	PrivateData []byte
}

// SIDRReply answers a SIDR request (after EventSIDRRequest) with a
// SIDR_REP (ib_send_cm_sidr_rep). The caller is done with the ID; the
// agent keeps it a while (Config.SIDRHold) to answer duplicates of the
// request with the same SIDR_REP.
func (a *Agent) SIDRReply(now int64, id ID, p SIDRReplyParams) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	if c.state != StateSIDRREQRcvd {
		return ErrState
	}
	if p.QPN > 1<<24-1 || p.Status == mad.SIDRSuccess && p.QPN == 0 {
		return fmt.Errorf("%w: QPN %#x", ErrParam, p.QPN)
	}
	if err := checkPriv(p.PrivateData, mad.SIDRREPPrivateDataSize); err != nil {
		return err
	}
	mad.SIDRREP(cmMAD(c.resp[:], mad.AttrSIDRREP, c.tid).Data()).Encode(&mad.SIDRREPFields{
		RequestID: c.remoteID, Status: p.Status, QPN: p.QPN, ServiceID: c.service, QKey: p.QKey,
		PrivateData: p.PrivateData,
	})
	c.unpend()
	a.unschedule(c)
	a.send(c.peer, c.resp[:])
	if a.sidrHeld >= a.cfg.MaxSIDRHeld {
		a.free(c) // as cm.c does always: a duplicate is a new request
		return nil
	}
	c.state = StateSIDRREPSent
	c.hasResp = true
	a.sidrHeld++
	a.schedule(c, now+a.cfg.SIDRHold)
	return nil
}

// formatSIDRReject writes into the scratch buffer the SIDR_REP that
// refuses c's request (status Reject).
func (a *Agent) formatSIDRReject(c *conn) {
	mad.SIDRREP(cmMAD(a.scratch[:], mad.AttrSIDRREP, c.tid).Data()).Encode(&mad.SIDRREPFields{
		RequestID: c.remoteID, Status: mad.SIDRReject, ServiceID: c.service,
	})
}
