// Package transporttest connects two engine nodes over an in-memory link
// with a virtual clock, for tests and benchmarks of the transport: queue
// pair set-up, a filter to drop, duplicate or alter chosen frames, and a
// loop that runs both ends until a condition holds.
package transporttest

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Host is one end: a node (or, from NewGroupPair, a group of nodes, one
// per queue), its memory regions and completion queues.
type Host struct {
	Node   *engine.Node      // node 0 of Group, in a group pair
	Link   *memlink.Endpoint // nil on a NewLinkPair
	Filter *Filter
	// Group and Links are set by NewGroupPair: node i of Group sends and
	// receives on Links[i], whose peer is Links[i] of the other host.
	Group  *engine.Group
	Links  []*memlink.Endpoint
	MRs    *mr.Table
	SendCQ *verbs.CQ
	RecvCQ *verbs.CQ
	MAC    [6]byte
	IP     netip.Addr
	// VLAN tags the frames of queue pairs connected afterwards with VLAN
	// ID 100.
	VLAN bool
	// nextQPN numbers the queue pairs of this host.
	nextQPN uint32
}

// Pair is two hosts on one link, driven by one goroutine in virtual time.
type Pair struct {
	A, B *Host
	// Now is the virtual clock in nanoseconds.
	Now int64
	// Quantum is how far the clock moves when nothing happened and frames
	// are still in flight on the link (default 1 µs).
	Quantum int64
}

// Verdict is what a Filter does with a frame.
type Verdict int

// Filter verdicts.
const (
	Pass Verdict = iota
	Drop
	Duplicate
)

// Filter sits between a node and its link and applies a function to every
// frame the node sends. The function may also modify the frame in place
// (its ICRC is then stale unless it recomputes it).
type Filter struct {
	link.Link
	Func func(p *wire.Packet) Verdict
	pkt  wire.Packet
	out  [][]byte
}

// Send applies Func and forwards what passes.
func (f *Filter) Send(frames [][]byte) (int, error) {
	if f.Func == nil {
		return f.Link.Send(frames)
	}
	f.out = f.out[:0]
	for _, fr := range frames {
		v := Pass
		if f.pkt.Parse(fr) == nil {
			v = f.Func(&f.pkt)
		}
		switch v {
		case Pass:
			f.out = append(f.out, fr)
		case Duplicate:
			f.out = append(f.out, fr, fr)
		}
	}
	if _, err := f.Link.Send(f.out); err != nil {
		return 0, err
	}
	return len(frames), nil
}

// NewPair returns two hosts on a memlink pair configured by cfg; its clock
// is the pair's virtual clock, and Backpressure is always on.
func NewPair(cfg memlink.Config) *Pair {
	p := &Pair{Quantum: 1000}
	cfg.Now = func() time.Duration { return time.Duration(p.Now) }
	cfg.Backpressure = true
	la, lb := memlink.NewPair(cfg)
	p.A = newFilteredHost(la, la, 1)
	p.B = newFilteredHost(lb, lb, 2)
	return p
}

// NewLinkPair returns two hosts on links a and b, what one sends arriving
// at the other (two HFI links over modeled units joined by a wire, say).
// Frames in flight on them are invisible to Step, which moves the clock
// only to the next timer when both nodes are idle: the links must deliver
// at once, as the model's wire does. Host A's IP is 198.18.0.1, B's
// 198.18.0.2. The nodes use the links directly, with no Filter, so that
// everything a link offers besides link.Link (building frames in place,
// placing payloads) reaches them.
func NewLinkPair(a, b link.Link) *Pair {
	p := &Pair{Quantum: 1000}
	p.A, p.B = newHost(nil, 1), newHost(nil, 2)
	p.A.Node, p.B.Node = engine.New(a), engine.New(b)
	return p
}

// NewGroupPair returns two hosts of queues nodes each (engine.Group),
// joined by one memlink pair per queue: what node i of one host sends
// arrives at node i of the other, as on a veth in native XDP mode, where
// transmit queue i feeds the peer's receive queue i. Queue pairs placed on
// different nodes at the two ends (RCOptions.NodeA, NodeB) therefore
// exchange every frame through the groups' handoff rings.
func NewGroupPair(cfg memlink.Config, queues int) *Pair {
	p := &Pair{Quantum: 1000}
	cfg.Now = func() time.Duration { return time.Duration(p.Now) }
	cfg.Backpressure = true
	var la, lb []*memlink.Endpoint
	var a, b []link.Link
	for range queues {
		x, y := memlink.NewPair(cfg)
		la, lb = append(la, x), append(lb, y)
		a, b = append(a, x), append(b, y)
	}
	p.A, p.B = newHost(la[0], 1), newHost(lb[0], 2)
	p.A.Group, p.A.Links = engine.NewGroup(a, 0), la
	p.B.Group, p.B.Links = engine.NewGroup(b, 0), lb
	p.A.Node, p.B.Node = p.A.Group.Node(0), p.B.Group.Node(0)
	return p
}

// poll runs one pass of the host's node or group.
func (h *Host) poll(now int64) (bool, error) {
	if h.Group != nil {
		return h.Group.Poll(now)
	}
	return h.Node.Poll(now)
}

func (h *Host) nextDeadline() int64 {
	if h.Group != nil {
		return h.Group.NextDeadline()
	}
	return h.Node.NextDeadline()
}

func (h *Host) pending() int {
	if h.Group == nil {
		if h.Link == nil {
			return 0
		}
		return h.Link.Pending()
	}
	n := 0
	for _, l := range h.Links {
		n += l.Pending()
	}
	return n
}

func (h *Host) attach(node int, q *rc.QP) error {
	if h.Group != nil {
		return h.Group.Attach(node, q)
	}
	return h.Node.Attach(q)
}

// newHost makes a host on l; ml is l when it is a memlink endpoint (whose
// frames in flight Step counts), else nil.
// newFilteredHost is a host whose node sends on l through a Filter.
func newFilteredHost(l link.Link, ml *memlink.Endpoint, id byte) *Host {
	h := newHost(ml, id)
	h.Filter = &Filter{Link: l}
	h.Node = engine.New(h.Filter)
	return h
}

// newHost is a host with its memory and queues, and no node yet.
func newHost(ml *memlink.Endpoint, id byte) *Host {
	return &Host{
		Link:    ml,
		MRs:     mr.NewTable(1024),
		SendCQ:  verbs.NewCQ(4096),
		RecvCQ:  verbs.NewCQ(4096),
		MAC:     [6]byte{0x02, 0, 0, 0, 0, id},
		IP:      netip.AddrFrom4([4]byte{198, 18, 0, id}),
		nextQPN: 0x11,
	}
}

// Step polls both nodes once at the current time; when neither did
// anything it moves the clock: by Quantum while frames are in flight,
// otherwise to the next timer. It reports false when nothing can ever
// happen again (idle, nothing in flight, no timer).
func (p *Pair) Step() bool {
	a, err := p.A.poll(p.Now)
	if err != nil {
		panic(err)
	}
	b, err := p.B.poll(p.Now)
	if err != nil {
		panic(err)
	}
	if a || b {
		return true
	}
	if p.A.pending() > 0 || p.B.pending() > 0 {
		p.Now += p.Quantum
		return true
	}
	next := p.A.nextDeadline()
	if d := p.B.nextDeadline(); d != 0 && (next == 0 || d < next) {
		next = d
	}
	if next == 0 {
		return false
	}
	if next > p.Now {
		p.Now = next
	} else {
		p.Now += p.Quantum
	}
	return true
}

// RunUntil steps until done returns true, or fails after maxSteps steps or
// when the pair goes idle first.
func (p *Pair) RunUntil(done func() bool, maxSteps int) error {
	for i := 0; i < maxSteps; i++ {
		if done() {
			return nil
		}
		if !p.Step() {
			if done() {
				return nil
			}
			return fmt.Errorf("transporttest: idle after %d steps at t=%v", i, time.Duration(p.Now))
		}
	}
	return fmt.Errorf("transporttest: not done after %d steps at t=%v", maxSteps, time.Duration(p.Now))
}

// RCOptions tune a connected pair of RC queue pairs.
type RCOptions struct {
	MTU         int              // default 1024
	Timeout     uint8            // default 10 (4 ms)
	RetryCnt    uint8            // default 7
	RNRRetry    uint8            // default 7 (forever)
	MinRNRTimer uint8            // default 1 (10 µs)
	RdAtomic    uint8            // max_rd_atomic and max_dest_rd_atomic, default 16
	SQDepth     int              // default 256
	Access      mr.Access        // responder access, default write|read|atomic
	ARQ, BRQ    *verbs.RecvQueue // receive queues (default: a new one each)
	PSNA, PSNB  uint32           // initial send PSNs
	// NodeA and NodeB place the queue pairs on nodes of the hosts'
	// groups (NewGroupPair); default node 0.
	NodeA, NodeB int
	// CQA and CQB, when set, are the queue pairs' send and receive
	// completion queues instead of the hosts' (a queue pair driven by its
	// node's own goroutine needs completion queues of its own).
	CQA, CQB *verbs.CQ
}

// ConnectRC creates one RC queue pair on each host, connects them and moves
// both to RTS.
func (p *Pair) ConnectRC(o RCOptions) (qa, qb *rc.QP, err error) {
	if o.MTU == 0 {
		o.MTU = 1024
	}
	if o.Timeout == 0 {
		o.Timeout = 10
	}
	if o.RetryCnt == 0 {
		o.RetryCnt = 7
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = 7
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 1
	}
	if o.RdAtomic == 0 {
		o.RdAtomic = 16
	}
	if o.Access == 0 {
		o.Access = mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	}
	if o.ARQ == nil {
		o.ARQ = verbs.NewRecvQueue(4096)
	}
	if o.BRQ == nil {
		o.BRQ = verbs.NewRecvQueue(4096)
	}
	mk := func(h *Host, rq *verbs.RecvQueue, node int, cq *verbs.CQ) (*rc.QP, error) {
		scq, rcq := h.SendCQ, h.RecvCQ
		if cq != nil {
			scq, rcq = cq, cq
		}
		q, err := rc.New(rc.Config{QPN: h.nextQPN, MRs: h.MRs, SendCQ: scq, RecvCQ: rcq, RQ: rq, SQDepth: o.SQDepth})
		if err != nil {
			return nil, err
		}
		h.nextQPN++
		return q, h.attach(node, q)
	}
	if qa, err = mk(p.A, o.ARQ, o.NodeA, o.CQA); err != nil {
		return nil, nil, err
	}
	if qb, err = mk(p.B, o.BRQ, o.NodeB, o.CQB); err != nil {
		return nil, nil, err
	}
	if err = bringUp(qa, qb, p.A, p.B, o, o.PSNA, o.PSNB); err != nil {
		return nil, nil, err
	}
	if err = bringUp(qb, qa, p.B, p.A, o, o.PSNB, o.PSNA); err != nil {
		return nil, nil, err
	}
	return qa, qb, nil
}

func bringUp(q, peer *rc.QP, h, ph *Host, o RCOptions, sq, rq uint32) error {
	a := verbs.QPAttr{State: verbs.StateInit, Access: o.Access, PKey: wire.DefaultPKey}
	if err := q.Modify(&a, verbs.AttrState|verbs.AttrAccess|verbs.AttrPKey); err != nil {
		return err
	}
	c := rc.ConnectAttr{
		Path: wire.PathFields{
			SrcMAC: h.MAC, DstMAC: ph.MAC, Src: h.IP, Dst: ph.IP,
			SrcPort: wire.SourcePort(q.QPN(), peer.QPN()),
		},
		PathMTU: o.MTU, DestQPN: peer.QPN(), RQPSN: rq, SQPSN: sq,
		Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MinRNRTimer: o.MinRNRTimer, RdAtomic: o.RdAtomic,
	}
	if h.VLAN {
		c.Path.VLAN, c.Path.VLANID, c.Path.PCP = true, 100, 3
	}
	return q.Connect(c)
}

// Buffer registers a fresh buffer of n bytes with access on h.
func (h *Host) Buffer(n int, access mr.Access) (*mr.Region, error) {
	return h.MRs.Register(make([]byte, n), access)
}

// SGE is the scatter/gather entry for bytes [off, off+n) of r.
func SGE(r *mr.Region, off, n int) mr.SGE {
	return mr.SGE{Addr: r.Addr() + uint64(off), Length: uint32(n), LKey: r.LKey()}
}
