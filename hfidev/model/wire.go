package model

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// Wire joins two modeled units port to port: every packet a send context
// of one emits arrives at the other's Ingress, in order, synchronously
// (the store that completes a PIO packet returns after the peer has
// written its RcvHdrQ entry). The PBC stays behind, as on a real link.
//
// Simplifications: no switch, no link delay or credits between ports, no
// ICRC on the wire; on JKR only 9B packets (PBC.L2Type 9B) cross, 16B ones
// are counted in Stats.NotModeled and dropped.
type Wire struct {
	a, b *Unit
	drop atomic.Pointer[func(from *Unit, pkt []byte) bool]

	carried, dropped, notModeled atomic.Uint64
}

// WireStats counts what a wire did.
type WireStats struct {
	Carried    uint64 // handed to the peer's Ingress
	Dropped    uint64 // taken by the SetDrop function
	NotModeled uint64 // 16B packets on JKR
}

// Connect joins a and b, replacing both units' egress functions.
func Connect(a, b *Unit) *Wire {
	w := &Wire{a: a, b: b}
	a.SetEgress(func(_ uint16, pkt []byte) { w.carry(a, b, pkt) })
	b.SetEgress(func(_ uint16, pkt []byte) { w.carry(b, a, pkt) })
	return w
}

// SetDrop installs a loss function: a packet (PBC excluded) for which it
// returns true is lost on the wire. nil loses nothing.
func (w *Wire) SetDrop(fn func(from *Unit, pkt []byte) bool) {
	if fn == nil {
		w.drop.Store(nil)
		return
	}
	w.drop.Store(&fn)
}

func (w *Wire) carry(from, to *Unit, pkt []byte) {
	pbc := abi.PBC(binary.LittleEndian.Uint64(pkt))
	if from.cfg.Chip != abi.ChipWFR && pbc.L2Type() == abi.L2Type16B {
		w.notModeled.Add(1)
		return
	}
	body := pkt[abi.PBCSize:]
	if fn := w.drop.Load(); fn != nil && (*fn)(from, body) {
		w.dropped.Add(1)
		return
	}
	w.carried.Add(1)
	to.Ingress(body)
}

// Stats returns the wire's counters.
func (w *Wire) Stats() WireStats {
	return WireStats{Carried: w.carried.Load(), Dropped: w.dropped.Load(), NotModeled: w.notModeled.Load()}
}
