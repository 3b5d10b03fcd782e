package rxereplay

// softfabric's side of the RDMA-CM captures, replayed: a fresh ibcm.Agent,
// configured and driven as fabric's connection manager (fabric/rdmacm.go)
// configures and drives it, is fed rxe's MADs at their capture times, and
// every MAD it sends must be the one softfabric sent, byte for byte. What
// softfabric chose at random (its comm ID, the TIDs of its requests, its
// QPN and first PSN) is taken from what rxe echoed or how it addressed its
// RC packets, never from softfabric's own MADs, which are what is checked.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/internal/pcapfix"
)

// What fabric/rdmacm.go passes the agent, repeated here (unexported there).
const (
	fabricRdAtomic = 16  // cmRdAtomic
	fabricBacklog  = 128 // cmBacklog
)

// fabricMTU is fabric's mtuCode: the largest IBTA MTU within n bytes.
func fabricMTU(n int) mad.MTU {
	for c := mad.MTU4096; c > mad.MTU256; c-- {
		if c.Bytes() <= n {
			return c
		}
	}
	return mad.MTU256
}

// fabricClamp clamps a peer's read/atomic depth as fabric's rdAtomic does.
func fabricClamp(peer uint8) uint8 { return max(1, min(peer, fabricRdAtomic)) }

// fabricFrame is fabric's framePrivate: a length byte, then the data.
func fabricFrame(b []byte) []byte { return append([]byte{byte(len(b))}, b...) }

// drawn is a rand.Source that returns, in turn, the random numbers
// softfabric drew in a capture (newID draws a comm ID from the low 32 bits
// of one number, newTID takes one whole).
type drawn struct {
	t     testing.TB
	vals  []uint64
	names []string
}

func (d *drawn) Uint64() uint64 {
	if len(d.vals) == 0 {
		d.t.Errorf("the agent drew more random numbers than softfabric did in the capture")
		return 0xdead
	}
	v := d.vals[0]
	d.vals, d.names = d.vals[1:], d.names[1:]
	return v
}

func (d *drawn) done() {
	if len(d.vals) > 0 {
		d.t.Errorf("the agent did not draw %s (%#x): softfabric drew more random numbers than it", strings.Join(d.names, ", "), d.vals)
	}
}

// prefixed is fabric's source under a daemon: bits 16–31 of every number
// are the application's number. The captured values carry it already, so
// here it changes nothing; it is what fabric configures.
type prefixed struct {
	prefix uint32
	src    *drawn
}

func (p prefixed) Uint64() uint64 {
	return p.src.Uint64()&^0xffff0000 | uint64(p.prefix&0xffff)<<16
}

// agentMAD is a MAD the agent handed to Send.
type agentMAD struct {
	to ibcm.Peer
	at int64
	b  []byte
}

// cmReplay drives an agent through a capture's CM MADs in virtual time.
type cmReplay struct {
	t      *testing.T
	c      *capture
	a      *ibcm.Agent
	now    int64
	src    *drawn
	sent   []agentMAD // not yet matched to the capture
	events []ibcm.Event
	// react is fabric's reaction to an event, on the agent's goroutine.
	react func(e ibcm.Event)
}

// newCMReplay configures an agent as fabric's Domain.cm does: node GUID
// from the MAC, GID of the domain's address, the daemon's prefixed source
// (bits 16–31 of the comm ID softfabric used) over the numbers it drew.
func newCMReplay(t *testing.T, c *capture, commID uint32, draws []uint64, names []string) *cmReplay {
	r := &cmReplay{t: t, c: c, now: t0, src: &drawn{t: t, vals: draws, names: names}}
	r.a = ibcm.New(ibcm.Config{
		LocalGUID: eui64(c.sfMAC),
		LocalGID:  ibcm.GIDFromAddr(sfIP),
		Rand:      prefixed{prefix: commID >> 16, src: r.src},
		Send: func(to ibcm.Peer, b []byte) {
			r.sent = append(r.sent, agentMAD{to: to, at: r.now, b: bytes.Clone(b)})
		},
		Event: func(e ibcm.Event) {
			// As fabric's ownEvent: what aliases the MAD is copied.
			e.Request.PrivateData = bytes.Clone(e.Request.PrivateData)
			e.Reply.PrivateData = bytes.Clone(e.Reply.PrivateData)
			e.Reject.PrivateData = bytes.Clone(e.Reject.PrivateData)
			e.PrivateData = bytes.Clone(e.PrivateData)
			r.events = append(r.events, e)
			if r.react != nil {
				r.react(e)
			}
		},
	})
	return r
}

// advance runs the agent's timers up to ts, each at its deadline.
func (r *cmReplay) advance(ts int64) {
	for range 1000 {
		next := r.a.Next(r.now)
		if next > ts {
			break
		}
		r.now = max(r.now, next)
		r.a.Tick(r.now)
	}
	r.now = max(r.now, ts)
}

// run feeds rxe's MADs to the agent in order at their times; at each MAD
// softfabric sent, act runs what fabric did to send it (if anything), and
// the agent's next MAD must equal it. Then TimeWait runs out, and nothing
// more may be sent.
func (r *cmReplay) run(act map[mad.AttrID]func(f *cmFrame)) {
	fs := cmMADs(r.t, r.c)
	for _, f := range fs {
		r.advance(f.t)
		if f.fromRxe {
			r.a.Receive(r.now, ibcm.PeerFromAddr(f.p.Src()), bytes.Clone(f.m))
			continue
		}
		if fn := act[f.attr()]; fn != nil {
			fn(f)
		}
		r.expect(f)
	}
	end := fs[len(fs)-1].t + r.a.Config().TimeWait + int64(10*time.Second)
	r.advance(end)
	for _, m := range r.sent {
		r.t.Errorf("%s: at %s the agent sent %v (TID %#x) to %v, which softfabric did not send", r.c.name,
			durationSince(m.at), mad.MAD(m.b).AttributeID(), mad.MAD(m.b).TransactionID(), m.to.Addr())
	}
	if n := r.a.Len(); n != 0 {
		r.t.Errorf("%s: %d IDs still live %s after the capture", r.c.name, n, time.Duration(end-fs[len(fs)-1].t))
	}
	r.src.done()
}

// expect matches the agent's next MAD with f, a MAD softfabric sent.
func (r *cmReplay) expect(f *cmFrame) {
	if len(r.sent) == 0 {
		r.t.Errorf("%s: %v: softfabric sent it at %s; the agent sent nothing", r.c.name, f, durationSince(f.t))
		return
	}
	got := r.sent[0]
	r.sent = r.sent[1:]
	if to := ibcm.PeerFromAddr(f.p.Dst()); got.to != to {
		r.t.Errorf("%s: %v: the agent sent it to %v, softfabric to %v", r.c.name, f, got.to.Addr(), to.Addr())
	}
	if got.at > f.t {
		r.t.Errorf("%s: %v: the agent sent it at %s, after softfabric did (%s)", r.c.name, f, durationSince(got.at), durationSince(f.t))
	}
	if !bytes.Equal(got.b, f.m) {
		r.t.Errorf("%s: %v: the agent's %v differs from the captured MAD:\n\t%s", r.c.name, f,
			mad.MAD(got.b).AttributeID(), strings.Join(madDiff(f.m, got.b), "\n\t"))
	}
}

// eventTypes lists the events reported, each with its ID.
func (r *cmReplay) eventTypes() string {
	var s []string
	for _, e := range r.events {
		s = append(s, fmt.Sprintf("%v(%#x)", e.Type, uint32(e.ID)))
	}
	return strings.Join(s, " ")
}

// wantEvents checks the events reported, all for id.
func (r *cmReplay) wantEvents(id ibcm.ID, types ...ibcm.EventType) {
	var want []string
	for _, ty := range types {
		want = append(want, fmt.Sprintf("%v(%#x)", ty, uint32(id)))
	}
	if got := r.eventTypes(); got != strings.Join(want, " ") {
		r.t.Errorf("%s: events %q, want %q", r.c.name, got, strings.Join(want, " "))
	}
}

// wantCleanStats checks that the agent dropped, repeated and timed out
// nothing.
func (r *cmReplay) wantCleanStats() {
	s := r.a.Stats()
	if s.Dropped != [ibcm.NumDropReasons]uint64{} || s.Duplicates != 0 || s.Retransmits != [mad.NumCMAttrs]uint64{} || s.Timeouts != 0 || s.RejectsSent != 0 {
		r.t.Errorf("%s: agent stats %+v: want no drops, duplicates, retransmissions, timeouts or rejects", r.c.name, s)
	}
}

func TestCMReplaySoftfabricClient(t *testing.T) {
	// softfabric's rping client: fabric's connectCM calls Connect, waits
	// for EventReply, brings its QP to RTS and calls SendRTU; rping's
	// disconnect calls Disconnect on the established connection.
	c := load(t, sfClientCM)
	x := exchange(t, c)
	// What softfabric chose, as rxe echoed it: its comm ID (the REP's
	// remote ID), the TIDs of its REQ and DREQ (the REP's and DREP's), its
	// QPN (where rxe sent RC packets) and its first receive PSN (rxe's
	// first request PSN: the passive side sends from the REQ's).
	commID := x.rep.rep().RemoteCommID()
	rf := firstRCRequest(t, c, true)
	qpn, psn := rf.p.BTH().DestQP(), uint32(rf.psn())
	r := newCMReplay(t, c, commID,
		[]uint64{uint64(commID), x.rep.tid(), x.drep.tid()},
		[]string{"the comm ID", "the REQ's TID", "the DREQ's TID"})

	var id ibcm.ID
	r.run(map[mad.AttrID]func(*cmFrame){
		mad.AttrREQ: func(f *cmFrame) {
			// fabric's connectCM: rdma_cm's header with its QPN as the
			// source port, then the length byte of no user data (rping
			// sends none).
			priv := make([]byte, mad.CMAHeaderSize, mad.CMAHeaderSize+1)
			mad.CMAHeader(priv).Encode(&mad.CMAHeaderFields{SrcPort: uint16(qpn), Src: sfIP, Dst: rxeIP})
			priv = append(priv, fabricFrame(nil)...)
			var err error
			id, err = r.a.Connect(r.now, ibcm.ConnectParams{
				ServiceID: mad.ServiceID(mad.PortSpaceTCP, rpingPort), RemoteGID: ibcm.GIDFromAddr(rxeIP),
				LocalGID: ibcm.GIDFromAddr(sfIP), QPN: qpn, StartingPSN: psn, Transport: mad.TransportRC,
				ResponderResources: fabricRdAtomic, InitiatorDepth: fabricRdAtomic, RetryCount: 7, RNRRetryCount: 7,
				PathMTU: fabricMTU(pathMTU), PrivateData: priv,
				FlowLabel: ibcm.RDMACMFlowLabel(uint16(qpn), rpingPort),
			})
			if err != nil {
				t.Fatalf("%v: Connect: %v", f, err)
			}
		},
		mad.AttrRTU: func(f *cmFrame) {
			if n := len(r.events); n == 0 || r.events[n-1].Type != ibcm.EventReply {
				t.Fatalf("%v: fabric sends the RTU after EventReply; events: %s", f, r.eventTypes())
			}
			if err := r.a.SendRTU(r.now, id, nil); err != nil {
				t.Fatalf("%v: SendRTU: %v", f, err)
			}
		},
		mad.AttrDREQ: func(f *cmFrame) {
			// rcmConn.Disconnect: a DREQ only on an established connection.
			if st, ok := r.a.State(id); !ok || st != ibcm.StateEstablished {
				t.Fatalf("%v: connection in state %v (live %v), want established", f, st, ok)
			}
			if err := r.a.Disconnect(r.now, id, nil); err != nil {
				t.Fatalf("%v: Disconnect: %v", f, err)
			}
		},
	})
	if uint32(id) != commID {
		t.Errorf("Connect returned ID %#x, want %#x", uint32(id), commID)
	}
	r.wantEvents(id, ibcm.EventReply, ibcm.EventDisconnected, ibcm.EventTimeWaitExit)
	if len(r.events) > 0 {
		if e := r.events[0]; e.Reply.LocalQPN != x.rep.rep().LocalQPN() || e.Reply.StartingPSN != x.rep.rep().StartingPSN() {
			t.Errorf("EventReply: QPN %#x PSN %d, want rxe's %#x and %d", e.Reply.LocalQPN, e.Reply.StartingPSN,
				x.rep.rep().LocalQPN(), x.rep.rep().StartingPSN())
		}
	}
	r.wantCleanStats()
}

func TestCMReplaySoftfabricServer(t *testing.T) {
	// softfabric's rping server: fabric listens on the service; on
	// EventRequest it records an MRA that goes out only in answer to a
	// duplicate (SendMRA(MRADelay|24), as rdma_cm) and hands the request
	// to the application, whose accept calls Accept. The agent answers
	// rxe's DREQ itself; fabric then ends the connection and rping's own
	// disconnect finds it no longer established, so sends nothing.
	c := load(t, rxeClientCM)
	x := exchange(t, c)
	// What softfabric chose, as rxe echoed it: its comm ID (the RTU's
	// remote ID), its QPN (where rxe sent RC packets) and the PSN it
	// receives from (rxe's first request PSN: the active side sends from
	// the REP's).
	commID := x.rtu.rtu().RemoteCommID()
	rf := firstRCRequest(t, c, true)
	qpn, psn := rf.p.BTH().DestQP(), uint32(rf.psn())
	r := newCMReplay(t, c, commID, []uint64{uint64(commID)}, []string{"the comm ID"})
	if err := r.a.Listen(mad.ServiceID(mad.PortSpaceTCP, rpingPort), fabricBacklog); err != nil {
		t.Fatal(err)
	}
	var id ibcm.ID
	var req mad.REQFields
	r.react = func(e ibcm.Event) {
		if e.Type != ibcm.EventRequest {
			return
		}
		// fabric's cmService.request.
		h := mad.CMAHeader(e.Request.PrivateData)
		if !h.IsValid() || h.Version() != 0 {
			t.Errorf("request %#x: fabric would reject it: rdma_cm header %x", uint32(e.ID), e.Request.PrivateData)
			return
		}
		if err := r.a.SendMRA(r.now, e.ID, ibcm.MRADelay|24); err != nil {
			t.Errorf("SendMRA: %v", err)
		}
		id, req = e.ID, e.Request
	}
	r.run(map[mad.AttrID]func(*cmFrame){
		mad.AttrREP: func(f *cmFrame) {
			if id == 0 {
				t.Fatalf("%v: no request to accept; events: %s", f, r.eventTypes())
			}
			// fabric's acceptCM: rping's accept has no private data.
			err := r.a.Accept(r.now, id, ibcm.RepParams{
				QPN: qpn, StartingPSN: psn, ResponderResources: fabricClamp(req.InitiatorDepth),
				InitiatorDepth: fabricClamp(req.ResponderResources), RNRRetryCount: 7, PrivateData: fabricFrame(nil),
			})
			if err != nil {
				t.Fatalf("%v: Accept: %v", f, err)
			}
		},
		mad.AttrDREP: func(f *cmFrame) {
			// Sent by the agent when the DREQ came. rcmConn.Disconnect:
			if st, ok := r.a.State(id); ok && st == ibcm.StateEstablished {
				t.Errorf("%v: connection still established; fabric would send a DREQ", f)
			}
		},
	})
	if uint32(id) != commID {
		t.Errorf("request ID %#x, want %#x", uint32(id), commID)
	}
	r.wantEvents(id, ibcm.EventRequest, ibcm.EventEstablished, ibcm.EventDisconnectRequest, ibcm.EventTimeWaitExit)
	r.wantCleanStats()
}

// rxeREQs returns the MADs of rdmacm-req.pcap: classic pcap without
// directions, every frame a REQ rping's client on rxe sent.
func rxeREQs(t *testing.T) (fs []*cmFrame, to ibcm.Peer, toMAC [6]byte) {
	c := &capture{name: "rdmacm-req.pcap"}
	raw, err := pcapfix.ReadFrames(filepath.Join(fixtureDir, "rdmacm-req.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	for i, rf := range raw {
		f := &frame{i: i, fromRxe: true, data: rf.Data, t: t0 + rf.Time.Sub(raw[0].Time).Nanoseconds()}
		if err := f.p.Parse(f.data); err != nil || !f.p.CheckICRC() {
			t.Fatalf("rdmacm-req.pcap: frame %d: %v (ICRC ok: %v)", i, err, err == nil && f.p.CheckICRC())
		}
		if f.p.Src() != rxeIP || f.p.Ethernet().Src() != [6]byte{0x52, 0x54, 0, 0x18, 1, 2} {
			t.Fatalf("rdmacm-req.pcap: %v: from %v (%x), want rxe", f, f.p.Src(), f.p.Ethernet().Src())
		}
		to, toMAC = ibcm.PeerFromAddr(f.p.Dst()), f.p.Ethernet().Dst()
		c.frames = append(c.frames, f)
	}
	return cmMADs(t, c), to, toMAC
}

func TestCMRxeREQRepeated(t *testing.T) {
	fs, to, toMAC := rxeREQs(t)
	if len(fs) != 16 {
		t.Fatalf("%d CM MADs, want 16", len(fs))
	}
	// rxe's CM sent one REQ and 15 retransmissions (max CM retries 15),
	// byte for byte the same MAD.
	for _, f := range fs {
		if f.attr() != mad.AttrREQ || !bytes.Equal(f.m, fs[0].m) {
			t.Fatalf("%v differs from frame 0: %s", f, strings.Join(madDiff(fs[0].m, f.m), "; "))
		}
	}
	req := fs[0].req()
	if req.ServiceID() != rpingService || req.MaxCMRetries() != 15 {
		t.Fatalf("REQ for service %#x, %d CM retries", req.ServiceID(), req.MaxCMRetries())
	}
	from := ibcm.PeerFromAddr(rxeIP)

	type agent struct {
		a      *ibcm.Agent
		sent   []agentMAD
		events []ibcm.Event
		now    int64
	}
	newAgent := func(react func(g *agent, e ibcm.Event)) *agent {
		g := &agent{}
		g.a = ibcm.New(ibcm.Config{
			LocalGUID: eui64(toMAC), LocalGID: to.GID, Rand: &drawn{t: t, vals: []uint64{0x0007abcd}, names: []string{"the comm ID"}},
			Send: func(p ibcm.Peer, b []byte) { g.sent = append(g.sent, agentMAD{to: p, at: g.now, b: bytes.Clone(b)}) },
			Event: func(e ibcm.Event) {
				g.events = append(g.events, e)
				if react != nil {
					react(g, e)
				}
			},
		})
		return g
	}
	feed := func(g *agent, fs []*cmFrame) {
		for _, f := range fs {
			g.now = f.t
			g.a.Tick(g.now)
			g.a.Receive(g.now, from, bytes.Clone(f.m))
		}
	}

	t.Run("no listener", func(t *testing.T) {
		// Each copy is answered with the same stateless REJ "invalid
		// service ID" (8), what rdma_cm's peer reports as
		// RDMA_CM_EVENT_REJECTED status 8: to the REQ's comm ID, with its
		// TID, our ID 0 (cm_issue_rej keeps no state).
		g := newAgent(nil)
		feed(g, fs)
		want := make([]byte, mad.Size)
		h := mad.CMHeader(mad.AttrREJ, fs[0].tid())
		mad.MAD(want).EncodeHeader(&h)
		mad.REJ(mad.MAD(want).Data()).Encode(&mad.REJFields{
			RemoteCommID: req.LocalCommID(), MessageRejected: mad.MsgREQ, Reason: mad.RejectInvalidServiceID,
		})
		if len(g.sent) != len(fs) {
			t.Fatalf("%d MADs sent for %d REQs, want one REJ each", len(g.sent), len(fs))
		}
		for i, m := range g.sent {
			rej := mad.REJ(mad.MAD(m.b).Data())
			if m.to != from || mad.MAD(m.b).AttributeID() != mad.AttrREJ || rej.Reason() != 8 || rej.RemoteCommID() != req.LocalCommID() {
				t.Errorf("answer to %v: %v to %v, %+v", fs[i], mad.MAD(m.b).AttributeID(), m.to.Addr(), rej.Fields())
				continue
			}
			if !bytes.Equal(m.b, want) {
				t.Errorf("answer to %v:\n\t%s", fs[i], strings.Join(madDiff(want, m.b), "\n\t"))
			}
		}
		if g.a.Len() != 0 || len(g.events) != 0 {
			t.Errorf("%d IDs, events %v: want no state", g.a.Len(), g.events)
		}
	})

	t.Run("listener", func(t *testing.T) {
		// One Request event; the copies are duplicates of it
		// (cm_match_req) and make no second connection. Handled as
		// fabric does (an MRA recorded at once, the application not yet
		// accepting), each duplicate is answered with that MRA, as
		// rdma_cm's delayed MRA is (cm_dup_req_handler).
		var id ibcm.ID
		g := newAgent(func(g *agent, e ibcm.Event) {
			if e.Type == ibcm.EventRequest {
				id = e.ID
				if err := g.a.SendMRA(g.now, e.ID, ibcm.MRADelay|24); err != nil {
					t.Errorf("SendMRA: %v", err)
				}
			}
		})
		if err := g.a.Listen(rpingService, fabricBacklog); err != nil {
			t.Fatal(err)
		}
		feed(g, fs)
		if len(g.events) != 1 || g.events[0].Type != ibcm.EventRequest || g.a.Len() != 1 {
			t.Fatalf("%d IDs, %d events (%v): want one Request", g.a.Len(), len(g.events), g.events)
		}
		if e := g.events[0]; e.Request.LocalCommID != req.LocalCommID() || e.Peer != from {
			t.Errorf("Request from %v for comm ID %#x", e.Peer.Addr(), e.Request.LocalCommID)
		}
		if st, _ := g.a.State(id); st != ibcm.StateMRAREQSent || g.a.Stats().Duplicates != uint64(len(fs)-1) {
			t.Errorf("state %v, %d duplicates; want MRA_REQ_SENT, %d", st, g.a.Stats().Duplicates, len(fs)-1)
		}
		want := make([]byte, mad.Size)
		h := mad.CMHeader(mad.AttrMRA, fs[0].tid())
		mad.MAD(want).EncodeHeader(&h)
		mad.MRA(mad.MAD(want).Data()).Encode(&mad.MRAFields{
			LocalCommID: uint32(id), RemoteCommID: req.LocalCommID(), MessageMRAed: mad.MsgREQ, ServiceTimeout: 24,
		})
		if len(g.sent) != len(fs)-1 {
			t.Fatalf("%d MADs sent, want an MRA for each of %d duplicates", len(g.sent), len(fs)-1)
		}
		for i, m := range g.sent {
			if m.to != from || !bytes.Equal(m.b, want) {
				t.Errorf("answer to %v (to %v):\n\t%s", fs[i+1], m.to.Addr(), strings.Join(madDiff(want, m.b), "\n\t"))
			}
		}
	})

	t.Run("listener without MRA", func(t *testing.T) {
		// The plain agent: duplicates of a pending request are ignored.
		g := newAgent(nil)
		if err := g.a.Listen(rpingService, 0); err != nil {
			t.Fatal(err)
		}
		feed(g, fs)
		if len(g.events) != 1 || g.events[0].Type != ibcm.EventRequest || g.a.Len() != 1 || len(g.sent) != 0 {
			t.Errorf("%d IDs, events %v, %d MADs sent: want one Request and silence", g.a.Len(), g.events, len(g.sent))
		}
	})
}
