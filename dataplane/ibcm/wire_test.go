package ibcm

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/mad"
)

const (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

var (
	addrA = netip.MustParseAddr("192.168.1.10")
	addrB = netip.MustParseAddr("192.168.1.20")
	peerA = PeerFromAddr(addrA)
	peerB = PeerFromAddr(addrB)
)

const (
	guidA   = 0x0002c9fffe00000a
	guidB   = 0x0002c9fffe00000b
	service = 0x0106<<16 | 7174 // rdma_cm TCP port 7174 (rping's default)
)

// packet is a MAD in flight on the fake wire.
type packet struct {
	from, to Peer
	b        []byte
	at       int64 // when it was sent
}

func (p packet) attr() mad.AttrID { return mad.MAD(p.b).AttributeID() }

// node is an agent on the fake wire with the events it reported.
type node struct {
	w      *wire
	a      *Agent
	peer   Peer
	events []Event
	// onEvent runs after an event is recorded, e.g. to accept.
	onEvent func(n *node, e Event)
}

// wire connects nodes through a queue of packets and a virtual clock.
// filter decides each packet's fate: 0 drops it, n > 0 delivers n copies.
type wire struct {
	t      testing.TB
	now    int64
	nodes  map[Peer]*node
	queue  []packet
	log    []packet
	filter func(p packet) int
	// shuffle, if set, reorders the queue before each delivery.
	shuffle *rand.Rand
}

func newWire(t testing.TB) *wire {
	return &wire{t: t, now: 1000 * sec, nodes: map[Peer]*node{}}
}

func (w *wire) add(p Peer, guid uint64, cfg Config) *node {
	n := &node{w: w, peer: p}
	cfg.LocalGUID = guid
	cfg.LocalGID = p.GID
	cfg.Send = func(to Peer, b []byte) {
		if len(b) != mad.Size {
			w.t.Fatalf("Send of %d bytes", len(b))
		}
		pk := packet{from: p, to: to, b: bytes.Clone(b), at: w.now}
		w.queue = append(w.queue, pk)
		w.log = append(w.log, pk)
	}
	cfg.Event = func(e Event) {
		n.events = append(n.events, cloneEvent(e))
		if n.onEvent != nil {
			n.onEvent(n, e)
		}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.NewPCG(guid, 7)
	}
	n.a = New(cfg)
	w.nodes[p] = n
	return n
}

func cloneEvent(e Event) Event {
	e.PrivateData = bytes.Clone(e.PrivateData)
	e.Request.PrivateData = bytes.Clone(e.Request.PrivateData)
	e.Reply.PrivateData = bytes.Clone(e.Reply.PrivateData)
	e.Reject.PrivateData = bytes.Clone(e.Reject.PrivateData)
	e.Reject.ARI = bytes.Clone(e.Reject.ARI)
	e.SIDRRequest.PrivateData = bytes.Clone(e.SIDRRequest.PrivateData)
	e.SIDRReply.PrivateData = bytes.Clone(e.SIDRReply.PrivateData)
	e.SIDRReply.Info = bytes.Clone(e.SIDRReply.Info)
	return e
}

// run delivers queued packets until none are left.
func (w *wire) run() {
	for steps := 0; len(w.queue) > 0; steps++ {
		if steps > 100000 {
			w.t.Fatal("packet storm")
		}
		if w.shuffle != nil {
			w.shuffle.Shuffle(len(w.queue), func(i, j int) { w.queue[i], w.queue[j] = w.queue[j], w.queue[i] })
		}
		p := w.queue[0]
		w.queue = w.queue[1:]
		copies := 1
		if w.filter != nil {
			copies = w.filter(p)
		}
		n := w.nodes[p.to]
		for range copies {
			if n != nil {
				n.a.Receive(w.now, p.from, bytes.Clone(p.b))
			}
		}
	}
}

// advance moves the clock forward by d, running every timer on the way.
func (w *wire) advance(d int64) {
	end := w.now + d
	for {
		w.run()
		next := int64(NoDeadline)
		for _, n := range w.nodes {
			next = min(next, n.a.Next(w.now))
		}
		if next > end {
			break
		}
		w.now = max(w.now, next)
		for _, n := range w.sorted() {
			n.a.Tick(w.now)
		}
	}
	w.now = end
}

func (w *wire) sorted() []*node {
	ns := make([]*node, 0, len(w.nodes))
	for _, n := range w.nodes {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, func(x, y *node) int { return bytes.Compare(x.peer.GID[:], y.peer.GID[:]) })
	return ns
}

// sentOf returns the logged packets of one attribute from one node.
func (w *wire) sentOf(from Peer, attr mad.AttrID) []packet {
	var out []packet
	for _, p := range w.log {
		if p.from == from && p.attr() == attr {
			out = append(out, p)
		}
	}
	return out
}

// dropFirst returns a filter dropping the first n packets of attr.
func dropFirst(attr mad.AttrID, n int) func(packet) int {
	return func(p packet) int {
		if p.attr() == attr && n > 0 {
			n--
			return 0
		}
		return 1
	}
}

func (n *node) count(t EventType) int {
	c := 0
	for _, e := range n.events {
		if e.Type == t {
			c++
		}
	}
	return c
}

func (n *node) last(t EventType) (Event, bool) {
	for i := len(n.events) - 1; i >= 0; i-- {
		if n.events[i].Type == t {
			return n.events[i], true
		}
	}
	return Event{}, false
}

func (n *node) types() []EventType {
	var ts []EventType
	for _, e := range n.events {
		ts = append(ts, e.Type)
	}
	return ts
}

// acceptAll makes a node accept every request with QPN qpn.
func acceptAll(qpn uint32) func(*node, Event) {
	return func(n *node, e Event) {
		if e.Type == EventRequest {
			if err := n.a.Accept(n.w.now, e.ID, RepParams{QPN: qpn, StartingPSN: 0x222222, ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7}); err != nil {
				panic(err)
			}
		}
	}
}

// rtuAll makes a node answer every reply with an RTU.
func rtuAll(n *node, e Event) {
	if e.Type == EventReply {
		if err := n.a.SendRTU(n.w.now, e.ID, nil); err != nil {
			panic(err)
		}
	}
}

func connectParams(qpn uint32, priv []byte) ConnectParams {
	return ConnectParams{
		ServiceID: service, RemoteGID: peerB.GID, QPN: qpn, StartingPSN: 0x111111,
		ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7,
		PrivateData: priv,
	}
}

// checkEmpty fails unless the agent keeps no state at all.
func checkEmpty(t testing.TB, name string, a *Agent) {
	t.Helper()
	if len(a.conns)+len(a.byRemote)+len(a.byQP)+len(a.bySIDR)+len(a.timers)+a.sidrHeld != 0 {
		t.Errorf("%s keeps state: %d conns, %d by remote, %d by QP, %d SIDR (%d held), %d timers",
			name, len(a.conns), len(a.byRemote), len(a.byQP), len(a.bySIDR), a.sidrHeld, len(a.timers))
	}
	checkInvariants(t, a)
}

// checkInvariants checks that the agent's indexes agree with each other.
func checkInvariants(t testing.TB, a *Agent) {
	t.Helper()
	for k, c := range a.byRemote {
		if a.conns[c.id] != c || !c.inRemote || (remoteKey{c.remoteID, c.remoteGUID}) != k {
			t.Fatalf("byRemote entry %+v is stale", k)
		}
	}
	for k, c := range a.byQP {
		if a.conns[c.id] != c || !c.inQP || (qpKey{c.remoteQPN, c.remoteGUID}) != k || c.state == StateTimeWait {
			t.Fatalf("byQP entry %+v is stale", k)
		}
	}
	held := 0
	for k, c := range a.bySIDR {
		if a.conns[c.id] != c || !c.inSIDR || (sidrKey{c.remoteID, c.peer.GID}) != k ||
			c.state != StateSIDRREQRcvd && c.state != StateSIDRREPSent {
			t.Fatalf("bySIDR entry %+v is stale", k)
		}
	}
	for _, c := range a.conns {
		if c.state == StateSIDRREPSent {
			held++
		}
	}
	if held != a.sidrHeld || held > a.cfg.MaxSIDRHeld {
		t.Fatalf("%d SIDR requests held, %d counted, at most %d", held, a.sidrHeld, a.cfg.MaxSIDRHeld)
	}
	for i, c := range a.timers {
		if c.heapIdx != i || a.conns[c.id] != c || c.deadline == 0 {
			t.Fatalf("timer %d is stale", i)
		}
		if i > 0 && a.timers[(i-1)/2].deadline > c.deadline {
			t.Fatal("timer heap out of order")
		}
	}
	pending := map[*listener]int{}
	for id, c := range a.conns {
		if c.id != id || c.id == 0 {
			t.Fatalf("conn %#x filed under %#x", c.id, id)
		}
		if (c.heapIdx >= 0) != (c.deadline != 0) {
			t.Fatalf("conn %#x in %v: heap index %d, deadline %d", id, c.state, c.heapIdx, c.deadline)
		}
		if c.state.retransmits() || c.state.awaitsCaller() || c.state == StateTimeWait || c.state == StateSIDRREPSent {
			if c.heapIdx < 0 {
				t.Fatalf("conn %#x in %v has no timer", id, c.state)
			}
		}
		if c.lis != nil {
			pending[c.lis]++
		}
	}
	for _, l := range a.listeners {
		if pending[l] != l.pending || l.pending > l.backlog {
			t.Fatalf("listener %#x: %d pending counted, %d found, backlog %d", l.serviceID, l.pending, pending[l], l.backlog)
		}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 99)) }
