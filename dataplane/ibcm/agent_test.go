package ibcm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// pair returns a wire with an active node A and a passive node B listening
// on service and accepting with QPN 0x22, A answering replies with RTU.
func pair(t testing.TB) (*wire, *node, *node) {
	w := newWire(t)
	a := w.add(peerA, guidA, Config{})
	b := w.add(peerB, guidB, Config{})
	if err := b.a.Listen(service, 8); err != nil {
		t.Fatal(err)
	}
	b.onEvent = acceptAll(0x22)
	a.onEvent = rtuAll
	return w, a, b
}

func cmaPrivate(t testing.TB) []byte {
	p := make([]byte, mad.CMAHeaderSize+4)
	mad.CMAHeader(p).Encode(&mad.CMAHeaderFields{Src: addrA, Dst: addrB, SrcPort: 40000})
	copy(p[mad.CMAHeaderSize:], "user")
	return p
}

func connect(t testing.TB, w *wire, a *node, qpn uint32) ID {
	t.Helper()
	id, err := a.a.Connect(w.now, connectParams(qpn, cmaPrivate(t)))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestHandshake(t *testing.T) {
	w, a, b := pair(t)
	id := connect(t, w, a, 0x11)
	w.run()

	if got := a.types(); !slices.Equal(got, []EventType{EventReply}) {
		t.Fatalf("A events %v", got)
	}
	if got := b.types(); !slices.Equal(got, []EventType{EventRequest, EventEstablished}) {
		t.Fatalf("B events %v", got)
	}
	if st, _ := a.a.State(id); st != StateEstablished {
		t.Errorf("A state %v", st)
	}
	req := b.events[0]
	if st, _ := b.a.State(req.ID); st != StateEstablished || req.Peer != peerA {
		t.Errorf("B state %v, peer %v", st, req.Peer)
	}
	r := req.Request
	if r.LocalCommID != uint32(id) || r.ServiceID != service || r.LocalCAGUID != guidA ||
		r.LocalQPN != 0x11 || r.StartingPSN != 0x111111 || r.Transport != mad.TransportRC {
		t.Errorf("REQ fields %+v", r)
	}
	h := mad.CMAHeader(r.PrivateData)
	if h.Src() != addrA || h.Dst() != addrB || h.Port() != 40000 || string(r.PrivateData[36:40]) != "user" {
		t.Errorf("private data %x", r.PrivateData[:40])
	}
	rep := a.events[0].Reply
	if rep.LocalQPN != 0x22 || rep.StartingPSN != 0x222222 || rep.RemoteCommID != uint32(id) ||
		rep.LocalCommID != uint32(req.ID) || rep.LocalCAGUID != guidB || rep.TargetACKDelay != DefaultAckDelay {
		t.Errorf("REP fields %+v", rep)
	}

	// TIDs as cm.c: REP and RTU carry the REQ's.
	reqs, reps, rtus := w.sentOf(peerA, mad.AttrREQ), w.sentOf(peerB, mad.AttrREP), w.sentOf(peerA, mad.AttrRTU)
	if len(reqs) != 1 || len(reps) != 1 || len(rtus) != 1 {
		t.Fatalf("sent %d REQ, %d REP, %d RTU", len(reqs), len(reps), len(rtus))
	}
	tid := mad.MAD(reqs[0].b).TransactionID()
	if mad.MAD(reps[0].b).TransactionID() != tid || mad.MAD(rtus[0].b).TransactionID() != tid {
		t.Error("REP or RTU TID differs from the REQ's")
	}
	if a.a.Stats().Sent[mad.AttrREQ.CMIndex()] != 1 || b.a.Stats().Received[mad.AttrREQ.CMIndex()] != 1 {
		t.Error("stats")
	}
	checkInvariants(t, a.a)
	checkInvariants(t, b.a)
	if b.a.listeners[service].pending != 0 {
		t.Error("accepted request still counts against the backlog")
	}
}

// The REQ carries what cm_format_req puts in one for a routed RoCEv2 path
// and rdma_cm's timing.
func TestREQLikeKernel(t *testing.T) {
	w, a, _ := pair(t)
	connect(t, w, a, 0x11)
	r := mad.REQ(mad.MAD(w.queue[0].b).Data())
	p := r.Primary()
	m := mad.MAD(w.queue[0].b)
	if m.BaseVersion() != 1 || m.MgmtClass() != 7 || m.ClassVersion() != 2 || m.Method() != 3 || m.Status() != 0 {
		t.Errorf("header %+v", m.Header())
	}
	if r.RemoteCMResponseTimeout() != 20 || r.LocalCMResponseTimeout() != 20 || r.MaxCMRetries() != 15 ||
		r.PKey() != 0xffff || r.PathMTU() != mad.MTU1024 || r.RetryCount() != 7 || r.RNRRetryCount() != 7 {
		t.Errorf("REQ timing/transport fields %+v", r.Fields())
	}
	if p.LocalLID() != 0xffff || p.RemoteLID() != 0xffff || p.SubnetLocal() || p.HopLimit() != 64 ||
		p.LocalGID() != peerA.GID || p.RemoteGID() != peerB.GID || p.LocalACKTimeout() != 19 || p.PacketRate() != 0 {
		t.Errorf("primary path %+v", p.Fields())
	}
	if r.Alternate().LocalLID() != 0 || !bytes.Equal(r.Alternate(), make([]byte, mad.PathSize)) {
		t.Error("alternate path must be empty: cm_req_has_alt_path looks at its LID")
	}
	// A one-hop path is subnet-local with zero LIDs.
	p2 := connectParams(0x12, nil)
	p2.HopLimit = 1
	a.a.Connect(w.now, p2)
	q := mad.REQ(mad.MAD(w.queue[1].b).Data()).Primary()
	if q.LocalLID() != 0 || q.RemoteLID() != 0 || !q.SubnetLocal() {
		t.Errorf("one-hop path %+v", q.Fields())
	}
}

func TestReject(t *testing.T) {
	w, a, b := pair(t)
	b.onEvent = func(n *node, e Event) {
		if e.Type == EventRequest {
			if err := n.a.Reject(n.w.now, e.ID, mad.RejectConsumerDefined, []byte("go away")); err != nil {
				t.Fatal(err)
			}
		}
	}
	id := connect(t, w, a, 0x11)
	w.run()
	e, ok := a.last(EventRejected)
	if !ok || e.ID != id || !e.Freed || e.Reject.Reason != mad.RejectConsumerDefined ||
		!bytes.HasPrefix(e.Reject.PrivateData, []byte("go away")) || e.Reject.MessageRejected != mad.MsgREQ {
		t.Fatalf("A events %+v", a.events)
	}
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
	if b.a.Stats().RejectsSent != 1 {
		t.Error("RejectsSent")
	}
	rej := w.sentOf(peerB, mad.AttrREJ)[0]
	if mad.MAD(rej.b).TransactionID() != mad.MAD(w.sentOf(peerA, mad.AttrREQ)[0].b).TransactionID() {
		t.Error("REJ TID differs from the REQ's")
	}
}

func TestUnknownService(t *testing.T) {
	w, a, b := pair(t)
	p := connectParams(0x11, nil)
	p.ServiceID = mad.ServiceID(mad.PortSpaceTCP, 9)
	if _, err := a.a.Connect(w.now, p); err != nil {
		t.Fatal(err)
	}
	w.run()
	e, ok := a.last(EventRejected)
	if !ok || e.Reject.Reason != 8 || !e.Freed {
		t.Fatalf("A events %+v", a.events)
	}
	rej := mad.REJ(mad.MAD(w.sentOf(peerB, mad.AttrREJ)[0].b).Data())
	if rej.LocalCommID() != 0 || rej.MessageRejected() != mad.MsgREQ {
		t.Errorf("stateless REJ %+v", rej.Fields())
	}
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
	if len(b.events) != 0 {
		t.Errorf("B events %v", b.types())
	}
}

func TestDisconnect(t *testing.T) {
	for _, fromA := range []bool{true, false} {
		w, a, b := pair(t)
		aid := connect(t, w, a, 0x11)
		w.run()
		bid := b.events[0].ID
		init, other, id := a, b, aid
		if !fromA {
			init, other, id = b, a, bid
		}
		if err := init.a.Disconnect(w.now, id, []byte("bye")); err != nil {
			t.Fatal(err)
		}
		w.run()
		ie, ok1 := init.last(EventDisconnected)
		oe, ok2 := other.last(EventDisconnectRequest)
		if !ok1 || !ok2 || ie.TimedOut || !bytes.HasPrefix(oe.PrivateData, []byte("bye")) {
			t.Fatalf("fromA %v: init %v, other %v", fromA, init.types(), other.types())
		}
		for _, n := range []*node{a, b} {
			if st, _ := n.a.State(ID(n.events[0].ID)); st != StateTimeWait {
				t.Errorf("state %v, want TIMEWAIT", st)
			}
		}
		// The DREQ's TID is new; the DREP echoes it.
		dreq := w.sentOf(init.peer, mad.AttrDREQ)[0]
		drep := w.sentOf(other.peer, mad.AttrDREP)[0]
		if mad.MAD(dreq.b).TransactionID() != mad.MAD(drep.b).TransactionID() ||
			mad.MAD(dreq.b).TransactionID() == mad.MAD(w.sentOf(peerA, mad.AttrREQ)[0].b).TransactionID() {
			t.Error("DREQ/DREP TIDs")
		}
		if mad.DREQ(mad.MAD(dreq.b).Data()).RemoteQPN() != map[bool]uint32{true: 0x22, false: 0x11}[fromA] {
			t.Error("DREQ remote QPN")
		}
		w.advance(3 * sec)
		for name, n := range map[string]*node{"A": a, "B": b} {
			if n.count(EventTimeWaitExit) != 1 {
				t.Errorf("%s events %v", name, n.types())
			}
			checkEmpty(t, name, n.a)
		}
	}
}

// Each message kind lost once: retransmission recovers it, and every event
// happens exactly once.
func TestLossRecovery(t *testing.T) {
	for _, attr := range []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrMRA, mad.AttrDREQ, mad.AttrDREP} {
		t.Run(attr.String(), func(t *testing.T) {
			w, a, b := pair(t)
			if attr == mad.AttrMRA {
				// B asks for time, then accepts only after A's REQ came
				// again and got the MRA resent.
				b.onEvent = func(n *node, e Event) {
					if e.Type == EventRequest {
						n.a.SendMRA(w.now, e.ID, 18)
					}
				}
			}
			w.filter = dropFirst(attr, 1)
			aid := connect(t, w, a, 0x11)
			w.advance(30 * sec)
			if attr == mad.AttrMRA {
				if st, _ := a.a.State(aid); st != StateMRAREQRcvd {
					t.Fatalf("A state %v after the second MRA", st)
				}
				acceptAll(0x22)(b, b.events[0])
				w.advance(sec)
			}
			if a.count(EventReply) != 1 || b.count(EventRequest) != 1 || b.count(EventEstablished) != 1 {
				t.Fatalf("handshake events: A %v, B %v", a.types(), b.types())
			}
			if err := a.a.Disconnect(w.now, aid, nil); err != nil {
				t.Fatal(err)
			}
			w.advance(30 * sec)
			if a.count(EventDisconnected) != 1 || b.count(EventDisconnectRequest) != 1 ||
				a.count(EventTimeWaitExit) != 1 || b.count(EventTimeWaitExit) != 1 {
				t.Fatalf("disconnect events: A %v, B %v", a.types(), b.types())
			}
			if e, _ := a.last(EventDisconnected); e.TimedOut {
				t.Error("DREQ timed out")
			}
			sa, sb := a.a.Stats(), b.a.Stats()
			var re uint64
			for i := range sa.Retransmits {
				re += sa.Retransmits[i] + sb.Retransmits[i]
			}
			if re == 0 && attr != mad.AttrMRA {
				t.Error("no retransmission counted")
			}
			checkEmpty(t, "A", a.a)
			checkEmpty(t, "B", b.a)
		})
	}
}

// Every MAD delivered twice, and the queue shuffled: still one connection,
// each event once.
func TestDuplicatesAndReordering(t *testing.T) {
	for seed := range uint64(20) {
		w, a, b := pair(t)
		w.filter = func(packet) int { return 2 }
		w.shuffle = newRand(seed)
		aid := connect(t, w, a, 0x11)
		w.advance(20 * sec)
		if a.count(EventReply) != 1 || b.count(EventRequest) != 1 || b.count(EventEstablished) != 1 ||
			a.a.Len() != 1 || b.a.Len() != 1 {
			t.Fatalf("seed %d: A %v, B %v, %d/%d IDs", seed, a.types(), b.types(), a.a.Len(), b.a.Len())
		}
		a.a.Disconnect(w.now, aid, nil)
		w.advance(20 * sec)
		if a.count(EventDisconnected) != 1 || b.count(EventDisconnectRequest) != 1 {
			t.Fatalf("seed %d: A %v, B %v", seed, a.types(), b.types())
		}
		if b.a.Stats().Duplicates == 0 {
			t.Error("no duplicates counted")
		}
		checkEmpty(t, "A", a.a)
		checkEmpty(t, "B", b.a)
	}
}

// A duplicate REQ is ignored while pending, answered with the MRA after
// SendMRA, with the REP after Accept; a duplicate REP after RTU gets the
// RTU again; a duplicate DREQ in TimeWait gets the DREP again.
func TestDuplicateAnswers(t *testing.T) {
	w, a, b := pair(t)
	b.onEvent = nil
	aid := connect(t, w, a, 0x11)
	req := w.queue[0]
	w.run()
	bid := b.events[0].ID
	replay := func(p packet) { b.a.Receive(w.now, p.from, p.b); w.run() }

	before := len(w.log)
	replay(req)
	if len(w.log) != before || b.count(EventRequest) != 1 {
		t.Fatal("duplicate REQ while pending was answered")
	}
	b.a.SendMRA(w.now, bid, MRADelay|24)
	if len(w.log) != before {
		t.Fatal("a delayed MRA was sent at once")
	}
	replay(req)
	mras := w.sentOf(peerB, mad.AttrMRA)
	if len(mras) != 1 || mad.MRA(mad.MAD(mras[0].b).Data()).ServiceTimeout() != 24 {
		t.Fatalf("%d MRAs", len(mras))
	}
	if st, _ := a.a.State(aid); st != StateMRAREQRcvd {
		t.Errorf("A state %v after MRA", st)
	}
	a.onEvent = nil
	acceptAll(0x22)(b, b.events[0])
	w.run()
	replay(req)
	if n := len(w.sentOf(peerB, mad.AttrREP)); n != 2 {
		t.Fatalf("%d REPs after duplicate REQ", n)
	}
	rep := w.sentOf(peerB, mad.AttrREP)[0]
	a.a.SendRTU(w.now, aid, []byte("rtu"))
	w.run()
	a.a.Receive(w.now, rep.from, rep.b)
	w.run()
	if rtus := w.sentOf(peerA, mad.AttrRTU); len(rtus) != 2 || !bytes.HasPrefix(mad.RTU(mad.MAD(rtus[1].b).Data()).PrivateData(), []byte("rtu")) {
		t.Fatalf("%d RTUs after duplicate REP", len(rtus))
	}
	if b.count(EventEstablished) != 1 {
		t.Fatalf("B events %v", b.types())
	}
	replay(req) // established: ignored
	if n := len(w.sentOf(peerB, mad.AttrREP)); n != 2 {
		t.Fatal("duplicate REQ when established was answered")
	}
	a.a.Disconnect(w.now, aid, nil)
	dreq := w.queue[0]
	w.run()
	replay(dreq)
	if n := len(w.sentOf(peerB, mad.AttrDREP)); n != 2 || b.count(EventDisconnectRequest) != 1 {
		t.Fatalf("%d DREPs after duplicate DREQ, events %v", n, b.types())
	}
	replay(req) // TimeWait: REJ stale
	rej := w.sentOf(peerB, mad.AttrREJ)
	if len(rej) != 1 || mad.REJ(mad.MAD(rej[0].b).Data()).Reason() != mad.RejectStaleConn {
		t.Fatal("duplicate REQ in TimeWait not rejected as stale")
	}
	w.advance(5 * sec)
	// After TimeWait, a DREQ for the forgotten ID still gets a DREP.
	replay(dreq)
	if n := len(w.sentOf(peerB, mad.AttrDREP)); n != 3 {
		t.Fatalf("%d DREPs for a forgotten ID", n)
	}
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
}

func TestEstablishedBeforeRTU(t *testing.T) {
	w, a, b := pair(t)
	w.filter = dropFirst(mad.AttrRTU, 100)
	connect(t, w, a, 0x11)
	w.run()
	bid := b.events[0].ID
	if err := b.a.Established(w.now, bid); err != nil {
		t.Fatal(err)
	}
	if err := b.a.Established(w.now, bid); err != nil {
		t.Fatal(err)
	}
	w.advance(60 * sec)
	if b.count(EventEstablished) != 1 || len(w.sentOf(peerB, mad.AttrREP)) != 1 {
		t.Fatalf("B events %v, %d REPs", b.types(), len(w.sentOf(peerB, mad.AttrREP)))
	}
}

func TestMRAStretchesWait(t *testing.T) {
	w, a, b := pair(t)
	b.onEvent = func(n *node, e Event) {
		if e.Type == EventRequest {
			n.a.SendMRA(w.now, e.ID, 20) // about 4.1 s + 2.0 s per try, kernel rounding
		}
	}
	connect(t, w, a, 0x11)
	w.advance(6100 * ms)
	if n := len(w.sentOf(peerA, mad.AttrREQ)); n != 1 {
		t.Fatalf("%d REQs within the MRA's wait", n)
	}
	w.advance(100 * ms)
	if n := len(w.sentOf(peerA, mad.AttrREQ)); n != 2 {
		t.Fatalf("%d REQs after the MRA's wait", n)
	}
}

func TestStaleConnection(t *testing.T) {
	w, a, b := pair(t)
	first := connect(t, w, a, 0x11)
	w.run()
	// The same QP asks again, as after a crash and restart.
	second := connect(t, w, a, 0x11)
	w.run()
	e, ok := a.last(EventRejected)
	if !ok || e.ID != second || e.Reject.Reason != mad.RejectStaleConn {
		t.Fatalf("A events %v", a.types())
	}
	// ...and B disconnects the old connection.
	if e, ok := a.last(EventDisconnectRequest); !ok || e.ID != first {
		t.Fatalf("A events %v", a.types())
	}
	w.advance(10 * sec)
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
}

// Destroy in REQ_SENT sends REJ "timeout" carrying our GUID, which the
// passive side finds by the GUID and our comm ID.
func TestDestroyPendingConnect(t *testing.T) {
	w, a, b := pair(t)
	b.onEvent = nil
	id := connect(t, w, a, 0x11)
	w.run()
	if err := a.a.Destroy(w.now, id); err != nil {
		t.Fatal(err)
	}
	w.run()
	e, ok := b.last(EventRejected)
	if !ok || e.Reject.Reason != mad.RejectTimeout || !e.Freed || binary.BigEndian.Uint64(e.Reject.ARI) != guidA {
		t.Fatalf("B events %+v", b.events)
	}
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
	if err := a.a.Destroy(w.now, id); !errors.Is(err, ErrUnknownID) {
		t.Errorf("second Destroy: %v", err)
	}
}

func TestAPIErrors(t *testing.T) {
	w, a, b := pair(t)
	b.onEvent = nil
	if _, err := a.a.Connect(w.now, connectParams(0, nil)); !errors.Is(err, ErrParam) {
		t.Errorf("QPN 0: %v", err)
	}
	if _, err := a.a.Connect(w.now, connectParams(1<<24, nil)); !errors.Is(err, ErrParam) {
		t.Errorf("QPN 2^24: %v", err)
	}
	if _, err := a.a.Connect(w.now, connectParams(1, make([]byte, 93))); !errors.Is(err, ErrPrivateData) {
		t.Errorf("93 bytes of private data: %v", err)
	}
	if err := b.a.Listen(service, 1); !errors.Is(err, ErrListening) {
		t.Errorf("second Listen: %v", err)
	}
	if err := b.a.Unlisten(1); !errors.Is(err, ErrNotListened) {
		t.Errorf("Unlisten: %v", err)
	}
	id := connect(t, w, a, 0x11)
	if err := a.a.SendRTU(w.now, id, nil); !errors.Is(err, ErrState) {
		t.Errorf("SendRTU in REQ_SENT: %v", err)
	}
	if err := a.a.Disconnect(w.now, id, nil); !errors.Is(err, ErrState) {
		t.Errorf("Disconnect in REQ_SENT: %v", err)
	}
	if err := a.a.Reject(w.now, id, mad.RejectConsumerDefined, nil); !errors.Is(err, ErrState) {
		t.Errorf("Reject in REQ_SENT: %v", err)
	}
	if err := a.a.Accept(w.now, 12345, RepParams{QPN: 1}); !errors.Is(err, ErrUnknownID) {
		t.Errorf("Accept of an unknown ID: %v", err)
	}
	w.run()
	bid := b.events[0].ID
	if err := b.a.Accept(w.now, bid, RepParams{QPN: 0}); !errors.Is(err, ErrParam) {
		t.Errorf("Accept QPN 0: %v", err)
	}
	if err := b.a.Accept(w.now, bid, RepParams{QPN: 1, PrivateData: make([]byte, 197)}); !errors.Is(err, ErrPrivateData) {
		t.Errorf("Accept 197 bytes: %v", err)
	}
	if err := b.a.Established(w.now, bid); !errors.Is(err, ErrState) {
		t.Errorf("Established in REQ_RCVD: %v", err)
	}
	if err := b.a.Accept(w.now, bid, RepParams{QPN: 1, PrivateData: make([]byte, 196)}); err != nil {
		t.Errorf("Accept 196 bytes: %v", err)
	}
	if err := b.a.Accept(w.now, bid, RepParams{QPN: 1}); !errors.Is(err, ErrState) {
		t.Errorf("second Accept: %v", err)
	}
}

func TestSIDRUnsupported(t *testing.T) {
	w, _, b := pair(t)
	buf := make([]byte, mad.Size)
	h := mad.CMHeader(mad.AttrSIDRREQ, 0x77)
	mad.MAD(buf).EncodeHeader(&h)
	mad.SIDRREQ(mad.MAD(buf).Data()).Encode(&mad.SIDRREQFields{RequestID: 5, PKey: 0xffff, ServiceID: mad.ServiceID(mad.PortSpaceUDP, 1)})
	b.a.Receive(w.now, peerA, buf)
	reps := w.sentOf(peerB, mad.AttrSIDRREP)
	if len(reps) != 1 {
		t.Fatal("no SIDR_REP")
	}
	r := mad.SIDRREP(mad.MAD(reps[0].b).Data())
	if r.RequestID() != 5 || r.Status() != mad.SIDRUnsupported || mad.MAD(reps[0].b).TransactionID() != 0x77 {
		t.Errorf("SIDR_REP %+v", r.Fields())
	}
	checkEmpty(t, "B", b.a)
}

// The active side asks for time on the REP as rdma_cm does (a delayed MRA
// with service timeout 24, sent on the duplicate REP); the passive side
// stretches its REP wait and the RTU still completes the connection.
func TestMRAForREP(t *testing.T) {
	w, a, b := pair(t)
	a.onEvent = func(n *node, e Event) {
		if e.Type == EventReply {
			if err := n.a.SendMRA(w.now, e.ID, MRADelay|24); err != nil {
				t.Fatal(err)
			}
		}
	}
	aid := connect(t, w, a, 0x11)
	w.run()
	bid := b.events[0].ID
	w.advance(1500 * ms) // B's REP comes again and gets the MRA
	if st, _ := b.a.State(bid); st != StateMRAREPRcvd {
		t.Fatalf("B state %v", st)
	}
	reps := len(w.sentOf(peerB, mad.AttrREP))
	w.advance(60 * sec) // well within 65.5 s + 2 s
	if len(w.sentOf(peerB, mad.AttrREP)) != reps {
		t.Fatal("REP retransmitted within the MRA's wait")
	}
	if err := a.a.SendRTU(w.now, aid, nil); err != nil {
		t.Fatal(err)
	}
	w.run()
	if b.count(EventEstablished) != 1 {
		t.Fatalf("B events %v", b.types())
	}
}

// The REP, byte by byte where the kernel reads it (cm_format_rep_event).
func TestREPBytes(t *testing.T) {
	w, a, _ := pair(t)
	a.onEvent = nil
	id := connect(t, w, a, 0x11)
	w.run()
	m := mad.MAD(w.sentOf(peerB, mad.AttrREP)[0].b)
	d := m.Data()
	if m[0] != 1 || m[1] != 7 || m[2] != 2 || m[3] != 3 || binary.BigEndian.Uint16(m[16:]) != 0x13 {
		t.Errorf("header % x", m[:24])
	}
	if binary.BigEndian.Uint32(d[4:]) != uint32(id) || // remote comm ID
		binary.BigEndian.Uint32(d[12:])>>8 != 0x22 || // local QPN
		binary.BigEndian.Uint32(d[20:])>>8 != 0x222222 || // starting PSN
		d[24] != 4 || d[25] != 4 || // responder resources, initiator depth
		d[26] != 15<<3 || // target ACK delay 15, failover 0, no flow control
		d[27] != 7<<5 || // RNR retry 7, no SRQ
		binary.BigEndian.Uint64(d[28:]) != guidB {
		t.Errorf("REP % x", d[:36])
	}
}
