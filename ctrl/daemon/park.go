package daemon

import (
	"slices"

	"github.com/softfabric/softfabric/dataplane/xsk"
)

// Parking: a frame from the NIC for an application whose ring is full
// (it fell behind a burst, or was descheduled) is not left in the NIC's
// ring, where it would hold up the frames behind it for every other
// application on the queue, nor dropped, which its transport would pay
// for with a retransmit. The worker keeps its chunk in the UMEM
// (xsk.Socket.Keep: a spare chunk takes its place in the fill ring),
// parks it on the application's queue of such frames, and goes on with
// the next. Each pass first moves parked frames to rings that have room
// again, oldest first; while an application has any parked, its new
// frames from the NIC park behind them, so that it gets them in the
// order they came. A frame a forwarder handed over (forward.go) is
// parked as a copy in spare chunks (xsk.Socket.Borrow). Only when the
// worker's spare chunks are all parked, or the application holds three
// quarters of them, is a frame for a full ring dropped (ring_full): the
// slow application pays for its slowness, not the others. An idle
// worker with frames parked sleeps until the application makes room:
// its library rings the worker's doorbell for that (shmlink.End.PrepareRoom).

// parkSpare is how many frames each worker can park: the spare chunks
// of its AF_XDP socket, 4 MiB of UMEM more at 4 KiB a chunk (the socket
// has 2048 for receive and as many for transmit).
const parkSpare = 1024

// keeper is what parking needs of the worker's AF_XDP socket
// (xsk.Socket).
type keeper interface {
	Spare() int
	Keep(i int, dst []xsk.Chunk) []xsk.Chunk
	Borrow(f []byte, dst []xsk.Chunk) ([]xsk.Chunk, bool)
	View(c xsk.Chunk) []byte
	Return(cs []xsk.Chunk)
}

// parked are the frames one worker parked for one application, in the
// order they arrived.
type parked struct {
	chunks []xsk.Chunk // the frames' chunks, in order
	ends   []int       // per frame, one past its last chunk in chunks
	next   int         // the first frame not yet delivered
}

func (q *parked) pending() int { return len(q.ends) - q.next }

// held is how many chunks q holds: those of the frames not yet delivered
// (unkeep gave back the others').
func (q *parked) held() int { return len(q.chunks) - q.start(q.next) }

// park keeps frame f for application a, whose ring is full or has frames
// parked before it: frame i of the last receive, its chunks kept where
// they are, or (i < 0) a copy in spare chunks. It reports whether it
// did: not when the worker's spare chunks are all parked, nor when a
// holds three quarters of them (a quarter stays for the others).
func (w *worker) park(a *app, i int, f []byte) bool {
	q := &a.st[w.q].park
	before := len(q.chunks)
	if spare := w.keep.Spare(); w.kept >= spare || q.held() >= spare*3/4 {
		return false
	}
	if i >= 0 {
		q.chunks = w.keep.Keep(i, q.chunks)
	} else {
		q.chunks, _ = w.keep.Borrow(f, q.chunks)
	}
	if len(q.chunks) == before {
		return false // no spare chunk left, or not a frame of the last receive
	}
	w.kept += len(q.chunks) - before
	q.ends = append(q.ends, len(q.chunks))
	if q.pending() == 1 {
		w.parking = append(w.parking, a)
	}
	w.c.parked.Add(1)
	w.c.waiting.Add(1)
	return true
}

// unpark delivers the frames parked for each application as far as its
// ring has room, and drops those of applications that are gone, giving
// their chunks back to the NIC. It reports whether it delivered any.
func (w *worker) unpark(apps []*app) bool {
	did := false
	w.parking = slices.DeleteFunc(w.parking, func(a *app) bool {
		q := &a.st[w.q].park
		from := q.next
		if slices.Contains(apps, a) {
			for q.pending() > 0 && w.deliverParked(a, q) {
				q.next++
			}
			did = did || q.next > from
		} else {
			w.c.unknown.Add(uint64(q.pending())) // it went: dropped
			q.next = len(q.ends)
		}
		if q.next > from {
			w.c.waiting.Add(-int64(q.next - from))
			w.unkeep(q, from)
		}
		return q.pending() == 0
	})
	if did {
		w.publish(apps)
	}
	return did
}

// deliverParked delivers the next frame parked for application a, and
// reports false, having done nothing, when a's ring is still full. A
// frame whose queue pair is no longer a's goes to its owner now, or is
// dropped.
func (w *worker) deliverParked(a *app, q *parked) bool {
	cs := q.chunks[q.start(q.next):q.ends[q.next]]
	f := w.keep.View(cs[0])
	if len(cs) > 1 {
		n := 0
		for _, c := range cs {
			n += copy(w.big[n:], w.keep.View(c))
		}
		f = w.big[:n]
	}
	if err := w.pkt.Parse(f); err != nil {
		w.c.malformed.Add(1) // it parsed when it was parked
		return true
	}
	owner := w.ownerOf(&w.pkt)
	if owner == nil {
		return true
	}
	if w.deliverTo(owner, &w.pkt, f) {
		return true
	}
	if owner == a {
		return false
	}
	w.dropFull(owner)
	return true
}

// start is where frame i's chunks begin in q.chunks.
func (q *parked) start(i int) int {
	if i == 0 {
		return 0
	}
	return q.ends[i-1]
}

// unkeep gives the chunks of q's frames from from up to q.next, which
// are delivered (or dropped), back to the NIC, and forgets the frames
// before q.next once they are half of q (or all of it).
func (w *worker) unkeep(q *parked, from int) {
	cs := q.chunks[q.start(from):q.start(q.next)]
	w.keep.Return(cs)
	w.kept -= len(cs)
	switch {
	case q.pending() == 0:
		q.chunks, q.ends, q.next = q.chunks[:0], q.ends[:0], 0
	case q.next*2 >= len(q.ends):
		k := q.start(q.next)
		q.chunks = q.chunks[:copy(q.chunks, q.chunks[k:])]
		q.ends = q.ends[:copy(q.ends, q.ends[q.next:])]
		for i := range q.ends {
			q.ends[i] -= k
		}
		q.next = 0
	}
}
