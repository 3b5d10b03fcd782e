package ibcm

import (
	"errors"
	"slices"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
)

const udpService = 0x0111<<16 | 7174 // rdma_cm UDP port 7174 (udaddy's default)

// sidrPair returns a wire with a requester A and a responder B listening
// on udpService and answering with QPN 0x22, Q_Key 0x01234567.
func sidrPair(t testing.TB) (*wire, *node, *node) {
	w := newWire(t)
	a := w.add(peerA, guidA, Config{})
	b := w.add(peerB, guidB, Config{})
	if err := b.a.Listen(udpService, 8); err != nil {
		t.Fatal(err)
	}
	b.onEvent = answerSIDR(mad.SIDRSuccess)
	return w, a, b
}

func answerSIDR(st mad.SIDRStatus) func(*node, Event) {
	return func(n *node, e Event) {
		if e.Type == EventSIDRRequest {
			if err := n.a.SIDRReply(n.w.now, e.ID, SIDRReplyParams{Status: st, QPN: 0x22, QKey: 0x01234567, PrivateData: []byte("rep")}); err != nil {
				panic(err)
			}
		}
	}
}

func resolve(t testing.TB, w *wire, a *node) ID {
	t.Helper()
	id, err := a.a.ResolveSIDR(w.now, SIDRParams{ServiceID: udpService, RemoteGID: peerB.GID, PrivateData: cmaPrivate(t)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestSIDR(t *testing.T) {
	w, a, b := sidrPair(t)
	id := resolve(t, w, a)
	if st, _ := a.a.State(id); st != StateSIDRREQSent {
		t.Fatalf("A state %v", st)
	}
	w.run()
	if !slices.Equal(a.types(), []EventType{EventSIDRReply}) || !slices.Equal(b.types(), []EventType{EventSIDRRequest}) {
		t.Fatalf("events: A %v, B %v", a.types(), b.types())
	}
	req := b.events[0]
	r := req.SIDRRequest
	if r.RequestID != uint32(id) || r.ServiceID != udpService || r.PKey != 0xffff || req.Peer != peerA {
		t.Errorf("SIDR_REQ %+v from %v", r, req.Peer)
	}
	if h := mad.CMAHeader(r.PrivateData); h.Src() != addrA || h.Dst() != addrB || h.Port() != 40000 {
		t.Errorf("private data %x", r.PrivateData[:40])
	}
	e := a.events[0]
	rep := e.SIDRReply
	if e.ID != id || !e.Freed || rep.Status != mad.SIDRSuccess || rep.QPN != 0x22 || rep.QKey != 0x01234567 ||
		rep.RequestID != uint32(id) || rep.ServiceID != udpService || string(rep.PrivateData[:3]) != "rep" {
		t.Errorf("SIDR_REP event %+v", e)
	}
	// The SIDR_REP echoes the SIDR_REQ's TID.
	reqs, reps := w.sentOf(peerA, mad.AttrSIDRREQ), w.sentOf(peerB, mad.AttrSIDRREP)
	if len(reqs) != 1 || len(reps) != 1 || mad.MAD(reqs[0].b).TransactionID() != mad.MAD(reps[0].b).TransactionID() {
		t.Fatalf("%d SIDR_REQ, %d SIDR_REP, TIDs differ", len(reqs), len(reps))
	}
	checkEmpty(t, "A", a.a)
	if st, ok := b.a.State(req.ID); !ok || st != StateSIDRREPSent {
		t.Errorf("B state %v, %v: not holding the answer", st, ok)
	}
	w.advance(b.a.Config().SIDRHold)
	checkEmpty(t, "B", b.a)
	if n := len(b.events); n != 1 {
		t.Errorf("B events after the hold: %v", b.types())
	}
}

// A lost SIDR_REP: A retransmits, B answers the duplicate from its table
// and its listener hears of the request once.
func TestSIDRLostReply(t *testing.T) {
	for _, attr := range []mad.AttrID{mad.AttrSIDRREQ, mad.AttrSIDRREP} {
		t.Run(attr.String(), func(t *testing.T) {
			w, a, b := sidrPair(t)
			w.filter = dropFirst(attr, 2)
			resolve(t, w, a)
			w.advance(20 * sec)
			if a.count(EventSIDRReply) != 1 || b.count(EventSIDRRequest) != 1 {
				t.Fatalf("events: A %v, B %v", a.types(), b.types())
			}
			if got := a.a.Stats().Retransmits[mad.AttrSIDRREQ.CMIndex()]; got != 2 {
				t.Errorf("%d SIDR_REQ retransmissions, want 2", got)
			}
			if attr == mad.AttrSIDRREP && b.a.Stats().Duplicates != 2 {
				t.Errorf("B counted %d duplicates", b.a.Stats().Duplicates)
			}
			checkEmpty(t, "A", a.a)
			checkEmpty(t, "B", b.a)
		})
	}
}

// Duplicates while the listener decides are ignored; every MAD twice and
// shuffled still makes one resolution each side.
func TestSIDRDuplicates(t *testing.T) {
	w, a, b := sidrPair(t)
	var pending ID
	b.onEvent = func(n *node, e Event) { pending = e.ID }
	w.filter = func(packet) int { return 3 }
	resolve(t, w, a)
	w.run()
	if b.count(EventSIDRRequest) != 1 || len(w.sentOf(peerB, mad.AttrSIDRREP)) != 0 {
		t.Fatalf("B events %v", b.types())
	}
	if err := b.a.SIDRReply(w.now, pending, SIDRReplyParams{QPN: 0x22, QKey: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.a.SIDRReply(w.now, pending, SIDRReplyParams{QPN: 0x22, QKey: 1}); !errors.Is(err, ErrState) {
		t.Errorf("second SIDRReply: %v", err)
	}
	w.advance(20 * sec)
	if a.count(EventSIDRReply) != 1 {
		t.Errorf("A events %v", a.types())
	}
	for seed := range uint64(10) {
		w, a, b := sidrPair(t)
		w.filter = func(packet) int { return 2 }
		w.shuffle = newRand(seed)
		resolve(t, w, a)
		resolve(t, w, a)
		w.advance(20 * sec)
		if a.count(EventSIDRReply) != 2 || b.count(EventSIDRRequest) != 2 {
			t.Fatalf("seed %d: A %v, B %v", seed, a.types(), b.types())
		}
		checkEmpty(t, "A", a.a)
		checkEmpty(t, "B", b.a)
	}
}

// No listener: status Unsupported, what rdma_cm reports as
// RDMA_CM_EVENT_UNREACHABLE; a refusal reaches the requester as sent.
func TestSIDRRefused(t *testing.T) {
	w, a, b := sidrPair(t)
	b.a.Unlisten(udpService)
	resolve(t, w, a)
	w.run()
	if e, ok := a.last(EventSIDRReply); !ok || e.SIDRReply.Status != mad.SIDRUnsupported {
		t.Fatalf("A events %v", a.types())
	}
	checkEmpty(t, "B", b.a)

	b.a.Listen(udpService, 8)
	b.onEvent = answerSIDR(mad.SIDRReject)
	resolve(t, w, a)
	w.run()
	if e, _ := a.last(EventSIDRReply); e.SIDRReply.Status != mad.SIDRReject {
		t.Fatalf("status %v", e.SIDRReply.Status)
	}
	checkEmpty(t, "A", a.a)
}

// Nobody answers: A gives up after its retries; B's listener never
// answers: B refuses the request once the requester would have given up.
func TestSIDRTimeouts(t *testing.T) {
	w, a, b := sidrPair(t)
	w.filter = func(p packet) int {
		if p.attr() == mad.AttrSIDRREQ {
			return 0
		}
		return 1
	}
	id := resolve(t, w, a)
	w.advance(200 * sec)
	if e, ok := a.last(EventTimeout); !ok || e.ID != id || e.State != StateSIDRREQSent || !e.Freed {
		t.Fatalf("A events %v", a.types())
	}
	if got := len(w.sentOf(peerA, mad.AttrSIDRREQ)); got != int(DefaultMaxCMRetries)+1 {
		t.Errorf("%d SIDR_REQs sent", got)
	}
	checkEmpty(t, "A", a.a)

	w.filter = nil
	b.onEvent = nil
	resolve(t, w, a)
	w.advance(200 * sec)
	if e, ok := b.last(EventTimeout); !ok || e.State != StateSIDRREQRcvd {
		t.Fatalf("B events %v", b.types())
	}
	// B refused it (as cm_destroy_id does), after A, whose retries
	// are shorter than the kernel's, gave up.
	if reps := w.sentOf(peerB, mad.AttrSIDRREP); len(reps) != 1 || mad.SIDRREP(mad.MAD(reps[0].b).Data()).Status() != mad.SIDRReject {
		t.Fatalf("B sent %d SIDR_REPs", len(reps))
	}
	if a.count(EventTimeout) != 2 {
		t.Fatalf("A events %v", a.types())
	}
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
}

// Destroy abandons a resolution on either side; a SIDR_REP for it later
// is dropped.
func TestSIDRDestroy(t *testing.T) {
	w, a, b := sidrPair(t)
	b.onEvent = nil
	id := resolve(t, w, a)
	if err := a.a.Destroy(w.now, id); err != nil {
		t.Fatal(err)
	}
	w.run()
	e, ok := b.last(EventSIDRRequest)
	if !ok {
		t.Fatal("no request")
	}
	if err := b.a.Destroy(w.now, e.ID); err != nil {
		t.Fatal(err)
	}
	w.run()
	if len(a.events) != 0 || a.a.Stats().Dropped[DropUnknownID] != 1 {
		t.Errorf("A events %v, drops %v", a.types(), a.a.Stats().Dropped)
	}
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
}

// A flood of SIDR_REQs costs at most the backlog unanswered and
// MaxSIDRHeld answered.
func TestSIDRFlood(t *testing.T) {
	w := newWire(t)
	b := w.add(peerB, guidB, Config{MaxSIDRHeld: 10})
	b.a.Listen(udpService, 4)
	buf := make([]byte, mad.Size)
	for i := range uint32(100) {
		h := mad.CMHeader(mad.AttrSIDRREQ, uint64(i))
		mad.MAD(buf).EncodeHeader(&h)
		mad.SIDRREQ(mad.MAD(buf).Data()).Encode(&mad.SIDRREQFields{RequestID: i, ServiceID: udpService})
		b.a.Receive(w.now, peerA, buf)
		checkInvariants(t, b.a)
	}
	if b.a.Len() != 4 || b.count(EventSIDRRequest) != 4 || b.a.Stats().Dropped[DropBacklog] != 96 {
		t.Fatalf("%d IDs, %d requests, %d dropped", b.a.Len(), b.count(EventSIDRRequest), b.a.Stats().Dropped[DropBacklog])
	}
	b.onEvent = answerSIDR(mad.SIDRSuccess)
	for _, e := range slices.Clone(b.events) {
		answerSIDR(mad.SIDRSuccess)(b, e)
	}
	for i := range uint32(100) {
		h := mad.CMHeader(mad.AttrSIDRREQ, uint64(i))
		mad.MAD(buf).EncodeHeader(&h)
		mad.SIDRREQ(mad.MAD(buf).Data()).Encode(&mad.SIDRREQFields{RequestID: 1000 + i, ServiceID: udpService})
		b.a.Receive(w.now, peerA, buf)
		checkInvariants(t, b.a)
	}
	if b.a.Len() != 10 || b.a.sidrHeld != 10 {
		t.Errorf("%d IDs, %d held", b.a.Len(), b.a.sidrHeld)
	}
	w.advance(b.a.Config().SIDRHold)
	w.queue = nil
	checkEmpty(t, "B", b.a)
}

func TestSIDRAPIErrors(t *testing.T) {
	w, a, b := sidrPair(t)
	if _, err := a.a.ResolveSIDR(w.now, SIDRParams{ServiceID: udpService}); !errors.Is(err, ErrParam) {
		t.Errorf("zero GID: %v", err)
	}
	if _, err := a.a.ResolveSIDR(w.now, SIDRParams{RemoteGID: peerB.GID, PrivateData: make([]byte, 217)}); !errors.Is(err, ErrPrivateData) {
		t.Errorf("long private data: %v", err)
	}
	b.onEvent = nil
	resolve(t, w, a)
	w.run()
	id := b.events[0].ID
	for _, p := range []SIDRReplyParams{{QPN: 0}, {QPN: 1 << 24}, {QPN: 1, PrivateData: make([]byte, 137)}} {
		if err := b.a.SIDRReply(w.now, id, p); err == nil {
			t.Errorf("SIDRReply %+v: no error", p)
		}
	}
	if err := b.a.SIDRReply(w.now, 12345, SIDRReplyParams{QPN: 1}); !errors.Is(err, ErrUnknownID) {
		t.Errorf("unknown ID: %v", err)
	}
	if err := b.a.SIDRReply(w.now, id, SIDRReplyParams{Status: mad.SIDRNoQP}); err != nil {
		t.Errorf("refusal without QPN: %v", err)
	}
}
