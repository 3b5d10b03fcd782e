// Package match pairs arriving messages with posted receives the way
// libfabric's tagged and untagged receive queues do (as in the RxM
// provider's software receive path).
//
// A Queue holds two lists, both kept in arrival order: posted receives and
// unexpected messages (arrivals for which no receive was posted). An
// arriving message takes the oldest matching posted receive (Arrive); a new
// receive should first take the oldest matching unexpected message
// (TakeUnexpected) before being posted (Post). Peek, Claim, TakeClaimed,
// Discard and DiscardMatch implement FI_PEEK, FI_CLAIM and FI_DISCARD.
//
// Both lists are fixed-capacity doubly-linked lists over arrays allocated by
// New, with free lists, so removal from the middle is O(1) and no operation
// allocates. Matching is a linear scan: Arrive and Cancel are O(posted), and
// the unexpected-message searches are O(pending).
//
// A Queue is not safe for concurrent use; the caller serializes access.
package match

import "errors"

// AddrAny matches any source (FI_ADDR_UNSPEC).
const AddrAny = ^uint64(0)

// ErrFull is returned by Post or Unexpected when the list is at capacity.
var ErrFull = errors.New("match: queue full")

// ErrNoMatch reports that no matching message or receive was found. The
// lookup methods return ok=false instead; it is provided for callers that
// turn a failed Peek, Claim or Cancel into an error (e.g. FI_ENOMSG).
var ErrNoMatch = errors.New("match: no matching message")

// Recv is a posted receive. The caller owns the fields; the queue copies it.
type Recv struct {
	Context uint64 // the application's per-operation context
	Src     uint64 // source filter (an AV index) or AddrAny
	Tag     uint64 // tagged only: matches when (tag ^ Tag) &^ Ignore == 0
	Ignore  uint64 // tagged only: bits of Tag not compared
	Cookie  uint64 // opaque to match: the caller's handle for the buffer
}

// Msg is an arrived message that found no receive: its header facts and the
// caller's handle for where its data sits.
type Msg struct {
	Src    uint64
	Tag    uint64 // tagged only
	Len    int
	Data   uint64 // remote CQ data
	Flags  uint32 // caller-defined (e.g. has-data)
	Cookie uint64 // caller's handle for the buffered payload
}

// nilIdx terminates a list.
const nilIdx = -1

// node is one slot of a list: a value and its links. Free slots are chained
// through next.
type node[T any] struct {
	v          T
	prev, next int32
}

// list is a fixed-capacity doubly-linked list over a preallocated array.
type list[T any] struct {
	s          []node[T]
	head, tail int32
	free       int32
	n          int
}

func (l *list[T]) init(capacity int) {
	l.s = make([]node[T], capacity)
	l.head, l.tail, l.n = nilIdx, nilIdx, 0
	l.free = nilIdx
	for i := capacity - 1; i >= 0; i-- {
		l.s[i].next = l.free
		l.free = int32(i)
	}
}

// push appends v at the tail; it reports false when the list is full.
func (l *list[T]) push(v T) bool {
	i := l.free
	if i == nilIdx {
		return false
	}
	l.free = l.s[i].next
	l.s[i] = node[T]{v: v, prev: l.tail, next: nilIdx}
	if l.tail == nilIdx {
		l.head = i
	} else {
		l.s[l.tail].next = i
	}
	l.tail = i
	l.n++
	return true
}

// remove unlinks slot i, returns its value to the caller and frees the slot.
func (l *list[T]) remove(i int32) T {
	nd := &l.s[i]
	v := nd.v
	if nd.prev == nilIdx {
		l.head = nd.next
	} else {
		l.s[nd.prev].next = nd.next
	}
	if nd.next == nilIdx {
		l.tail = nd.prev
	} else {
		l.s[nd.next].prev = nd.prev
	}
	var zero T
	*nd = node[T]{v: zero, prev: nilIdx, next: l.free}
	l.free = i
	l.n--
	return v
}

// unexp is an unexpected message and its claim state.
type unexp struct {
	Msg
	claimed bool
	ctx     uint64
}

// Queue is one matching context: a list of posted receives and a list of
// unexpected messages, in arrival order. Make two per endpoint: one untagged
// (tag/ignore not compared) and one tagged.
type Queue struct {
	tagged bool
	recvs  list[Recv]
	msgs   list[unexp]
}

// New returns a queue with room for recvs posted receives and unexp
// unexpected messages; tagged says whether tags are compared. All memory is
// allocated here. Negative capacities are treated as zero.
func New(recvs, unexp int, tagged bool) *Queue {
	q := &Queue{tagged: tagged}
	q.recvs.init(max(recvs, 0))
	q.msgs.init(max(unexp, 0))
	return q
}

// matches reports whether a message from src with tag satisfies the filter
// (fsrc, ftag, fignore). Tags are compared only on tagged queues.
func (q *Queue) matches(src, tag, fsrc, ftag, fignore uint64) bool {
	if fsrc != AddrAny && fsrc != src {
		return false
	}
	return !q.tagged || (tag^ftag)&^fignore == 0
}

// Post adds a posted receive at the tail. Before posting, callers normally
// call TakeUnexpected first (a receive must match the oldest queued
// unexpected message first, per libfabric ordering). It returns ErrFull at
// capacity.
func (q *Queue) Post(r Recv) error {
	if !q.recvs.push(r) {
		return ErrFull
	}
	return nil
}

// Arrive looks for the oldest posted receive that matches a message from src
// with tag; if found it removes and returns it (ok=true). Otherwise ok=false
// and the caller should store the message with Unexpected. O(posted).
func (q *Queue) Arrive(src, tag uint64) (r Recv, ok bool) {
	l := &q.recvs
	for i := l.head; i != nilIdx; i = l.s[i].next {
		p := &l.s[i].v
		if q.matches(src, tag, p.Src, p.Tag, p.Ignore) {
			return l.remove(i), true
		}
	}
	return Recv{}, false
}

// Unexpected appends an unmatched message to the unexpected list. It returns
// ErrFull at capacity.
func (q *Queue) Unexpected(m Msg) error {
	if !q.msgs.push(unexp{Msg: m}) {
		return ErrFull
	}
	return nil
}

// findMsg returns the slot of the oldest unclaimed unexpected message
// matching (src, tag, ignore), or nilIdx.
func (q *Queue) findMsg(src, tag, ignore uint64) int32 {
	l := &q.msgs
	for i := l.head; i != nilIdx; i = l.s[i].next {
		u := &l.s[i].v
		if !u.claimed && q.matches(u.Src, u.Tag, src, tag, ignore) {
			return i
		}
	}
	return nilIdx
}

// findClaimed returns the slot of the oldest message claimed by ctx, or
// nilIdx.
func (q *Queue) findClaimed(ctx uint64) int32 {
	l := &q.msgs
	for i := l.head; i != nilIdx; i = l.s[i].next {
		if u := &l.s[i].v; u.claimed && u.ctx == ctx {
			return i
		}
	}
	return nilIdx
}

// TakeUnexpected removes and returns the oldest unclaimed unexpected message
// matching (src, tag, ignore) (src AddrAny: any source).
func (q *Queue) TakeUnexpected(src, tag, ignore uint64) (m Msg, ok bool) {
	if i := q.findMsg(src, tag, ignore); i != nilIdx {
		return q.msgs.remove(i).Msg, true
	}
	return Msg{}, false
}

// Peek returns, without removing, the oldest unclaimed unexpected message
// matching (src, tag, ignore) (FI_PEEK).
func (q *Queue) Peek(src, tag, ignore uint64) (Msg, bool) {
	if i := q.findMsg(src, tag, ignore); i != nilIdx {
		return q.msgs.s[i].v.Msg, true
	}
	return Msg{}, false
}

// Claim marks the oldest matching unclaimed unexpected message as claimed by
// context ctx (FI_PEEK|FI_CLAIM) and returns it. A claimed message no longer
// matches TakeUnexpected, Peek, Claim or DiscardMatch; it can be taken only
// with TakeClaimed(ctx) (FI_CLAIM) or dropped with Discard(ctx)
// (FI_CLAIM|FI_DISCARD).
func (q *Queue) Claim(src, tag, ignore, ctx uint64) (Msg, bool) {
	i := q.findMsg(src, tag, ignore)
	if i == nilIdx {
		return Msg{}, false
	}
	u := &q.msgs.s[i].v
	u.claimed, u.ctx = true, ctx
	return u.Msg, true
}

// TakeClaimed removes and returns the oldest message claimed by ctx
// (FI_CLAIM).
func (q *Queue) TakeClaimed(ctx uint64) (Msg, bool) {
	if i := q.findClaimed(ctx); i != nilIdx {
		return q.msgs.remove(i).Msg, true
	}
	return Msg{}, false
}

// Discard removes and returns the oldest message claimed by ctx
// (FI_CLAIM|FI_DISCARD); the caller frees its buffer.
func (q *Queue) Discard(ctx uint64) (Msg, bool) {
	return q.TakeClaimed(ctx)
}

// DiscardMatch removes and returns the oldest matching unclaimed unexpected
// message without a claim (FI_PEEK|FI_DISCARD); the caller frees its buffer.
func (q *Queue) DiscardMatch(src, tag, ignore uint64) (Msg, bool) {
	return q.TakeUnexpected(src, tag, ignore)
}

// Cancel removes the posted receive whose Context is ctx (the oldest one, if
// several) and returns it. O(posted).
func (q *Queue) Cancel(ctx uint64) (Recv, bool) {
	l := &q.recvs
	for i := l.head; i != nilIdx; i = l.s[i].next {
		if l.s[i].v.Context == ctx {
			return l.remove(i), true
		}
	}
	return Recv{}, false
}

// Posted returns the number of posted receives.
func (q *Queue) Posted() int { return q.recvs.n }

// Pending returns the number of unexpected messages, claimed ones included.
func (q *Queue) Pending() int { return q.msgs.n }

// Flush removes every posted receive, calling f on each in order (to complete
// them as canceled), and every unexpected message, claimed or not, calling g
// on each in order (to free buffers). Either may be nil.
func (q *Queue) Flush(f func(Recv), g func(Msg)) {
	for q.recvs.head != nilIdx {
		r := q.recvs.remove(q.recvs.head)
		if f != nil {
			f(r)
		}
	}
	for q.msgs.head != nilIdx {
		m := q.msgs.remove(q.msgs.head).Msg
		if g != nil {
			g(m)
		}
	}
}
