package model

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// RcvStats counts what the chip did for one receive context.
type RcvStats struct {
	// Packets is entries written to the RcvHdrQ, error entries included.
	Packets uint64
	// Eager is packets whose payload went to an eager buffer.
	Eager uint64
	// HdrqFull is packets dropped whole because the RcvHdrQ was full
	// (the chip's per-context RcvHdrOvr count).
	HdrqFull uint64
	// EgrFull is headers written with TidErr and no payload because no
	// eager buffer was free.
	EgrFull uint64
	// Expected is packets whose payload the chip placed through a valid
	// RcvArray entry straight into the programmed buffer.
	Expected uint64
	// TIDErr is expected (TID) packets written as header-only entries with
	// TidErr: the entry is not programmed, was invalidated, or the payload
	// would run past it.
	TIDErr uint64
	// LenErr is entries flagged LenErr: LRH.PktLen disagreed with the
	// length received.
	LenErr uint64
	// Packets16B is the entries of 16B packets (JKR: RHF.L2Type 16B),
	// also counted in Packets.
	Packets16B uint64
	// AvailInterrupts is receive-available interrupts raised: entries
	// written while a poll had armed RcvCtxtCtrl.IntrAvail (poll.go).
	AvailInterrupts uint64
	// UrgentInterrupts is urgent interrupts raised: entries of packets
	// with KDETH.Intr.
	UrgentInterrupts uint64
}

// rcvCtxt is the chip's receive side of one context: it writes RcvHdrQ
// entries (header, then RHE on JKR, then the RHF last), packs payloads
// into eager buffers, and reads the head registers software writes.
type rcvCtxt struct {
	mu    sync.Mutex
	chip  abi.Chip
	hdrq  []byte
	egr   []byte
	uregs []byte
	rtail []byte // nil without CapDMARtail
	rheq  []byte // nil on WFR
	multi bool   // CapMultiPktEgr
	tids  *rcvArray

	cnt, entBytes, entDWs int
	egrSize, egrN         int

	tail    int   // next entry to write
	seq     uint8 // RcvSeq of that entry
	egrTail int   // eager buffer being filled
	egrOff  int   // bytes used in it
	egrUsed bool  // whether it holds anything yet
	stats   RcvStats
	intr    intrState // poll.go
}

func newRcvCtxt(cfg *Config, c *context) *rcvCtxt {
	return &rcvCtxt{
		chip: cfg.Chip, hdrq: c.hdrq, egr: c.egr, uregs: c.uregs, rtail: c.rtail, rheq: c.rheq,
		multi:    cfg.Caps&abi.CapMultiPktEgr != 0,
		tids:     c.tids,
		cnt:      int(cfg.RcvHdrqCnt),
		entBytes: int(cfg.RcvHdrqEntSize),
		entDWs:   int(cfg.RcvHdrqEntSize) / 4,
		egrSize:  int(cfg.RcvEgrSize),
		egrN:     int(cfg.EgrTIDs),
		seq:      abi.RcvSeqFirst,
	}
}

func loadWord(b []byte, off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

// headEntry is the entry software reads next, from RcvHdrHead.
func (r *rcvCtxt) headEntry() int {
	return int(loadWord(r.uregs, abi.URegRcvHdrHead)&abi.RcvHdrHeadMask) / r.entDWs % r.cnt
}

// egrHead is the oldest eager buffer software still holds, from
// RcvEgrIndexHead.
func (r *rcvCtxt) egrHead() int {
	return int(loadWord(r.uregs, abi.URegRcvEgrIndexHead)&0xffff) % r.egrN
}

// deliver writes one packet that Ingress or Ingress16B has routed here,
// of format fm (packet16b.go): a 9B KDETH packet (header and payload, no
// ICRC) or a 16B one (header, payload, tail quadword); fault holds RHF
// error bits the wire adds (Wire.SetFault).
func (r *rcvCtxt) deliver(pkt []byte, fm *rcvFormat, fault uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The queue is full when the entry after the tail is the head: the
	// packet is dropped whole and nothing is written.
	if (r.tail+1)%r.cnt == r.headEntry() {
		r.stats.HdrqFull++
		return
	}
	hdr, payload, dws, lenOK := fm.split(pkt)
	h := fm.bthKDETH(hdr)
	f := abi.RHFFields{PktLen: uint16(dws), HdrqOffset: uint16(fm.hdrqOff), RcvSeq: r.seq, L2Type: fm.l2}
	switch {
	case h.TIDCtrl() != 0:
		// Expected receive: the payload goes straight to the buffer the
		// RcvArray entry (KDETH TID pair and TIDCtrl) maps, at KDETH.Offset
		// in the OM unit; no eager buffer, no ICRC written. An invalid
		// entry or an offset past its end leaves the header alone with
		// TidErr (hfi1-abi.md §5).
		f.RcvType = abi.RcvTypeExpected
		if r.tids.place(h.TID(), h.TIDCtrl(), h.TIDOffset(), payload) {
			r.stats.Expected++
		} else {
			f.Errors = abi.RHFTIDErr
			r.stats.TIDErr++
		}
	case len(payload) == 0:
		f.RcvType = abi.RcvTypeEager
	default:
		f.RcvType = abi.RcvTypeEager
		if r.placeEager(payload, fm.trailer, &f) {
			r.stats.Eager++
		} else {
			// Eager full: the header is still written, with TidErr and
			// RcvType eager (hfi1-abi.md §3 "Returning resources").
			f.Errors |= abi.RHFTIDErr
			r.stats.EgrFull++
		}
	}
	f.Errors |= fault
	if !lenOK {
		f.Errors |= abi.RHFLenErr
		r.stats.LenErr++
	}
	if fm.l2 == abi.L2Type16B {
		r.stats.Packets16B++
	}
	base := r.tail * r.entBytes
	copy(r.hdrq[base+fm.hdrqOff*4:], hdr)
	var rhf uint64
	if r.chip == abi.ChipWFR {
		rhf = uint64(f.EncodeWFR())
	} else {
		rhe := jkrRHE(f.Errors)
		f.RHEValid = rhe != 0
		storeWord(r.rheq, r.tail*8, rhe)
		rhf = uint64(f.EncodeJKR())
	}
	// The RHF goes last, in one store: its RcvSeq publishes the entry.
	storeWord(r.hdrq, base+r.entBytes-abi.RHFSize, rhf)
	r.stats.Packets++
	r.tail = (r.tail + 1) % r.cnt
	r.seq = abi.NextRcvSeq(r.seq)
	tail := uint64(r.tail * r.entDWs)
	if r.rtail != nil {
		storeWord(r.rtail, 0, tail)
	}
	storeWord(r.uregs, abi.URegRcvHdrTail, tail)
	storeWord(r.uregs, abi.URegRcvEgrIndexTail, uint64(r.egrTail))
	storeWord(r.uregs, abi.URegRcvEgrOffsetTail, uint64(r.egrOff/abi.EgrOffsetUnit))
	r.interrupts(h.KDETHIntr())
}

// placeEager copies payload and trailer zero bytes (the ICRC dword, or a
// 16B packet's tail quadword: not modeled) into the eager buffers,
// packed at 64-byte boundaries with CapMultiPktEgr (one packet per buffer
// without it), moving to the next buffer when the packet does not fit. It
// reports false, placing nothing, when the next buffer is the one software
// holds at RcvEgrIndexHead.
func (r *rcvCtxt) placeEager(payload []byte, trailer int, f *abi.RHFFields) bool {
	need := (len(payload) + trailer + abi.EgrOffsetUnit - 1) &^ (abi.EgrOffsetUnit - 1)
	if r.egrUsed && (!r.multi || r.egrOff+need > r.egrSize) {
		next := (r.egrTail + 1) % r.egrN
		if next == r.egrHead() {
			return false
		}
		r.egrTail, r.egrOff = next, 0
	}
	at := r.egrTail*r.egrSize + r.egrOff
	n := copy(r.egr[at:], payload)
	clear(r.egr[at+n : at+n+trailer]) // the ICRC or tail: not modeled
	f.UseEgrBfr = true
	f.EgrIndex = uint16(r.egrTail)
	f.EgrOffset = uint16(r.egrOff / abi.EgrOffsetUnit)
	r.egrOff += need
	r.egrUsed = true
	return true
}

// jkrRHE moves the WFR error bits the model produces into an RHE word.
func jkrRHE(errs uint64) uint64 {
	var e uint64
	if errs&abi.RHFTIDErr != 0 {
		e |= abi.RHETIDErr
	}
	if errs&abi.RHFLenErr != 0 {
		e |= abi.RHELenErr
	}
	if errs&abi.RHFICRCErr != 0 {
		e |= abi.RHEICRCErr
	}
	if errs&abi.RHFECCErr != 0 {
		e |= abi.RHEECCErr
	}
	return e
}

func (r *rcvCtxt) snapshot() RcvStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}
