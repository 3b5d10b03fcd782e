package shmlink

import (
	"encoding/binary"
	"unsafe"

	"github.com/softfabric/softfabric/dataplane/link"
)

// Placement: the daemon writes the payload of announced frames straight
// into application memory it maps (MemRegion), and passes only their
// headers through the ring. The application announces each run of
// packets it expects (link.Expectation, as the RC transport makes them)
// in a slot of its ring flagged as an expectation; the daemon passes a
// placed frame in a slot flagged as placed, whose tail says where the
// payload went.
//
// A slot's length word carries the flags in its top bits:
//
//	bit 31  placed (to-app): the frame's payload bytes in the slot are not
//	        filled in; the slot's header line, from byte 8, holds region
//	        ID (uint32), zero (uint32), offset in the region (uint64) and
//	        payload length (uint32)
//	bit 30  expectation (from-app): the slot holds an encoded
//	        Expectation, not a frame
//	bit 29  gather (from-app): the frame's payload bytes in the slot are
//	        not filled in; the daemon takes them from the application's
//	        region when it sends the frame. The header line, from byte 8,
//	        holds region ID, the payload's offset in the frame (uint32),
//	        its offset in the region and its length, as for placed
//	        frames
//
// and the length in its low 24 bits.
const (
	flagPlaced = 1 << 31
	flagExpect = 1 << 30
	flagGather = 1 << 29
	lenMask    = 1<<24 - 1

	// ExpectationSize is the encoded size of an Expectation.
	ExpectationSize = 56
	placeDescSize   = 20
)

// MemRegion is application memory the daemon maps too (a sealed memfd
// the application handed it): ID names it in the rings, Mem is the
// application's own mapping.
type MemRegion struct {
	ID  uint32
	Mem []byte
}

// SetMemRegions tells the application's End which of its memory the
// daemon maps: Expect announces only buffers inside one of these, and a
// frame the daemon placed is found in them. Any goroutine may call it;
// rs is copied. Before the application unmaps a region it calls this
// without it, then has the daemon drop it: a frame placed there and
// received after is dropped.
func (e *End) SetMemRegions(rs []MemRegion) {
	c := append([]MemRegion(nil), rs...)
	e.mem.Store(&c)
}

// Expectation is a link.Expectation as it crosses the ring: the buffer
// named by region and offset. Decoded on the daemon's side, it is what
// the application wrote and must be checked before use.
type Expectation struct {
	QPN, PSN, Packets, MTU uint32
	Peer                   [16]byte // the sender's GID
	Region                 uint32
	// Requests is set for the rest of a WRITE or SEND from the peer,
	// clear for the responses to a READ of this end's.
	Requests    bool
	Offset, Len uint64
}

func (x *Expectation) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], x.QPN)
	le.PutUint32(b[4:], x.PSN)
	le.PutUint32(b[8:], x.Packets)
	le.PutUint32(b[12:], x.MTU)
	copy(b[16:32], x.Peer[:])
	le.PutUint32(b[32:], x.Region)
	var kind uint32
	if x.Requests {
		kind = 1
	}
	le.PutUint32(b[36:], kind)
	le.PutUint64(b[40:], x.Offset)
	le.PutUint64(b[48:], x.Len)
}

func (x *Expectation) decode(b []byte) {
	le := binary.LittleEndian
	x.QPN = le.Uint32(b[0:])
	x.PSN = le.Uint32(b[4:])
	x.Packets = le.Uint32(b[8:])
	x.MTU = le.Uint32(b[12:])
	copy(x.Peer[:], b[16:32])
	x.Region = le.Uint32(b[32:])
	x.Requests = le.Uint32(b[36:])&1 != 0
	x.Offset = le.Uint64(b[40:])
	x.Len = le.Uint64(b[48:])
}

// placeDesc is where a frame's payload lies in a region: placed there by
// the daemon, or to be gathered from there.
type placeDesc struct {
	region uint32
	at     uint32 // gathered: the payload's offset in the frame
	off    uint64
	n      uint32
}

func (d *placeDesc) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], d.region)
	le.PutUint32(b[4:], d.at)
	le.PutUint64(b[8:], d.off)
	le.PutUint32(b[16:], d.n)
}

func getDesc(b []byte) placeDesc {
	le := binary.LittleEndian
	return placeDesc{region: le.Uint32(b[0:]), at: le.Uint32(b[4:]), off: le.Uint64(b[8:]), n: le.Uint32(b[16:])}
}

// regionOf finds the region holding all of buf and buf's offset in it.
func regionOf(rs []MemRegion, buf []byte) (uint32, uint64, bool) {
	if len(buf) == 0 {
		return 0, 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	for _, r := range rs {
		if len(r.Mem) == 0 {
			continue
		}
		base := uintptr(unsafe.Pointer(unsafe.SliceData(r.Mem)))
		if p >= base && p-base <= uintptr(len(r.Mem)) && uintptr(len(buf)) <= uintptr(len(r.Mem))-(p-base) {
			return r.ID, uint64(p - base), true
		}
	}
	return 0, 0, false
}

var (
	_ link.Expecter = (*End)(nil)
	_ link.Placer   = (*End)(nil)
	_ link.Gatherer = (*End)(nil)
)

// TxGather takes the payload of the frame being built in the TxBuf slot,
// at byte at, by reference, when it lies in a region SetMemRegions named:
// the daemon copies it from there when it sends the frame (it checks the
// region, the bounds and the frame, as for any frame). It reports false,
// and the caller copies the payload in, otherwise.
func (e *End) TxGather(at int, payload []byte) bool {
	t := &e.tx
	rs := e.mem.Load()
	if !t.held || rs == nil || at < 0 || uint64(at)+uint64(len(payload)) > uint64(t.slot) {
		return false
	}
	id, off, ok := regionOf(*rs, payload)
	if !ok {
		return false
	}
	t.gather = placeDesc{region: id, at: uint32(at), off: off, n: uint32(len(payload))}
	t.gathering = true
	return true
}

// Gathered reports, for view i of the last RecvZC on the daemon's end,
// where the application says the frame's payload lies (region ID, offset
// in the frame, offset in the region, length), when the frame's payload
// is to be gathered; false for an ordinary frame. Nothing in it is
// checked.
func (e *End) Gathered(i int) (region uint32, at uint32, off uint64, n uint32, ok bool) {
	r := &e.rx
	if i < 0 || uint32(i) >= r.held {
		return 0, 0, 0, 0, false
	}
	idx := (r.next + uint32(i)) & r.mask
	if r.flags[idx]&(flagGather>>24) == 0 {
		return 0, 0, 0, 0, false
	}
	d := r.place[idx]
	return d.region, d.at, d.off, d.n, true
}

// Expect announces x to the daemon when its buffer lies in a region
// SetMemRegions named, in a slot of its own ahead of the frames sent
// after it (for a READ's responses, the read request), and publishes at
// once (with frames queued before it). It does nothing when the buffer is
// elsewhere, the ring is full, or a TxBuf slot is lent: the frames then
// arrive whole, as usual.
//
// The rest of a WRITE or SEND is announced after the transport saw its
// first packets, when the daemon may have passed later ones to the ring
// already: the daemon starts such an expectation after the furthest
// request of the queue pair it delivered (ctrl/daemon), so that it never
// waits behind packets that went, to place a duplicate later into memory
// the application already had back.
func (e *End) Expect(x *link.Expectation) {
	rs := e.mem.Load()
	if rs == nil || x.MTU <= 0 || x.Packets == 0 {
		return
	}
	id, off, ok := regionOf(*rs, x.Buf)
	if !ok {
		return
	}
	t := &e.tx
	if t.held || e.failed.Load() != nil || e.free(1) == 0 {
		return
	}
	i := t.next & t.mask
	m := Expectation{QPN: x.QPN, PSN: x.PSN, Packets: x.Packets, MTU: uint32(x.MTU), Peer: x.Peer, Region: id, Offset: off, Len: uint64(len(x.Buf)), Requests: !x.Responses}
	m.encode(t.buf(i))
	t.lens[i] = flagExpect | ExpectationSize
	t.next++
	t.expects.Add(1)
	e.publish()
}

// Expectation decodes view i of the last RecvZC on the daemon's end if
// the application sent an expectation there, not a frame. Nothing in it
// is checked: it is what the application wrote.
func (e *End) Expectation(i int) (Expectation, bool) {
	r := &e.rx
	idx := (r.next + uint32(i)) & r.mask
	if i < 0 || uint32(i) >= r.held || r.flags[idx]&(flagExpect>>24) == 0 {
		return Expectation{}, false
	}
	var x Expectation
	x.decode(r.buf(idx))
	return x, true
}

// TxSubmitPlaced is TxSubmit for a frame whose payload the daemon placed
// in the application's region: the slot (from TxBuf) holds the frame's
// headers, n is the whole frame's length, and the payload, plen bytes,
// lies at off in the region.
func (e *End) TxSubmitPlaced(n int, region uint32, off uint64, plen uint32) {
	t := &e.tx
	if !t.held {
		return
	}
	t.held = false
	if n <= 0 || n > int(t.slot) || e.failed.Load() != nil {
		return
	}
	i := t.next & t.mask
	d := placeDesc{region: region, off: off, n: plen}
	d.put(t.tail(i))
	t.lens[i] = flagPlaced | uint32(n)
	t.next++
	t.frames++
	t.bytes += uint64(n)
	t.placed.Add(1)
}

// Placed reports, for frame i of the last Recv or RecvZC on the
// application's end, the payload the daemon placed, in the application's
// region; false for an ordinary frame. A frame placed in memory this End
// no longer knows (SetMemRegions dropped it) gives nil and true: the
// caller drops the frame.
func (e *End) Placed(i int) ([]byte, bool) {
	r := &e.rx
	if i < 0 || uint32(i) >= r.lastN {
		return nil, false
	}
	idx := (r.last + uint32(i)) & r.mask
	if r.flags[idx]&(flagPlaced>>24) == 0 {
		return nil, false
	}
	d := r.place[idx]
	if rs := e.mem.Load(); rs != nil {
		for _, m := range *rs {
			if m.ID == d.region && d.off <= uint64(len(m.Mem)) && uint64(d.n) <= uint64(len(m.Mem))-d.off {
				return m.Mem[d.off : d.off+uint64(d.n) : d.off+uint64(d.n)], true
			}
		}
	}
	return nil, true
}
