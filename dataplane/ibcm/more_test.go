package ibcm

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// Both sides send a DREQ at once: each answers the other's, and each hears
// of the end once.
func TestCrossedDisconnect(t *testing.T) {
	w, a, b := pair(t)
	aid := connect(t, w, a, 0x11)
	w.run()
	bid := b.events[0].ID
	a.a.Disconnect(w.now, aid, nil)
	b.a.Disconnect(w.now, bid, nil)
	w.advance(10 * sec)
	for name, n := range map[string]*node{"A": a, "B": b} {
		if n.count(EventDisconnected)+n.count(EventDisconnectRequest) != 1 || n.count(EventTimeWaitExit) != 1 {
			t.Errorf("%s events %v", name, n.types())
		}
		checkEmpty(t, name, n.a)
	}
}

// Destroy of an established connection sends one DREQ; the peer answers
// and goes through TimeWait.
func TestDestroyEstablished(t *testing.T) {
	w, a, b := pair(t)
	aid := connect(t, w, a, 0x11)
	w.run()
	a.a.Destroy(w.now, aid)
	checkEmpty(t, "A", a.a)
	w.advance(10 * sec)
	if b.count(EventDisconnectRequest) != 1 || len(w.sentOf(peerA, mad.AttrDREQ)) != 1 {
		t.Errorf("B events %v", b.types())
	}
	checkEmpty(t, "B", b.a)
	if a.a.Stats().Dropped[DropUnknownID] != 1 { // the DREP for the destroyed ID
		t.Errorf("A dropped %v", a.a.Stats().Dropped)
	}
}

// A REJ on an established connection sends it to TimeWait.
func TestRejectEstablished(t *testing.T) {
	w, a, b := pair(t)
	aid := connect(t, w, a, 0x11)
	w.run()
	c := a.a.conns[uint32(aid)]
	buf := make([]byte, mad.Size)
	h := mad.CMHeader(mad.AttrREJ, 1)
	mad.MAD(buf).EncodeHeader(&h)
	mad.REJ(mad.MAD(buf).Data()).Encode(&mad.REJFields{
		LocalCommID: c.remoteID, RemoteCommID: c.id, MessageRejected: mad.MsgOther, Reason: mad.RejectConsumerDefined,
	})
	a.a.Receive(w.now, peerB, buf)
	e, ok := a.last(EventRejected)
	if st, _ := a.a.State(aid); !ok || e.Freed || st != StateTimeWait {
		t.Fatalf("A events %v, state %v", a.types(), st)
	}
	a.a.Receive(w.now, peerB, buf) // again: nothing to do in TimeWait
	if a.count(EventRejected) != 1 || a.a.Stats().Dropped[DropState] != 1 {
		t.Error("second REJ")
	}
	w.advance(3 * sec)
	checkEmpty(t, "A", a.a)
	_ = b
}

// The passive side gives up after accepting: REJ, and both sides wait out
// TimeWait (ib_send_cm_rej in REP_SENT, cm_rej_handler in REP_RCVD).
func TestRejectAfterAccept(t *testing.T) {
	w, a, b := pair(t)
	a.onEvent = nil
	aid := connect(t, w, a, 0x11)
	w.run()
	bid := b.events[0].ID
	if err := b.a.Reject(w.now, bid, mad.RejectConsumerDefined, nil); err != nil {
		t.Fatal(err)
	}
	w.run()
	if e, ok := a.last(EventRejected); !ok || e.ID != aid || e.Freed || e.Reject.MessageRejected != mad.MsgOther {
		t.Fatalf("A events %v", a.types())
	}
	if st, _ := a.a.State(aid); st != StateTimeWait {
		t.Fatalf("A state %v", st)
	}
	if st, _ := b.a.State(bid); st != StateTimeWait {
		t.Fatalf("B state %v", st)
	}
	w.advance(3 * sec)
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
}

func TestTransportChecks(t *testing.T) {
	w, a, b := pair(t)
	p := connectParams(0x12, nil)
	p.Transport = mad.TransportUC
	if _, err := a.a.Connect(w.now, p); err != nil {
		t.Fatal(err)
	}
	w.run()
	if b.count(EventEstablished) != 1 || b.events[0].Request.Transport != mad.TransportUC {
		t.Fatalf("UC: B events %v", b.types())
	}
	// An XRC REQ, which we do not serve: REJ 9.
	req := floodREQ(77, 78, 79)
	r := mad.REQ(mad.MAD(req).Data())
	f := r.Fields()
	f.Transport, f.ExtendedTransportType = mad.TransportXRC, 1
	r.Encode(&f)
	b.a.Receive(w.now, peerA, req)
	rej := w.queue[len(w.queue)-1]
	if rej.attr() != mad.AttrREJ || mad.REJ(mad.MAD(rej.b).Data()).Reason() != mad.RejectInvalidTransportType {
		t.Error("XRC REQ not rejected with 9")
	}
	p.Transport = mad.TransportXRC
	if _, err := a.a.Connect(w.now, p); err == nil {
		t.Error("Connect with XRC")
	}
	p.Transport, p.RemoteGID = mad.TransportRC, [16]byte{}
	if _, err := a.a.Connect(w.now, p); err == nil {
		t.Error("Connect to a zero GID")
	}
}

func TestUnlisten(t *testing.T) {
	w, a, b := pair(t)
	b.onEvent = nil
	connect(t, w, a, 0x11)
	w.run()
	if err := b.a.Unlisten(service); err != nil {
		t.Fatal(err)
	}
	// The pending request can still be accepted.
	acceptAll(0x22)(b, b.events[0])
	w.run()
	if b.count(EventEstablished) != 1 {
		t.Fatalf("B events %v", b.types())
	}
	p := connectParams(0x13, nil)
	a.a.Connect(w.now, p)
	w.run()
	if e, ok := a.last(EventRejected); !ok || e.Reject.Reason != mad.RejectInvalidServiceID {
		t.Fatalf("A events %v", a.types())
	}
}

// A DREQ naming another QPN is dropped, as cm_dreq_handler does.
func TestDREQWrongQPN(t *testing.T) {
	w, a, b := pair(t)
	aid := connect(t, w, a, 0x11)
	w.run()
	a.a.Disconnect(w.now, aid, nil)
	dreq := w.queue[0]
	w.queue = nil
	d := mad.DREQ(mad.MAD(dreq.b).Data())
	f := d.Fields()
	f.RemoteQPN = 0x99
	d.Encode(&f)
	b.a.Receive(w.now, peerA, dreq.b)
	if b.a.Stats().Dropped[DropInvalid] != 1 || b.count(EventDisconnectRequest) != 0 {
		t.Errorf("B events %v, dropped %v", b.types(), b.a.Stats().Dropped)
	}
}

// A REP from a QP that still has a connection here is rejected as stale.
func TestStaleREP(t *testing.T) {
	w, a, b := pair(t)
	connect(t, w, a, 0x11)
	w.run()
	// A second listener on B answers with the same QPN 0x22.
	other := mad.ServiceID(mad.PortSpaceTCP, 1)
	b.a.Listen(other, 1)
	p := connectParams(0x12, nil)
	p.ServiceID = other
	second, _ := a.a.Connect(w.now, p)
	w.run()
	rejs := w.sentOf(peerA, mad.AttrREJ)
	if len(rejs) != 1 || mad.REJ(mad.MAD(rejs[0].b).Data()).Reason() != mad.RejectStaleConn {
		t.Fatalf("%d REJs from A", len(rejs))
	}
	if e, ok := b.last(EventRejected); !ok || e.Reject.Reason != mad.RejectStaleConn {
		t.Fatalf("B events %v", b.types())
	}
	// The first connection is being disconnected; the second REQ keeps
	// waiting for an answer, as in the kernel.
	if len(w.sentOf(peerA, mad.AttrDREQ)) != 1 {
		t.Error("stale connection not disconnected")
	}
	if st, _ := a.a.State(second); st != StateREQSent {
		t.Errorf("second connection in %v", st)
	}
}
