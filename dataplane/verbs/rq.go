package verbs

import (
	"errors"

	"github.com/softfabric/softfabric/dataplane/mr"
)

// ErrTooManySGE is returned for a work request with more than MaxSGE entries.
var ErrTooManySGE = errors.New("too many scatter/gather entries")

// RecvSlot is a posted receive in a queue slot, its list held inline.
type RecvSlot struct {
	ID   uint64
	sgl  [MaxSGE]mr.SGE
	nsge uint8
	len  uint32
}

// SGL is the slot's scatter/gather list.
func (s *RecvSlot) SGL() []mr.SGE { return s.sgl[:s.nsge] }

// Len is the total length of the slot's buffers.
func (s *RecvSlot) Len() int { return int(s.len) }

// RecvQueue is a receive queue. Used by one queue pair it is that QP's RQ;
// shared by several it is a shared receive queue (SRQ). It has one owner
// goroutine, the one that owns the queue pairs consuming from it.
type RecvQueue struct {
	slots      []RecvSlot
	mask       uint32
	head, tail uint32
	shared     bool
}

// NewRecvQueue returns a receive queue of at least depth entries.
func NewRecvQueue(depth int) *RecvQueue {
	n := 1
	for n < depth {
		n <<= 1
	}
	return &RecvQueue{slots: make([]RecvSlot, n), mask: uint32(n - 1)}
}

// NewSRQ returns a shared receive queue of at least depth entries.
func NewSRQ(depth int) *RecvQueue {
	q := NewRecvQueue(depth)
	q.shared = true
	return q
}

// Shared reports whether the queue is a shared receive queue.
func (q *RecvQueue) Shared() bool { return q.shared }

// Len is the number of posted receives.
func (q *RecvQueue) Len() int { return int(q.tail - q.head) }

// Post adds a receive request.
func (q *RecvQueue) Post(wr *RecvWR) error {
	if len(wr.SGL) > MaxSGE {
		return ErrTooManySGE
	}
	if q.tail-q.head >= uint32(len(q.slots)) {
		return ErrQueueFull
	}
	s := &q.slots[q.tail&q.mask]
	s.ID = wr.ID
	s.nsge = uint8(copy(s.sgl[:], wr.SGL))
	s.len = uint32(mr.SGLLen(wr.SGL))
	q.tail++
	return nil
}

// Peek returns the oldest posted receive, or nil when none is posted.
func (q *RecvQueue) Peek() *RecvSlot {
	if q.head == q.tail {
		return nil
	}
	return &q.slots[q.head&q.mask]
}

// Pop removes the oldest posted receive.
func (q *RecvQueue) Pop() {
	if q.head != q.tail {
		q.head++
	}
}

// Flush completes every posted receive with a flush error on cq, as a queue
// pair entering the error state does with its own receive queue.
func (q *RecvQueue) Flush(cq *CQ, qpn uint32) {
	for s := q.Peek(); s != nil; s = q.Peek() {
		cq.Push(&Completion{WRID: s.ID, Status: WRFlushErr, Opcode: CompRecv, QPN: qpn})
		q.Pop()
	}
}
