package ibcm

import "github.com/softfabric/softfabric/dataplane/mad"

// SendMRA tells the peer that the answer to its REQ (after EventRequest) or
// REP (after EventReply) will take up to 4.096 µs × 2^serviceTimeout more,
// so that it stops retransmitting and waits. With MRADelay or-ed in, the
// MRA is only recorded and goes out in answer to the next duplicate, as
// rdma_cm does for every request it passes to its user.
func (a *Agent) SendMRA(now int64, id ID, serviceTimeout uint8) error {
	c := a.conns[uint32(id)]
	if c == nil {
		return ErrUnknownID
	}
	var next State
	var msg mad.Msg
	switch c.state {
	case StateREQRcvd:
		next, msg = StateMRAREQSent, mad.MsgREQ
	case StateREPRcvd:
		next, msg = StateMRAREPSent, mad.MsgREP
	default:
		return ErrState
	}
	t := serviceTimeout & 31
	a.formatMRA(c.resp[:], c, msg, t)
	c.hasResp = true
	c.state = next
	// Whatever the peer waited before, it now waits this long per retry.
	a.callerDeadline(now, c, int(c.maxRetries)+1, mraWait(t, c.pktLife))
	if serviceTimeout&MRADelay == 0 {
		a.send(c.peer, c.resp[:])
	}
	return nil
}

// handleMRA takes the peer's request for more time (cm_mra_handler): the
// outstanding REQ or REP waits for the MRA's service timeout plus the
// packet life time (at most Config.MaxMRAWait) before its next
// retransmission, and from then on.
func (a *Agent) handleMRA(now int64, m mad.MAD) {
	r := mad.MRA(m.Data())
	var c *conn
	var want, next State
	switch r.MessageMRAed() {
	case mad.MsgREQ:
		c, want, next = a.lookup(r.RemoteCommID(), 0), StateREQSent, StateMRAREQRcvd
	case mad.MsgREP:
		c, want, next = a.lookup(r.RemoteCommID(), r.LocalCommID()), StateREPSent, StateMRAREPRcvd
	default: // an MRA for a LAP, which we never send
		a.drop(DropUnsupported)
		return
	}
	switch {
	case c == nil:
		a.drop(DropUnknownID)
	case c.state == next:
		a.stats.Duplicates++
	case c.state != want:
		a.drop(DropState)
	default:
		c.state = next
		c.mraWait = min(mraWait(r.ServiceTimeout(), a.cfg.PacketLifeTime), a.cfg.MaxMRAWait)
		a.schedule(c, now+c.mraWait)
	}
}
