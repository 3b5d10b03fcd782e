package ibcm

import (
	"encoding/binary"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// Disconnect sends a DREQ on an established connection, retransmitted
// until the DREP; EventDisconnected follows and the ID spends TimeWait
// before it is freed. privateData is at most 220 bytes.
func (a *Agent) Disconnect(now int64, id ID, privateData []byte) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	if c.state != StateEstablished {
		return ErrState
	}
	if err := checkPriv(privateData, mad.DREQPrivateDataSize); err != nil {
		return err
	}
	a.sendDREQ(now, c, privateData)
	return nil
}

// sendDREQ starts a disconnect (ib_send_cm_dreq): a new TID, the peer's QPN
// for it to check.
func (a *Agent) sendDREQ(now int64, c *conn, priv []byte) {
	mad.DREQ(cmMAD(c.out[:], mad.AttrDREQ, a.newTID()).Data()).Encode(&mad.DREQFields{
		LocalCommID: c.id, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN, PrivateData: priv,
	})
	c.state = StateDREQSent
	c.sends, c.mraWait = 0, 0
	a.transmit(now, c)
}

// disconnectStale disconnects a connection a new REQ or REP from the same
// remote QP made stale, as cm_match_req and cm_rep_handler do: by DREQ if
// it is established, which only works there.
func (a *Agent) disconnectStale(now int64, c *conn) {
	if c.state == StateEstablished {
		a.sendDREQ(now, c, nil)
	}
}

// handleDREQ takes a disconnect request (cm_dreq_handler) and answers it
// with a DREP at once, as rdma_cm's users do by calling rdma_disconnect.
func (a *Agent) handleDREQ(now int64, from Peer, m mad.MAD) {
	r := mad.DREQ(m.Data())
	c := a.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		// Perhaps our DREP was lost and TimeWait is over: answer anyway
		// (cm_issue_drep), so that the peer stops retransmitting.
		a.drop(DropUnknownID)
		FormatIssuedDREP(a.scratch[:], m)
		a.send(from, a.scratch[:])
		return
	}
	if r.RemoteQPN() != c.localQPN {
		a.drop(DropInvalid)
		return
	}
	st := c.state
	switch st {
	case StateREPSent, StateMRAREPRcvd, StateEstablished, StateDREQSent:
	case StateTimeWait:
		a.stats.Duplicates++
		a.sendDREP(c)
		return
	case StateDREQRcvd:
		a.stats.Duplicates++
		return
	default:
		a.drop(DropState)
		return
	}
	c.state = StateDREQRcvd
	c.tid = m.TransactionID()
	a.unschedule(c)
	a.sendDREP(c)
	a.enterTimeWait(now, c)
	t := EventDisconnectRequest
	if st == StateDREQSent {
		t = EventDisconnected // the DREQs crossed: ours is as good as answered
	}
	a.emit(Event{Type: t, ID: ID(c.id), Peer: c.peer, State: st, PrivateData: r.PrivateData()})
}

// handleDREP completes our disconnect (cm_drep_handler).
func (a *Agent) handleDREP(now int64, m mad.MAD) {
	r := mad.DREP(m.Data())
	c := a.lookup(r.RemoteCommID(), r.LocalCommID())
	if c == nil {
		a.drop(DropUnknownID)
		return
	}
	if c.state != StateDREQSent {
		a.stats.Duplicates++
		return
	}
	a.enterTimeWait(now, c)
	a.emit(Event{Type: EventDisconnected, ID: ID(c.id), Peer: c.peer, State: StateDREQSent, PrivateData: r.PrivateData()})
}

// enterTimeWait stops c's retransmissions and frees it after TimeWait
// (cm_enter_timewait). Its remote QPN is released at once, so that the
// peer's QP may connect anew.
func (a *Agent) enterTimeWait(now int64, c *conn) {
	c.unpend()
	a.dropQP(c)
	c.state = StateTimeWait
	c.hasResp = false
	a.schedule(c, now+a.cfg.TimeWait)
}

// Destroy abandons a connection at once, telling the peer as
// ib_destroy_cm_id does: a REJ "timeout" with our CA GUID while our REQ is
// unanswered, a REJ "consumer defined" during the rest of the handshake,
// one DREQ (not retransmitted) when established, a DREP if a DREQ is
// being answered. No event follows; the ID is freed.
func (a *Agent) Destroy(now int64, id ID) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	a.destroy(c)
	return nil
}

func (a *Agent) destroy(c *conn) {
	switch c.state {
	case StateREQSent, StateMRAREQRcvd:
		var guid [8]byte
		binary.BigEndian.PutUint64(guid[:], a.cfg.LocalGUID)
		a.formatREJ(a.scratch[:], c, mad.RejectTimeout, guid[:], nil)
		a.send(c.peer, a.scratch[:])
	case StateREQRcvd, StateMRAREQSent, StateREPSent, StateMRAREPRcvd, StateREPRcvd, StateMRAREPSent:
		a.formatREJ(a.scratch[:], c, mad.RejectConsumerDefined, nil, nil)
		a.send(c.peer, a.scratch[:])
	case StateEstablished:
		mad.DREQ(cmMAD(a.scratch[:], mad.AttrDREQ, a.newTID()).Data()).Encode(&mad.DREQFields{
			LocalCommID: c.id, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN,
		})
		a.send(c.peer, a.scratch[:])
	case StateDREQRcvd:
		a.sendDREP(c)
	case StateSIDRREQRcvd:
		// cm_destroy_id: an unanswered SIDR request is refused.
		a.formatSIDRReject(c)
		a.send(c.peer, a.scratch[:])
	}
	a.free(c)
}

// FormatIssuedDREP writes into buf (mad.Size bytes) the DREP that answers
// a received DREQ for a connection nobody has any more, as the kernel's
// cm_issue_drep does: the DREQ's TID, its two comm IDs swapped. The peer
// whose DREP was lost then stops sending its DREQ again: an agent answers
// so once its connection's TimeWait is over, and a daemon routing QP1 for
// a connection whose application is gone.
func FormatIssuedDREP(buf []byte, rcvd mad.MAD) {
	r := mad.DREQ(rcvd.Data())
	mad.DREP(cmMAD(buf, mad.AttrDREP, rcvd.TransactionID()).Data()).Encode(&mad.DREPFields{
		LocalCommID: r.RemoteCommID(), RemoteCommID: r.LocalCommID(),
	})
}
