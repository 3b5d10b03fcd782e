package ibcm

import (
	"encoding/binary"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// cmMAD writes a CM header into buf and returns the MAD.
func cmMAD(buf []byte, attr mad.AttrID, tid uint64) mad.MAD {
	m := mad.MAD(buf[:mad.Size])
	h := mad.CMHeader(attr, tid)
	m.EncodeHeader(&h)
	return m
}

// formatREJ writes the REJ c sends in its state (cm_format_rej): a REQ is
// rejected with local comm ID 0 until an MRA made our ID known, a REP with
// ours; anything later is "other".
func (a *Agent) formatREJ(buf []byte, c *conn, reason mad.RejectReason, ari, priv []byte) {
	f := mad.REJFields{
		LocalCommID: c.id, RemoteCommID: c.remoteID, MessageRejected: mad.MsgOther,
		Reason: reason, ARI: ari, PrivateData: priv,
	}
	switch c.state {
	case StateREQRcvd:
		f.LocalCommID, f.MessageRejected = 0, mad.MsgREQ
	case StateMRAREQSent:
		f.MessageRejected = mad.MsgREQ
	case StateREPRcvd, StateMRAREPSent:
		f.MessageRejected = mad.MsgREP
	}
	mad.REJ(cmMAD(buf, mad.AttrREJ, c.tid).Data()).Encode(&f)
}

// issueREJ answers a received REQ or REP with a REJ without keeping state.
func (a *Agent) issueREJ(to Peer, rcvd mad.MAD, reason mad.RejectReason, msg mad.Msg) {
	FormatIssuedREJ(a.scratch[:], rcvd, reason, msg)
	a.send(to, a.scratch[:])
}

// FormatIssuedREJ writes into buf (mad.Size bytes) the REJ that answers a
// received REQ or REP (msg says which) without any state kept, as the
// kernel's cm_issue_rej does: the received TID, its sender's comm ID as
// the remote one. Whoever takes a request no agent has (a daemon routing
// QP1) answers with it too.
func FormatIssuedREJ(buf []byte, rcvd mad.MAD, reason mad.RejectReason, msg mad.Msg) {
	d := rcvd.Data()
	f := mad.REJFields{
		RemoteCommID: binary.BigEndian.Uint32(d[0:]), MessageRejected: msg, Reason: reason,
	}
	if msg != mad.MsgREQ {
		// A REP names our ID as its remote one; a REQ's second word is
		// reserved, so the kernel's copy of it would be noise.
		f.LocalCommID = binary.BigEndian.Uint32(d[4:])
	}
	mad.REJ(cmMAD(buf, mad.AttrREJ, rcvd.TransactionID()).Data()).Encode(&f)
}

// formatMRA writes the MRA c sends for msg.
func (a *Agent) formatMRA(buf []byte, c *conn, msg mad.Msg, serviceTimeout uint8) {
	mad.MRA(cmMAD(buf, mad.AttrMRA, c.tid).Data()).Encode(&mad.MRAFields{
		LocalCommID: c.id, RemoteCommID: c.remoteID, MessageMRAed: msg, ServiceTimeout: serviceTimeout,
	})
}

// sendDREP answers a DREQ on c (cm_format_drep: the DREQ's TID).
func (a *Agent) sendDREP(c *conn) {
	mad.DREP(cmMAD(a.scratch[:], mad.AttrDREP, c.tid).Data()).Encode(&mad.DREPFields{
		LocalCommID: c.id, RemoteCommID: c.remoteID,
	})
	a.send(c.peer, a.scratch[:])
}

func checkPriv(p []byte, limit int) error {
	if len(p) > limit {
		return ErrPrivateData
	}
	return nil
}
