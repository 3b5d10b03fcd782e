// Package engine runs queue pairs over a link: it receives a batch of
// frames, parses and checks them, hands each to the queue pair its
// destination QPN names, lets every queue pair with work or a due timer
// transmit into one batch, and sends the batch. One goroutine drives a Node
// (run to completion); nothing here blocks or allocates per packet.
package engine

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/softfabric/softfabric/dataplane/handoff"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// QP is what the engine needs of a queue pair; rc.QP and ud.QP provide it.
type QP interface {
	QPN() uint32
	Receive(p *wire.Packet, now int64)
	Transmit(now int64, b *link.Batch)
	// Deadline is when a timer of the queue pair is due, 0 if none runs.
	Deadline() int64
	// HasWork reports whether Transmit would send something now.
	HasWork() bool
}

// Stats count the frames a node saw.
type Stats struct {
	RxFrames  uint64 // from the link (HandedIn not included)
	TxFrames  uint64
	Malformed uint64 // not a valid RoCEv2 packet
	BadICRC   uint64 // corrupted: ICRC mismatch
	UnknownQP uint64 // no queue pair with that number
	TxStalls  uint64 // the link refused frames (backpressure)
	// In a Group: frames received for a queue pair of another node and
	// copied to it, frames other nodes copied here, and frames lost
	// because the ring towards the owner was full.
	HandedOff    uint64
	HandedIn     uint64
	HandoffDrops uint64
}

// Node is one end of a link with its queue pairs.
type Node struct {
	link   link.Link
	failer link.Failer // link, when it can fail for good
	placer link.Placer // link, when its device places payloads itself
	byQPN  []int32     // QPN → slot + 1; 0 where none
	slots  []slot
	free   []int32 // slots of detached queue pairs, for reuse
	active []int32 // slots that may have packets to send
	spare  []int32 // the other half of active, swapped each pass
	timers timerHeap
	rx     [][]byte
	sizes  []int
	views  [][]byte // frames lent by a ZeroCopyReceiver
	tx     *link.Batch
	pkt    wire.Packet
	stats  Stats

	// Set when the node is one of a Group.
	group    *Group
	id       int
	out      []*handoff.Ring // towards each other node, by index (nil: self)
	in       []*handoff.Ring // from the other nodes
	touched  []bool          // out rings pushed to in this pass
	sleeper  Sleeper
	sleeping atomic.Bool // the node is (about to be) blocked in sleeper
	// waiting, if set, reports work that another goroutine handed the
	// node outside its link and rings (an application's posts).
	waiting func() bool
}

// MaxQPN bounds the queue pair numbers a node accepts.
const MaxQPN = 1 << 16

// New returns a node sending and receiving on l.
func New(l link.Link) *Node {
	n := &Node{
		link:  l,
		byQPN: make([]int32, MaxQPN),
		rx:    make([][]byte, link.IdealBatch),
		sizes: make([]int, link.IdealBatch),
		tx:    link.NewBatchFor(l, link.IdealBatch),
		views: make([][]byte, link.IdealBatch),
	}
	n.failer, _ = l.(link.Failer)
	n.placer, _ = l.(link.Placer)
	mem := make([]byte, link.IdealBatch*l.MaxFrame())
	for i := range n.rx {
		n.rx[i] = mem[i*l.MaxFrame() : (i+1)*l.MaxFrame()]
	}
	return n
}

// GSIQPN is the General Services Interface's queue pair (QP1), where
// connection-management MADs arrive. QP0 (the subnet manager's) does not
// exist on RoCE.
const GSIQPN = 1

// Attach registers a queue pair under its QPN.
func (n *Node) Attach(q QP) error {
	qpn := q.QPN()
	if qpn >= MaxQPN || qpn < GSIQPN {
		return fmt.Errorf("engine: QPN %d outside [%d, %d)", qpn, GSIQPN, MaxQPN)
	}
	if n.byQPN[qpn] != 0 {
		return errors.New("engine: QPN in use")
	}
	var s int32
	if k := len(n.free); k > 0 {
		s, n.free = n.free[k-1], n.free[:k-1]
		n.slots[s] = slot{q: q}
	} else {
		s = int32(len(n.slots))
		n.slots = append(n.slots, slot{q: q})
	}
	n.byQPN[qpn] = s + 1
	if nt, ok := q.(Notifier); ok {
		nt.SetNotify(func() { n.activate(s) })
	}
	n.activate(s)
	return nil
}

// Detach removes a queue pair.
func (n *Node) Detach(q QP) {
	qpn := q.QPN() & psn.Mask
	if qpn >= MaxQPN || n.byQPN[qpn] == 0 || n.slots[n.byQPN[qpn]-1].q != q {
		return
	}
	s := n.byQPN[qpn] - 1
	n.byQPN[qpn] = 0
	if nt, ok := q.(Notifier); ok {
		nt.SetNotify(nil)
	}
	// Entries for the slot in the active list and the timer heap are
	// skipped as stale; the slot is reused only after the active list has
	// moved past it.
	n.slots[s] = slot{}
	n.free = append(n.free, s)
}

// Stats returns the counters.
func (n *Node) Stats() Stats { return n.stats }

// TxInPlace reports whether the node builds its frames in the link's own
// transmit buffers (link.TxFramer) rather than copying them there.
func (n *Node) TxInPlace() bool { return n.tx.InPlace() }

// Poll runs one pass: deliver what other nodes of the group handed over,
// receive up to a batch of frames and deliver them (or hand them to the
// node that owns their queue pair), then transmit what every queue pair
// has to send. It reports whether anything was received or sent.
func (n *Node) Poll(now int64) (bool, error) {
	var got int
	if n.group != nil {
		got = n.receiveHandedIn(now)
	}
	if zc, ok := n.link.(link.ZeroCopyReceiver); ok {
		// Parse and place straight from the link's buffers: the transport
		// keeps nothing of a frame past Receive.
		k := zc.RecvZC(n.views)
		for i, f := range n.views[:k] {
			if placed, ok := n.placed(i); ok {
				n.deliver(f, placed, now, true)
			}
		}
		zc.ReleaseRx()
		n.stats.RxFrames += uint64(k)
		got += k
		if k == 0 && n.failer != nil {
			if err := n.failer.Err(); err != nil {
				return false, err
			}
		}
	} else {
		k, err := n.link.Recv(n.rx, n.sizes)
		if err != nil {
			return false, err
		}
		for i := 0; i < k; i++ {
			if placed, ok := n.placed(i); ok {
				n.deliver(n.rx[i][:n.sizes[i]], placed, now, true)
			}
		}
		n.stats.RxFrames += uint64(k)
		got += k
	}
	if n.group != nil {
		n.publish()
	}
	sent, err := n.transmit(now)
	return got > 0 || sent > 0, err
}

// placed returns the payload the link placed for frame i of its last
// receive (nil for an ordinary frame), and false for a frame to drop: its
// payload was placed where the link can no longer reach.
func (n *Node) placed(i int) ([]byte, bool) {
	if n.placer == nil {
		return nil, true
	}
	p, ok := n.placer.Placed(i)
	if ok && p == nil {
		n.stats.Malformed++
		return nil, false
	}
	return p, true
}

// deliver parses a frame and gives it to its queue pair. A frame for a
// queue pair another node of the group owns goes to that node when
// mayHandOff (frames from the link, not those already handed over), with
// its ICRC still unchecked: the owner checks it, once.
//
// A placed payload (non-nil: link.Placer) is the frame's payload where the
// device put it; the frame's own payload bytes are unset and its ICRC was
// checked by the link. Handed over, such a frame goes with the place of
// its payload (handoff.Ring.PushPlaced), copied no more than delivered
// here.
func (n *Node) deliver(frame, placed []byte, now int64, mayHandOff bool) {
	p := &n.pkt
	if err := p.Parse(frame); err != nil {
		n.stats.Malformed++
		return
	}
	if placed != nil && len(placed) != len(p.Payload) {
		n.stats.Malformed++
		return
	}
	qpn := p.BTH().DestQP()
	var s int32
	if qpn < MaxQPN {
		s = n.byQPN[qpn]
		if s == 0 && mayHandOff && n.group != nil {
			if o := int(n.group.owner[qpn].Load()) - 1; o >= 0 && o != n.id {
				at := p.BTHOff + p.Info.HeaderLen // where the payload starts
				n.handOff(o, frame, at, placed)
				return
			}
		}
	}
	if placed != nil {
		p.Payload = placed
	} else if !p.CheckICRC() {
		n.stats.BadICRC++
		return
	}
	if s == 0 {
		n.stats.UnknownQP++
		return
	}
	n.slots[s-1].q.Receive(p, now)
	n.activate(s - 1) // it may have responses or a wider window now
}

func (n *Node) transmit(now int64) (int, error) {
	n.expire(now)
	total := 0
	// Walk the active list; queue pairs that still have work stay on it
	// (in spare), the rest leave it.
	work := n.active
	n.active, n.spare = n.spare[:0], nil
	for i, s := range work {
		st := &n.slots[s]
		if st.q == nil || !st.active {
			continue // detached (and maybe reused: then it is on the list again)
		}
		q := st.q
		// Transmit at least once: a due timer is work HasWork does not see.
		for first := true; first || q.HasWork(); first = false {
			before := n.tx.Len()
			q.Transmit(now, n.tx)
			if n.tx.Room() > 0 || n.tx.Len() == before {
				break
			}
			sent, err := n.flush()
			total += sent
			if err != nil || sent == 0 {
				// The link is full: keep this and the unvisited queue
				// pairs active for the next pass.
				n.active = append(n.active, work[i:]...)
				n.spare = work[:0]
				return total, err
			}
		}
		n.rearm(s)
		if q.HasWork() {
			n.active = append(n.active, s)
		} else {
			st.active = false
		}
	}
	n.spare = work[:0]
	sent, err := n.flush()
	return total + sent, err
}

func (n *Node) flush() (int, error) {
	want := n.tx.Len()
	sent, err := n.tx.Flush(n.link)
	n.stats.TxFrames += uint64(sent)
	if sent < want {
		n.stats.TxStalls++
	}
	return sent, err
}
