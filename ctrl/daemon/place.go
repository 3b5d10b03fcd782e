package daemon

import (
	"os"

	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Placement: an application announces on its ring the RC data packets it
// expects (shmlink.Expectation: a READ's responses, the rest of a WRITE or
// SEND) and where their payload goes, in memory it shares with the daemon
// (app.mem). The worker that switches such a packet checks its ICRC,
// copies its payload from the UMEM straight there and passes only its
// headers, marked placed: one copy on receive, as in process, where the
// daemon would otherwise copy the frame to the ring and the application
// copy it again.
//
// What may be placed is narrow, so that nothing lands where the transport
// would not have put it: a packet to a queue pair of the application that
// announced it, from the announced peer, with the PSN next in its
// expectation (in order, each at most once), of a data-carrying opcode
// that continues a message, a full path MTU unless it is the last, inside
// the announced buffer. The rest of a WRITE or SEND is announced after
// its first packets, so it starts after what the worker already passed
// (route.go, settle), and the next packet of it that cannot be placed
// ends it. Anything else passes whole, as before. A new
// expectation of a queue pair supersedes those it overlaps (a request
// asked again); an expectation ends with its last packet or a packet with
// a last opcode, and lapses after expectTTL. The worker looks the region
// up again for every packet, so memory the application gives back
// (OpDeleteMemory, which waits for the workers) is never written after.

// placing is false when SOFTFABRIC_DAEMON_PLACE=0: the workers refuse
// every expectation, and frames reach the applications whole (what to
// compare against, or a way out should placement misbehave).
var placing = os.Getenv("SOFTFABRIC_DAEMON_PLACE") != "0"

// Limits of the expectation table, per worker.
const (
	expectPerQP = 16                   // live expectations per queue pair (reads in flight: max_rd_atomic is 16); the oldest gives way
	expectTTL   = int64(2_000_000_000) // ns an expectation lives without its packets
	maxExpectQP = 1 << 12              // queue pairs with expectations, per worker (1.4 KiB each)
	maxExpectPk = 1 << 20              // packets in one expectation
	expectMTUs  = 256 | 512 | 1024 | 2048 | 4096
)

// expected is one live expectation.
type expected struct {
	a       *app
	region  uint32
	base    uint64 // the buffer's offset in its region
	size    uint64 // the buffer's length
	psn     psn.PSN
	done    uint32 // packets placed
	packets uint32
	mtu     uint32
	req     bool   // the rest of a WRITE or SEND, not a READ's responses
	gen     uint32 // Daemon.gen of the queue pair when taken
	peer    [16]byte
	expires int64
}

// qpExpect are one queue pair's live expectations.
type qpExpect struct {
	e [expectPerQP]expected
	n int
}

// expect records the expectation x that application a sent on this
// worker's ring, after checking it against what a owns, in the worker
// that receives the queue pair's packets (route.go); it reports whether
// it was taken.
func (w *worker) expect(a *app, x *shmlink.Expectation, now int64) bool {
	if !expectable(w.d, a, x) {
		return false
	}
	return w.route(a, x, now)
}

// expectable reports whether application a may announce x: for a queue
// pair it owns, a buffer inside one of its shared regions, a path MTU
// and a length the packets can carry.
func expectable(d *Daemon, a *app, x *shmlink.Expectation) bool {
	if !placing || x.QPN >= uint32(len(d.owner)) || d.owner[x.QPN].Load() != a {
		return false
	}
	if x.MTU&expectMTUs == 0 || x.MTU&(x.MTU-1) != 0 || x.Packets == 0 || x.Packets > maxExpectPk ||
		x.PSN > psn.Mask || x.Len == 0 || x.Len > uint64(x.Packets)*uint64(x.MTU) || x.Len <= uint64(x.Packets-1)*uint64(x.MTU) {
		return false
	}
	mem := a.mem.Load()
	if mem == nil {
		return false
	}
	reg, ok := (*mem)[x.Region]
	return ok && x.Offset <= uint64(len(reg)) && x.Len <= uint64(len(reg))-x.Offset
}

// insert adds the checked expectation x of application a to this
// worker's table; it reports false when the table is full.
func (w *worker) insert(a *app, x *shmlink.Expectation, gen uint32, now int64) bool {
	q := w.exp[x.QPN]
	if q == nil {
		if len(w.exp) >= maxExpectQP {
			w.pruneExpect(now)
			if len(w.exp) >= maxExpectQP {
				return false
			}
		}
		q = new(qpExpect)
		w.exp[x.QPN] = q
	}
	first := psn.PSN(x.PSN)
	nx := expected{a: a, region: x.Region, base: x.Offset, size: x.Len, psn: first, packets: x.Packets, mtu: x.MTU, peer: x.Peer, req: x.Requests,
		gen: gen, expires: now + expectTTL}
	// Drop what lapsed, belongs to another application now, or overlaps
	// the new one; keep the rest, the new one last.
	was, k := q.n, 0
	for _, o := range q.e[:q.n] {
		if o.expires <= now || o.a != a || o.req == nx.req && rangesOverlap(first, x.Packets, o.psn, o.packets-o.done) {
			continue
		}
		q.e[k] = o
		k++
	}
	clear(q.e[k:q.n])
	if k == expectPerQP {
		copy(q.e[:], q.e[1:])
		k--
	}
	q.e[k] = nx
	q.n = k + 1
	w.nexp += q.n - was
	return true
}

// rangesOverlap reports whether PSN ranges [a, a+n) and [b, b+m) share a
// PSN.
func rangesOverlap(a psn.PSN, n uint32, b psn.PSN, m uint32) bool {
	return b.InWindow(a, n) || a.InWindow(b, m)
}

// dropExpect forgets queue pair qpn's expectations.
func (w *worker) dropExpect(qpn uint32) {
	if q := w.exp[qpn]; q != nil {
		w.nexp -= q.n
		delete(w.exp, qpn)
	}
}

// pruneExpect forgets expectations that lapsed or whose application no
// longer owns their queue pair (it detached, or deleted the queue pair),
// and the queue pairs left with none.
func (w *worker) pruneExpect(now int64) {
	for qpn, q := range w.exp {
		owner := w.d.owner[qpn].Load()
		k := 0
		for _, o := range q.e[:q.n] {
			if o.expires > now && o.a == owner {
				q.e[k] = o
				k++
			}
		}
		clear(q.e[k:q.n]) // no pointer to a detached application stays
		w.nexp -= q.n - k
		q.n = k
		if k == 0 {
			delete(w.exp, qpn)
		}
	}
}

// pruneEvery is how often (in passes) a worker with live expectations
// prunes them.
const pruneEvery = 1 << 16

// place switches the parsed packet p in frame f, for application a, to
// e placed, when an expectation of a says where its payload goes; buf is
// e's TxBuf slot, which holds f. It reports whether it did; when not, the
// caller passes the frame whole.
func (w *worker) place(a *app, e *shmlink.End, buf []byte, p *wire.Packet, f []byte) bool {
	info := p.Info
	req := info.Mask&wire.MaskRequest != 0
	if !req && info.Mask&wire.MaskReadResponse == 0 {
		return false
	}
	bth := p.BTH()
	q := w.exp[bth.DestQP()]
	if q == nil {
		return false
	}
	ps := psn.PSN(bth.PSN())
	var x *expected
	for i := range q.e[:q.n] {
		if o := &q.e[i]; o.psn == ps && o.a == a && o.req == req && o.expires > w.now {
			x = o
			break
		}
	}
	if x == nil {
		return false
	}
	if x.gen != w.d.gen[bth.DestQP()].Load() {
		w.endExpect(q, x) // made for an earlier connection of the queue pair
		return false
	}
	// The next packet of the rest of a WRITE or SEND that cannot be
	// placed ends its expectation: it passes whole, and a later copy of
	// it must not be placed behind it (the transport may have finished
	// the message). A WRITE's last packet with immediate data is not
	// placed: it takes a receive, and with none posted the transport
	// answers RNR and must leave memory as it was.
	if req && (info.Mask&(wire.MaskSend|wire.MaskWrite) == 0 || info.Mask&wire.MaskFirst != 0 ||
		info.Mask&(wire.MaskWrite|wire.MaskImm) == wire.MaskWrite|wire.MaskImm) {
		w.endExpect(q, x)
		return false
	}
	last := info.Mask&wire.MaskLast != 0
	n := uint64(len(p.Payload))
	off := uint64(x.done) * uint64(x.mtu)
	if !last && n != uint64(x.mtu) || off > x.size || n > x.size-off || p.Src().As16() != x.peer {
		return w.unplaced(q, x)
	}
	mem := a.mem.Load()
	if mem == nil {
		return w.unplaced(q, x)
	}
	reg, ok := (*mem)[x.region]
	if !ok || x.base+x.size > uint64(len(reg)) {
		return w.unplaced(q, x)
	}
	hdr := p.BTHOff + info.HeaderLen
	if !p.CheckICRC() {
		return w.unplaced(q, x) // passed whole: the transport drops it, as in process
	}
	copy(reg[x.base+off:], p.Payload)
	// The frame as received but for its payload: the headers, and the
	// pad and ICRC after it.
	copy(buf, f[:hdr])
	copy(buf[hdr+len(p.Payload):len(f)], f[hdr+len(p.Payload):])
	e.TxSubmitPlaced(len(f), x.region, x.base+off, uint32(n))
	x.done++
	x.psn = x.psn.Add(1)
	if last || x.done == x.packets {
		w.endExpect(q, x)
	}
	return true
}

// unplaced is place's answer for the packet next in expectation x of q
// that it does not place: false, after ending x when it expects requests
// (place says why).
func (w *worker) unplaced(q *qpExpect, x *expected) bool {
	if x.req {
		w.endExpect(q, x)
	}
	return false
}

// endExpect removes expectation x from q.
func (w *worker) endExpect(q *qpExpect, x *expected) {
	*x = q.e[q.n-1]
	q.e[q.n-1] = expected{}
	q.n--
	w.nexp--
}
