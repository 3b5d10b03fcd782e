// Package handoff passes received frames from one worker to another: a
// bounded, lock-free ring with one producer goroutine and one consumer
// goroutine, holding copies of frames in buffers it owns.
//
// A device runs one worker per receive queue, and each queue pair belongs
// to one worker. A frame can arrive on a queue whose worker does not own
// its queue pair (RSS moved the flow, the peer picked another source port,
// generic XDP on veth delivers a frame sent on transmit queue q to receive
// queue q-1). The receiving worker copies it into the ring towards the
// owner, which delivers it on its next pass. A device has one ring per
// ordered pair of workers, so every ring has exactly one producer and one
// consumer: no lock, no channel, no allocation per frame.
package handoff

import (
	"sync/atomic"
)

// cacheLine pads the indices apart so that the producer's and the
// consumer's writes do not share a cache line.
const cacheLine = 64

// Ring is a single-producer, single-consumer queue of frames. Push is
// called by the producer goroutine only; Peek and Release by the consumer
// only; Len and the counters by anyone.
type Ring struct {
	bufs   [][]byte // slot buffers, maxFrame bytes each
	lens   []int32  // frame length per slot
	placed [][]byte // per slot, the payload of a frame its link placed (PushPlaced), or nil
	mask   uint32
	max    int
	_      [cacheLine]byte
	tail   atomic.Uint32 // one past the last published slot; written by the producer
	next   uint32        // the producer's next slot: tail plus what Push staged
	head0  uint32        // the producer's cached copy of head
	_      [cacheLine - 12]byte
	head   atomic.Uint32 // next slot the consumer reads; written by the consumer
	tail0  uint32        // the consumer's cached copy of tail
	held   uint32        // slots lent by the last Peek
	_      [cacheLine - 12]byte

	dropped atomic.Uint64
}

// New returns a ring of at least size slots (rounded up to a power of
// two) for frames of up to maxFrame bytes.
func New(size, maxFrame int) *Ring {
	n := 1
	for n < size {
		n <<= 1
	}
	r := &Ring{bufs: make([][]byte, n), lens: make([]int32, n), placed: make([][]byte, n), mask: uint32(n - 1), max: maxFrame}
	mem := make([]byte, n*maxFrame)
	for i := range r.bufs {
		r.bufs[i] = mem[i*maxFrame : (i+1)*maxFrame : (i+1)*maxFrame]
	}
	return r
}

// Push copies frame into the ring; the consumer sees it after the next
// Publish, so that a batch of frames costs one store to the shared index.
// It reports false, and counts a drop, when the ring is full or the frame
// is longer than the ring's frames: the consumer is not keeping up, and the
// frame is lost as on a congested link (the reliable transport recovers
// it).
func (r *Ring) Push(frame []byte) bool {
	i, ok := r.reserve(len(frame) <= r.max)
	if !ok {
		return false
	}
	r.lens[i] = int32(copy(r.bufs[i], frame))
	r.placed[i] = nil
	r.next++
	return true
}

// reserve returns the producer's next slot when the ring has room and
// fits, else counts a drop.
func (r *Ring) reserve(fits bool) (uint32, bool) {
	t := r.next
	if t-r.head0 == uint32(len(r.bufs)) {
		r.head0 = r.head.Load()
	}
	if t-r.head0 == uint32(len(r.bufs)) || !fits {
		r.dropped.Add(1)
		return 0, false
	}
	return t & r.mask, true
}

// PushPlaced is Push for a frame whose payload, from byte at, its link
// placed in memory already (link.Placer): it copies the frame but that
// payload, and passes placed, the payload where it lies, to the consumer
// (Placed), which copies nothing then either.
func (r *Ring) PushPlaced(frame []byte, at int, placed []byte) bool {
	end := at + len(placed)
	i, ok := r.reserve(len(frame) <= r.max && at >= 0 && end <= len(frame))
	if !ok {
		return false
	}
	b := r.bufs[i]
	copy(b, frame[:at])
	copy(b[end:], frame[end:])
	r.lens[i] = int32(len(frame))
	r.placed[i] = placed
	r.next++
	return true
}

// Placed is the placed payload of view k of the last Peek (PushPlaced),
// or nil for a frame pushed whole.
func (r *Ring) Placed(k int) []byte {
	if k < 0 || uint32(k) >= r.held {
		return nil
	}
	return r.placed[(r.head.Load()+uint32(k))&r.mask]
}

// Publish makes the pushed frames visible to the consumer and reports
// whether there were any.
func (r *Ring) Publish() bool {
	if r.tail.Load() == r.next { // only we write tail
		return false
	}
	r.tail.Store(r.next)
	return true
}

// Peek fills views with the oldest frames, up to len(views), and returns
// how many. They stay valid until Release; a Peek without a Release in
// between returns the same frames again.
func (r *Ring) Peek(views [][]byte) int {
	h := r.head.Load() // only we write it
	if r.tail0-h < uint32(len(views)) {
		r.tail0 = r.tail.Load()
	}
	n := min(r.tail0-h, uint32(len(views)))
	for k := uint32(0); k < n; k++ {
		i := (h + k) & r.mask
		views[k] = r.bufs[i][:r.lens[i]:r.lens[i]]
	}
	r.held = n
	return int(n)
}

// Release gives the frames of the last Peek back to the producer.
func (r *Ring) Release() {
	if n := r.held; n != 0 {
		h := r.head.Load()
		for i := range n {
			r.placed[(h+i)&r.mask] = nil // the application's memory, not ours to keep
		}
		r.head.Store(h + n)
		r.held = 0
	}
}

// Len is the number of published frames waiting; any goroutine may ask.
func (r *Ring) Len() int { return int(r.tail.Load() - r.head.Load()) }

// Dropped counts the frames Push refused because the ring was full or the
// frame too long; any goroutine may ask.
func (r *Ring) Dropped() uint64 { return r.dropped.Load() }
