package ibcm

import (
	"encoding/binary"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// Reject refuses a request (after EventRequest) or a reply (after
// EventReply) with a REJ, or abandons an accepted connection before its
// RTU. rdma_cm's rdma_reject sends mad.RejectConsumerDefined. privateData
// is at most 148 bytes. Abandon an unanswered Connect with Destroy.
func (a *Agent) Reject(now int64, id ID, reason mad.RejectReason, privateData []byte) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	if err := checkPriv(privateData, mad.REJPrivateDataSize); err != nil {
		return err
	}
	switch c.state {
	case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
		a.formatREJ(a.scratch[:], c, reason, nil, privateData)
		a.send(c.peer, a.scratch[:])
		a.free(c)
	case StateREPSent, StateMRAREPRcvd:
		// ib_send_cm_rej: the peer may have our REP, so wait out TimeWait.
		a.formatREJ(a.scratch[:], c, reason, nil, privateData)
		a.unschedule(c)
		a.send(c.peer, a.scratch[:])
		a.enterTimeWait(now, c)
	default:
		return ErrState
	}
	return nil
}

// handleREJ takes a reject (cm_rej_handler), finding its connection as
// cm_acquire_rejected_id does: a "timeout" REJ by the rejecter's comm ID
// and the CA GUID in its ARI, a rejected REQ by our ID alone (the peer's
// was not known to us), anything else by both IDs.
func (a *Agent) handleREJ(now int64, m mad.MAD) {
	r := mad.REJ(m.Data())
	var c *conn
	switch {
	case r.Reason() == mad.RejectTimeout:
		if ari := r.ARI(); len(ari) >= 8 {
			c = a.byRemote[remoteKey{r.LocalCommID(), binary.BigEndian.Uint64(ari)}]
		}
	case r.MessageRejected() == mad.MsgREQ:
		c = a.lookup(r.RemoteCommID(), 0)
	default:
		c = a.lookup(r.RemoteCommID(), r.LocalCommID())
	}
	if c == nil {
		a.drop(DropUnknownID)
		return
	}
	st := c.state
	freed := false
	switch st {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateREQRcvd, StateMRAREQSent:
		a.unschedule(c)
		if r.Reason() == mad.RejectStaleConn {
			a.enterTimeWait(now, c)
		} else {
			a.free(c)
			freed = true
		}
	case StateDREQSent, StateREPRcvd, StateMRAREPSent, StateEstablished:
		a.unschedule(c)
		a.enterTimeWait(now, c)
	default:
		a.drop(DropState)
		return
	}
	a.emit(Event{Type: EventRejected, ID: ID(c.id), Peer: c.peer, State: st, Freed: freed, Reject: r.Fields()})
}
