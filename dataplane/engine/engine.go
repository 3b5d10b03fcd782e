// Package engine runs queue pairs over a link: it receives a batch of
// frames, parses and checks them, hands each to the queue pair its
// destination QPN names, lets every queue pair with work or a due timer
// transmit into one batch, and sends the batch. One goroutine drives a Node
// (run to completion); nothing here blocks or allocates per packet.
package engine

import (
	"errors"
	"fmt"

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
	RxFrames  uint64
	TxFrames  uint64
	Malformed uint64 // not a valid RoCEv2 packet
	BadICRC   uint64 // corrupted: ICRC mismatch
	UnknownQP uint64 // no queue pair with that number
	TxStalls  uint64 // the link refused frames (backpressure)
}

// Node is one end of a link with its queue pairs.
type Node struct {
	link  link.Link
	qps   []QP // by QPN; nil where none
	list  []QP // every attached queue pair, for the transmit pass
	rx    [][]byte
	sizes []int
	views [][]byte // frames lent by a ZeroCopyReceiver
	tx    *link.Batch
	pkt   wire.Packet
	stats Stats
}

// MaxQPN bounds the queue pair numbers a node accepts.
const MaxQPN = 1 << 16

// New returns a node sending and receiving on l.
func New(l link.Link) *Node {
	n := &Node{
		link:  l,
		qps:   make([]QP, MaxQPN),
		rx:    make([][]byte, link.IdealBatch),
		sizes: make([]int, link.IdealBatch),
		tx:    link.NewBatch(link.IdealBatch, l.MaxFrame()),
		views: make([][]byte, link.IdealBatch),
	}
	mem := make([]byte, link.IdealBatch*l.MaxFrame())
	for i := range n.rx {
		n.rx[i] = mem[i*l.MaxFrame() : (i+1)*l.MaxFrame()]
	}
	return n
}

// Attach registers a queue pair under its QPN.
func (n *Node) Attach(q QP) error {
	qpn := q.QPN()
	if qpn >= MaxQPN || qpn < 2 {
		return fmt.Errorf("engine: QPN %d outside [2, %d)", qpn, MaxQPN)
	}
	if n.qps[qpn] != nil {
		return errors.New("engine: QPN in use")
	}
	n.qps[qpn] = q
	n.list = append(n.list, q)
	return nil
}

// Detach removes a queue pair.
func (n *Node) Detach(q QP) {
	qpn := q.QPN() & psn.Mask
	if qpn < MaxQPN && n.qps[qpn] == q {
		n.qps[qpn] = nil
	}
	for i, x := range n.list {
		if x == q {
			n.list = append(n.list[:i], n.list[i+1:]...)
			break
		}
	}
}

// Stats returns the counters.
func (n *Node) Stats() Stats { return n.stats }

// Poll runs one pass: receive up to a batch of frames, deliver them, then
// transmit what every queue pair has to send. It reports whether anything
// was received or sent.
func (n *Node) Poll(now int64) (bool, error) {
	var got int
	if zc, ok := n.link.(link.ZeroCopyReceiver); ok {
		// Parse and place straight from the link's buffers: the transport
		// keeps nothing of a frame past Receive.
		got = zc.RecvZC(n.views)
		for _, f := range n.views[:got] {
			n.deliver(f, now)
		}
		zc.ReleaseRx()
	} else {
		var err error
		got, err = n.link.Recv(n.rx, n.sizes)
		if err != nil {
			return false, err
		}
		for i := 0; i < got; i++ {
			n.deliver(n.rx[i][:n.sizes[i]], now)
		}
	}
	sent, err := n.transmit(now)
	return got > 0 || sent > 0, err
}

func (n *Node) deliver(frame []byte, now int64) {
	n.stats.RxFrames++
	p := &n.pkt
	if err := p.Parse(frame); err != nil {
		n.stats.Malformed++
		return
	}
	if !p.CheckICRC() {
		n.stats.BadICRC++
		return
	}
	qpn := p.BTH().DestQP()
	if qpn >= MaxQPN || n.qps[qpn] == nil {
		n.stats.UnknownQP++
		return
	}
	n.qps[qpn].Receive(p, now)
}

func (n *Node) transmit(now int64) (int, error) {
	total := 0
	for _, q := range n.list {
		for {
			if !q.HasWork() {
				if d := q.Deadline(); d == 0 || d > now {
					break
				}
			}
			before := n.tx.Len()
			q.Transmit(now, n.tx)
			if n.tx.Room() > 0 || n.tx.Len() == before {
				break
			}
			sent, err := n.flush()
			total += sent
			if err != nil || sent == 0 {
				return total, err
			}
		}
	}
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

// NextDeadline is the earliest timer of any queue pair, 0 if none runs.
func (n *Node) NextDeadline() int64 {
	var d int64
	for _, q := range n.list {
		if t := q.Deadline(); t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}
