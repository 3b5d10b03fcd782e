package fabric

import "sync/atomic"

// opRing holds an endpoint's posted operations of one direction. The
// application (under the endpoint's lock with ThreadSafe) fills a slot
// and publishes it; the worker submits it to the transport and, when it
// is over, makes the slot free again. No lock is shared between the two.
//
//   - In order (MSG, DGRAM, shared receive contexts): one queue pair
//     completes operations in the order they were posted, so the slots
//     are used round the ring and three indices say which are posted,
//     submitted and done. An operation's id is its sequence number.
//   - Pooled (RDM): operations finish in any order (different peers,
//     tag matching, a receive that waits for ever), so free slots and
//     published ones travel through two single-producer rings of slot
//     indices. An operation's id is its slot index.
//
// Either way id & mask is the slot.
type opRing[T any] struct {
	ops  []T
	mask uint64

	posted    atomic.Uint64
	submitted uint64 // worker
	done      atomic.Uint64

	pooled bool
	free   idxRing // worker → application
	queue  idxRing // application → worker
}

func (r *opRing[T]) init(n int, pooled bool) {
	size := 1
	for size < n {
		size <<= 1
	}
	r.ops = make([]T, size)
	r.mask = uint64(size - 1)
	r.pooled = pooled
	if pooled {
		r.free.init(size)
		r.queue.init(size)
		for i := 0; i < size; i++ {
			r.free.push(uint32(i))
		}
	}
}

// slot returns a free slot and its id, or false when all are in use.
func (r *opRing[T]) slot() (*T, uint64, bool) {
	if r.pooled {
		i, ok := r.free.pop()
		if !ok {
			return nil, 0, false
		}
		return &r.ops[i], uint64(i), true
	}
	p := r.posted.Load()
	if p-r.done.Load() >= uint64(len(r.ops)) {
		return nil, 0, false
	}
	return &r.ops[p&r.mask], p, true
}

// publish hands the filled slot id to the worker. Publishing takes the
// slot: an id taken by slot and not published is lost (pooled) or reused
// (in order), so callers publish or give up before they return.
func (r *opRing[T]) publish(id uint64) {
	if r.pooled {
		r.queue.push(uint32(id))
		return
	}
	r.posted.Store(id + 1)
}

// unpublish gives back a slot taken by slot and not published.
func (r *opRing[T]) unpublish(id uint64) {
	if r.pooled {
		r.free.push(uint32(id))
	}
}

// next returns the id of the next published operation (worker).
func (r *opRing[T]) next() (uint64, bool) {
	if r.pooled {
		i, ok := r.queue.pop()
		return uint64(i), ok
	}
	if r.submitted == r.posted.Load() {
		return 0, false
	}
	id := r.submitted
	r.submitted++
	return id, true
}

// release makes a pooled slot free again (worker).
func (r *opRing[T]) release(id uint64) { r.free.push(uint32(id)) }

func (r *opRing[T]) waiting() bool {
	if r.pooled {
		return r.queue.len() > 0
	}
	return r.submitted != r.posted.Load()
}

// idxRing is a single-producer, single-consumer ring of slot indices.
type idxRing struct {
	buf  []uint32
	mask uint32
	_    [64]byte
	head atomic.Uint32 // consumer
	_    [60]byte
	tail atomic.Uint32 // producer
	_    [60]byte
}

func (q *idxRing) init(size int) {
	q.buf = make([]uint32, size)
	q.mask = uint32(size - 1)
}

// push appends i; the ring never holds more than the slots there are.
func (q *idxRing) push(i uint32) {
	t := q.tail.Load()
	q.buf[t&q.mask] = i
	q.tail.Store(t + 1)
}

func (q *idxRing) pop() (uint32, bool) {
	h := q.head.Load()
	if h == q.tail.Load() {
		return 0, false
	}
	i := q.buf[h&q.mask]
	q.head.Store(h + 1)
	return i, true
}

func (q *idxRing) len() int { return int(q.tail.Load() - q.head.Load()) }
