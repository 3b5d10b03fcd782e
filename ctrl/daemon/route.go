package daemon

import (
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Expectations and queues. An application announces a READ on the ring
// of its worker that owns the queue pair, and so to the daemon's worker
// of that queue; the NIC delivers the responses on the queue its hashing
// picks (RSS on a NIC; on veth, the queue the peer sent them on), often
// another. The worker that takes an expectation therefore hands it to
// the worker that receives the queue pair's packets (Daemon.rx), through
// a small ring between the two, or to every worker while none has
// arrived yet (a queue pair's first read).
//
// Handing over races with the responses: the request leaves as soon as
// the taking worker moves on, and the receiving worker takes what was
// handed only at the start of its next pass. Were some responses passed
// whole before the expectation was in place, it would wait for a PSN that
// will not come, and could later place a duplicate of a response into a
// buffer the application already had back. So the receiving worker
// starts a handed expectation after the furthest response it passed, if
// that lies inside it (Daemon.rx records the furthest; settle), and a
// worker forgets a queue pair's expectations when the pair's packets
// move to it from another queue (they were made for the other). The rest
// of a WRITE or SEND, announced after its first packets, always starts
// that way, wherever it is taken, and not at all when a message ended in
// what passed (Daemon.rxEnd).

// The rx word of a queue pair (Daemon.rx) says where its packets arrive
// and how far they went:
//
//	bits 0-23   the furthest READ response delivered (its PSN), valid with rxResp
//	bits 25-48  the furthest request delivered (a SEND, WRITE, READ or
//	            atomic from the peer), valid with rxReq
//	bits 50-63  the worker that last delivered one of its RC packets,
//	            plus one (0: none yet)
//
// Furthest in PSN order: a duplicate of an older packet arriving late
// does not move it back. It starts again at zero when the QPN is taken
// and when the queue pair connects.
const (
	rxResp        = 1 << 24
	rxReqShift    = 25
	rxReq         = 1 << 49
	rxWorkerShift = 50
)

// rxEndValid marks a word of Daemon.rxEnd: the PSN of the furthest
// request delivered that ends a message (a last or only packet), by QPN.
const rxEndValid = 1 << 24

// rxWorker is the worker of an rx word, or -1.
func rxWorker(v uint64) int { return int(v>>rxWorkerShift) - 1 }

// rxFurthest is the furthest PSN of an rx word, of requests or of READ
// responses, and whether there is one.
func rxFurthest(v uint64, requests bool) (psn.PSN, bool) {
	if requests {
		return psn.PSN(v >> rxReqShift & psn.Mask), v&rxReq != 0
	}
	return psn.PSN(v & psn.Mask), v&rxResp != 0
}

// arrived records that this worker delivers an RC packet, parsed in p, of
// queue pair qpn, and forgets the pair's expectations here when its
// packets came to another worker before (a flow moved between queues).
// One load per packet, and a store when something changed.
func (w *worker) arrived(qpn uint32, p *wire.Packet) {
	r := &w.d.rx[qpn]
	old := r.Load()
	v := old&(1<<rxWorkerShift-1) | uint64(w.q+1)<<rxWorkerShift
	ps := psn.PSN(p.BTH().PSN())
	switch m := p.Info.Mask; {
	case m&wire.MaskReadResponse != 0:
		if f, ok := rxFurthest(old, false); !ok || ps.After(f) {
			v = v&^(psn.Mask|rxResp) | rxResp | uint64(ps)
		}
	case m&wire.MaskRequest != 0:
		if f, ok := rxFurthest(old, true); !ok || ps.After(f) {
			v = v&^(psn.Mask<<rxReqShift|rxReq) | rxReq | uint64(ps)<<rxReqShift
		}
		if m&wire.MaskLast != 0 {
			e := &w.d.rxEnd[qpn]
			if o := e.Load(); o&rxEndValid == 0 || ps.After(psn.PSN(o&psn.Mask)) {
				e.Store(rxEndValid | uint32(ps))
			}
		}
	}
	if v == old {
		return
	}
	r.Store(v)
	if h := rxWorker(old); h >= 0 && h != w.q && w.nexp > 0 {
		w.dropExpect(qpn)
	}
}

// handed is an expectation on its way between workers.
type handed struct {
	a   *app
	x   shmlink.Expectation
	gen uint32 // Daemon.gen of its queue pair when it was taken
}

// handRing passes expectations from one worker to another: one producer,
// one consumer, a fixed number of slots. What does not fit is not placed.
type handRing struct {
	tail atomic.Uint32 // written by the producer
	_    [60]byte
	head atomic.Uint32 // written by the consumer
	_    [60]byte
	m    [64]handed
}

func (r *handRing) push(h handed) bool {
	t := r.tail.Load()
	if t-r.head.Load() == uint32(len(r.m)) {
		return false
	}
	r.m[t%uint32(len(r.m))] = h
	r.tail.Store(t + 1)
	return true
}

// pop takes the oldest expectation into h, clearing its slot (no pointer
// to an application stays behind).
func (r *handRing) pop(h *handed) bool {
	hd := r.head.Load()
	if hd == r.tail.Load() {
		return false
	}
	s := &r.m[hd%uint32(len(r.m))]
	*h, *s = *s, handed{}
	r.head.Store(hd + 1)
	return true
}

// connectHands gives each of the workers a ring from each other one.
func connectHands(ws []*worker) {
	if len(ws) < 2 {
		return
	}
	for _, w := range ws {
		w.hands = make([]*handRing, len(ws))
		for k := range ws {
			if k != w.q {
				w.hands[k] = new(handRing)
			}
		}
	}
}

// route puts the checked expectation x of application a where its
// packets arrive: in this worker's table, in another worker's hand ring,
// or, while none has arrived, in every worker's. It reports whether it
// went anywhere.
func (w *worker) route(a *app, x *shmlink.Expectation, now int64) bool {
	gen := w.d.gen[x.QPN].Load()
	h := rxWorker(w.d.rx[x.QPN].Load())
	ws := w.d.workers
	switch {
	case h == w.q || len(ws) < 2 || h >= len(ws):
		return w.take(a, x, gen, now, false)
	case h >= 0:
		return w.handTo(ws[h], a, x, gen)
	}
	// None of the queue pair's packets arrived yet (a READ's responses):
	// here as well as everywhere.
	ok := w.take(a, x, gen, now, false)
	for _, o := range ws {
		if o != w && w.handTo(o, a, x, gen) {
			ok = true
		}
	}
	return ok
}

// handTo pushes an expectation to worker o, waking it if it sleeps.
func (w *worker) handTo(o *worker, a *app, x *shmlink.Expectation, gen uint32) bool {
	if !o.hands[w.q].push(handed{a: a, x: *x, gen: gen}) {
		w.c.handFull.Add(1)
		return false
	}
	w.c.handed.Add(1)
	if o.asleep.Load() {
		o.kick()
	}
	return true
}

// take adds the checked expectation x of application a to this worker's
// table, settled first (settle) when it was handed over or is the rest
// of a WRITE or SEND; what settles to nothing is counted late.
func (w *worker) take(a *app, x *shmlink.Expectation, gen uint32, now int64, handed bool) bool {
	if (handed || x.Requests) && !w.settle(x) {
		w.c.handLate.Add(1)
		return false
	}
	return w.insert(a, x, gen, now)
}

// takeHanded takes the expectations other workers handed this one that
// are still their application's (take).
func (w *worker) takeHanded() {
	var h handed
	for _, r := range w.hands {
		if r == nil || r.head.Load() == r.tail.Load() {
			continue
		}
		w.now = int64(time.Since(w.epoch))
		for r.pop(&h) {
			x := &h.x
			if w.d.owner[x.QPN].Load() != h.a {
				continue // gone since: nothing to place
			}
			w.take(h.a, x, h.gen, w.now, true)
		}
	}
}

// settle makes expectation x, about to be taken by the worker that
// delivers its queue pair's packets, start after the furthest packet of
// its kind (requests or READ responses) the worker delivered so far when
// that lies inside it: those passed whole (or were lost), and the
// transport has them or will ask again. It reports false when nothing of
// x is left.
//
// The rest of a WRITE or SEND is announced after its first packets, so
// this is how one starts; a READ's responses are announced before the
// request, and an expectation taken where it was announced starts at
// once: only one handed over late is shortened (or a READ asked again
// after a loss, whose responses behind the loss passed whole).
func (w *worker) settle(x *shmlink.Expectation) bool {
	f, ok := rxFurthest(w.d.rx[x.QPN].Load(), x.Requests)
	first := psn.PSN(x.PSN)
	if !ok || f.Before(first) {
		return true
	}
	// A message ended in what passed (a send's expectation runs to the end
	// of its receive buffer, past its message): what is left of x may be
	// another message's.
	if e := w.d.rxEnd[x.QPN].Load(); x.Requests && e&rxEndValid != 0 && !psn.PSN(e&psn.Mask).Before(first) {
		return false
	}
	k := uint32(f.Diff(first)) + 1
	if k >= x.Packets {
		return false
	}
	x.PSN = uint32(first.Add(k))
	x.Packets -= k
	x.Offset += uint64(k) * uint64(x.MTU)
	x.Len -= uint64(k) * uint64(x.MTU)
	return true
}
