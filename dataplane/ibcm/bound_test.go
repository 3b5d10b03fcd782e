package ibcm

import (
	"slices"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// floodREQ builds a REQ as a peer with guid would send it.
func floodREQ(commID, qpn uint32, guid uint64) []byte {
	b := make([]byte, mad.Size)
	h := mad.CMHeader(mad.AttrREQ, uint64(commID))
	mad.MAD(b).EncodeHeader(&h)
	mad.REQ(mad.MAD(b).Data()).Encode(&mad.REQFields{
		LocalCommID: commID, ServiceID: service, LocalCAGUID: guid, LocalQPN: qpn,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15,
		PKey: 0xffff, PathMTU: mad.MTU1024, StartingPSN: 1,
		Primary: mad.PathFields{LocalGID: peerA.GID, RemoteGID: peerB.GID, HopLimit: 64, LocalACKTimeout: 19},
	})
	return b
}

// 10 000 distinct REQs to a backlog-8 listener that never answers: at most
// 8 are kept, whatever arrives, and they expire.
func TestREQFlood(t *testing.T) {
	for _, reject := range []bool{false, true} {
		w := newWire(t)
		b := w.add(peerB, guidB, Config{RejectOnBacklog: reject})
		b.a.Listen(service, 8)
		for i := range uint32(10000) {
			b.a.Receive(w.now, peerA, floodREQ(i+1, i+100, uint64(i)))
			if len(b.a.conns) > 8 || len(b.a.byRemote) > 8 || len(b.a.byQP) > 8 || len(b.a.timers) > 8 {
				t.Fatalf("after %d REQs: %d conns, %d/%d indexed, %d timers",
					i+1, len(b.a.conns), len(b.a.byRemote), len(b.a.byQP), len(b.a.timers))
			}
		}
		checkInvariants(t, b.a)
		s := b.a.Stats()
		if s.Dropped[DropBacklog] != 10000-8 || b.count(EventRequest) != 8 {
			t.Errorf("backlog drops %d, requests %d", s.Dropped[DropBacklog], b.count(EventRequest))
		}
		rejs := len(w.sentOf(peerB, mad.AttrREJ))
		if reject && (rejs != 10000-8 || mad.REJ(mad.MAD(w.sentOf(peerB, mad.AttrREJ)[0].b).Data()).Reason() != mad.RejectNoResources) {
			t.Errorf("RejectOnBacklog: %d REJs", rejs)
		}
		if !reject && rejs != 0 {
			t.Errorf("%d REJs without RejectOnBacklog", rejs)
		}
		// The requests expire once their senders would have given up:
		// 16 tries of 2 × 1.024 s + 4.096 s.
		w.advance(16*6144*ms - sec)
		if b.a.Len() != 8 {
			t.Fatalf("requests expired early: %d left", b.a.Len())
		}
		w.advance(2 * sec)
		if b.count(EventTimeout) != 8 {
			t.Errorf("%d timeouts", b.count(EventTimeout))
		}
		checkEmpty(t, "B", b.a)
		// Room again.
		b.a.Receive(w.now, peerA, floodREQ(20000, 5, 1))
		if b.a.Len() != 1 {
			t.Error("backlog not freed")
		}
	}
}

// A peer that vanishes at any point leaves nothing behind after a bounded
// time, and the local side hears of it once.
func TestVanishedPeer(t *testing.T) {
	// Retransmission schedule with the defaults: 1, 2, 4 s, then 6.144 s
	// for the remaining 13 waits of 16 transmissions.
	bound := (1+2+4)*sec + 13*6144*ms
	cases := []struct {
		name string
		// cut returns true for packets that stop arriving.
		cut   func(p packet) bool
		setup func(w *wire, a, b *node)
		wantA []EventType
		wantB []EventType
	}{
		{
			name:  "before REQ",
			cut:   func(p packet) bool { return true },
			wantA: []EventType{EventTimeout},
		},
		{
			// B gives up on its REP (16 tries, at most 4.096 s apart)
			// before A gives up on its REQ (6.144 s apart), so A's last
			// REQs make a new request at B, which gives up again.
			name:  "before REP",
			cut:   func(p packet) bool { return p.attr() != mad.AttrREQ },
			wantA: []EventType{EventTimeout},
			wantB: []EventType{EventRequest, EventTimeout, EventRequest, EventTimeout},
		},
		{
			name:  "before RTU",
			cut:   func(p packet) bool { return p.attr() == mad.AttrRTU },
			wantA: []EventType{EventReply},
			wantB: []EventType{EventRequest, EventTimeout},
		},
		{
			name: "caller never sends RTU",
			setup: func(w *wire, a, b *node) {
				a.onEvent = nil
			},
			cut:   func(p packet) bool { return p.attr() == mad.AttrRTU },
			wantA: []EventType{EventReply, EventTimeout},
			wantB: []EventType{EventRequest, EventTimeout},
		},
		{
			name: "caller never accepts",
			setup: func(w *wire, a, b *node) {
				b.onEvent = nil
			},
			cut:   func(p packet) bool { return false },
			wantA: []EventType{EventTimeout},
			wantB: []EventType{EventRequest, EventTimeout},
		},
		{
			name:  "during disconnect",
			cut:   func(p packet) bool { return p.attr() == mad.AttrDREQ },
			wantA: []EventType{EventReply, EventDisconnected, EventTimeWaitExit},
			wantB: []EventType{EventRequest, EventEstablished},
			setup: func(w *wire, a, b *node) {
				a.onEvent = func(n *node, e Event) {
					if e.Type == EventReply {
						n.a.SendRTU(w.now, e.ID, nil)
						n.a.Disconnect(w.now, e.ID, nil)
					}
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, a, b := pair(t)
			if tc.setup != nil {
				tc.setup(w, a, b)
			}
			w.filter = func(p packet) int {
				if tc.cut(p) {
					return 0
				}
				return 1
			}
			connect(t, w, a, 0x11)
			w.advance(2*bound + 30*sec) // the peers' patience, then TimeWait
			if got := a.types(); !equalTypes(got, tc.wantA) {
				t.Errorf("A events %v, want %v", got, tc.wantA)
			}
			if got := b.types(); !equalTypes(got, tc.wantB) {
				t.Errorf("B events %v, want %v", got, tc.wantB)
			}
			// An established side cannot know its peer vanished: the
			// QP finds out, not the CM.
			if tc.name != "before RTU" {
				checkEmpty(t, "A", a.a)
			}
			if tc.name != "during disconnect" {
				checkEmpty(t, "B", b.a)
			}
			for _, n := range []*node{a, b} {
				for _, e := range n.events {
					if e.Type == EventTimeout && !e.Freed {
						t.Error("a timeout must free the ID")
					}
				}
			}
		})
	}
}

func equalTypes(a, b []EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The REQ goes out 16 times, after waits of 1, 2, 4 and then 6.144 s, and
// the timeout comes one wait after the last. An accepted connection's REP
// waits at most the REQ's local CM response timeout (4.096 s).
func TestRetransmissionSchedule(t *testing.T) {
	for _, passive := range []bool{false, true} {
		w, a, b := pair(t)
		a.onEvent = nil
		start := w.now
		reqs := 0
		w.filter = func(p packet) int {
			if passive && p.attr() == mad.AttrREQ && reqs == 0 {
				reqs++
				return 1
			}
			return 0
		}
		connect(t, w, a, 0x11)
		w.advance(200 * sec)
		from, attr, step := peerA, mad.AttrREQ, 6144*ms
		if passive {
			from, attr, step = peerB, mad.AttrREP, 4096*ms
		}
		want := []int64{0, sec, 3 * sec, 7 * sec}
		for i := range 12 {
			want = append(want, 7*sec+int64(i+1)*step)
		}
		var at []int64
		for _, p := range w.sentOf(from, attr) {
			at = append(at, p.at-start)
		}
		if !slices.Equal(at, want) {
			t.Fatalf("passive %v: sent at %v, want %v", passive, at, want)
		}
		n := a
		if passive {
			n = b
		}
		e, _ := n.last(EventTimeout)
		if st := map[bool]State{false: StateREQSent, true: StateREPSent}[passive]; e.State != st ||
			n.a.Stats().Retransmits[attr.CMIndex()] != 15 {
			t.Errorf("timeout %+v, stats %+v", e, n.a.Stats())
		}
	}
}

func TestMalformed(t *testing.T) {
	w, _, b := pair(t)
	good := floodREQ(1, 2, 3)
	edit := func(f func([]byte)) []byte {
		c := append([]byte(nil), good...)
		f(c)
		return c
	}
	for _, tc := range []struct {
		b    []byte
		want DropReason
	}{
		{good[:100], DropShort},
		{nil, DropShort},
		{edit(func(b []byte) { b[0] = 2 }), DropVersion},
		{edit(func(b []byte) { b[1] = 0x03 }), DropNotCM},
		{edit(func(b []byte) { b[2] = 1 }), DropClassVersion},
		{edit(func(b []byte) { b[3] = mad.MethodGet }), DropMethod},
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(0x30) }), DropAttribute},
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrClassPortInfo) }), DropUnsupported},
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrLAP) }), DropUnsupported},
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrAPR) }), DropUnsupported},
		{edit(func(b []byte) { clear(b[mad.HeaderSize : mad.HeaderSize+4]) }), DropInvalid},                          // comm ID 0
		{edit(func(b []byte) { clear(b[mad.HeaderSize+32 : mad.HeaderSize+35]) }), DropInvalid},                      // QPN 0
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrRTU) }), DropUnknownID},                             // RTU for nothing
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrREP) }), DropUnknownID},                             // REP for nothing
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrDREP) }), DropUnknownID},                            // DREP for nothing
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrMRA) }), DropUnknownID},                             // MRA for nothing
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrREJ); b[mad.HeaderSize+8] = 0x40 }), DropUnknownID}, // REJ for nothing
		{edit(func(b []byte) { mad.MAD(b).SetAttributeID(mad.AttrSIDRREP) }), DropUnknownID},                         // SIDR_REP for nothing
	} {
		before := b.a.Stats()
		b.a.Receive(w.now, peerA, tc.b)
		after := b.a.Stats()
		if after.Dropped[tc.want] != before.Dropped[tc.want]+1 {
			t.Errorf("%x...: not dropped as %v (%v)", tc.b[:min(len(tc.b), 4)], tc.want, after.Dropped)
		}
	}
	if len(b.events) != 0 || b.a.Len() != 0 {
		t.Errorf("events %v", b.types())
	}
	if s := b.a.Stats(); s.Malformed() != 8 || s.Dropped[DropNotCM] != 1 {
		t.Errorf("malformed %d, %v", s.Malformed(), s.Dropped)
	}
	if DropBacklog.String() != "backlog" || NumDropReasons.String() != "drop(?)" {
		t.Error("DropReason.String")
	}
}

// An established side that receives a REJ, and a REJ after the REP.
func TestRejectAfterReply(t *testing.T) {
	w, a, b := pair(t)
	a.onEvent = func(n *node, e Event) {
		if e.Type == EventReply {
			n.a.Reject(w.now, e.ID, mad.RejectConsumerDefined, nil)
		}
	}
	connect(t, w, a, 0x11)
	w.run()
	e, ok := b.last(EventRejected)
	if !ok || e.Reject.MessageRejected != mad.MsgREP || e.State != StateREPSent || !e.Freed {
		t.Fatalf("B events %v", b.types())
	}
	// Both forget the connection at once (cm_reset_to_idle on both sides).
	checkEmpty(t, "A", a.a)
	checkEmpty(t, "B", b.a)
}

func TestAckTimeout(t *testing.T) {
	// cm_ack_timeout(ca_ack_delay, packet_life_time), by hand.
	for _, tc := range []struct{ delay, life, want uint8 }{
		{15, 18, 19}, {0, 18, 19}, {18, 18, 20}, {19, 18, 20}, {20, 18, 21}, {25, 18, 25}, {31, 31, 31}, {0, 0, 2},
	} {
		if got := ackTimeout(tc.delay, tc.life); got != tc.want {
			t.Errorf("ackTimeout(%d, %d) = %d, want %d", tc.delay, tc.life, got, tc.want)
		}
	}
	if kernelMs(20) != 4096*ms || kernelMs(5) != ms || kernelMs(18) != 1024*ms {
		t.Error("kernelMs")
	}
	cfg := New(Config{}).Config()
	if cfg.MaxRetryInterval != 6144*ms || cfg.TimeWait != 2048*ms || cfg.RetryInterval != sec ||
		cfg.CMResponseTimeout != 20 || cfg.MaxCMRetries != 15 || cfg.PacketLifeTime != 18 {
		t.Errorf("defaults %+v", cfg)
	}
}

func TestStrings(t *testing.T) {
	if StateMRAREPRcvd.String() != "MRA_REP_RCVD" || State(0).String() != "state(?)" ||
		EventDisconnectRequest.String() != "DisconnectRequest" || EventType(0).String() != "event(?)" {
		t.Error("String")
	}
	if PeerFromAddr(addrA).Addr() != addrA || peerA.GID[10] != 0xff || peerA.GID[15] != 10 {
		t.Error("Peer address mapping")
	}
}
