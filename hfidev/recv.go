package hfidev

import (
	"errors"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// Receive errors, set in Packet.Err (matched with errors.Is).
var (
	// ErrEagerFull: the chip had no free eager buffer; the header arrived
	// with TidErr and RcvType eager, the payload was dropped.
	ErrEagerFull = errors.New("hfidev: eager buffers full, payload dropped")
	// ErrTID: an expected (TID) packet whose TID or offset was invalid;
	// the header arrived alone with TidErr.
	ErrTID = errors.New("hfidev: expected receive TID error")
	// ErrRcvHeader: the RHF (or, on JKR, the RHE) reports another receive
	// error (ICRC, length, ECC, KHdrLen, RcvTypeErr…); Packet.RHF and
	// Packet.RHE hold the bits.
	ErrRcvHeader = errors.New("hfidev: receive error")
	// ErrBadEntry: the RHF describes a header or payload outside the queue
	// entry or the eager area; nothing of it can be trusted.
	ErrBadEntry = errors.New("hfidev: inconsistent RcvHdrQ entry")
)

// Packet is one received packet: views into the RcvHdrQ entry and the eager
// buffer, valid until Receiver.Release. Read-only: both are the chip's
// memory.
type Packet struct {
	// RHF is the entry's raw RHF (abi.RHF on WFR, abi.RHFJKR on JKR) and
	// RHE the JKR error word (0 on WFR, or when RHF.RHEValid is clear).
	RHF uint64
	RHE abi.RHE
	// Fields is RHF decoded.
	Fields abi.RHFFields
	// L2Type is the packet's format: abi.L2Type9B, or on JKR
	// abi.L2Type16B (RHF.L2Type; WFR delivers only 9B to user contexts).
	L2Type uint8
	// Header is the 9B header (LRH, BTH, KDETH) in the entry; nil for a
	// 16B packet.
	Header abi.Header9B
	// Header16B is the 16B header (16B LRH, BTH, KDETH) in the entry; nil
	// for a 9B packet.
	Header16B abi.Header16B
	// Payload is the payload in the eager buffer, ICRC (16B: the tail
	// quadword) excluded; nil for header-only packets and for errors that
	// dropped it.
	Payload []byte
	// Err is nil or one of ErrEagerFull, ErrTID, ErrRcvHeader, ErrBadEntry.
	Err error
}

// BTHKDETH is the packet's BTH and KDETH, in either format; nil when the
// entry has no header (Err is ErrBadEntry).
func (p *Packet) BTHKDETH() abi.BTHKDETH {
	switch {
	case p.Header != nil:
		return p.Header.BTHKDETH()
	case p.Header16B != nil:
		return p.Header16B.BTHKDETH()
	}
	return nil
}

// SLID is the LRH's source LID: 16 bits in a 9B header, 24 in a 16B one;
// 0 when the entry has no header.
func (p *Packet) SLID() uint32 {
	switch {
	case p.Header != nil:
		return uint32(p.Header.SLID())
	case p.Header16B != nil:
		return p.Header16B.SLID()
	}
	return 0
}

// Receiver polls a context's RcvHdrQ ([O] fi_opx_hfi1_progress.h; [P]
// ips_recvhdrq.c): a new entry is there when its RHF.RcvSeq is the next
// in 1..13, or, with CapDMARtail, when the DMA'd tail has moved past the
// head. Packets are released in order; the head register is written
// lazily, every HeadEvery entries and whenever a poll finds the queue
// empty, and RcvEgrIndexHead when the eager buffer in use changes. It is
// owned by one goroutine and does not allocate.
type Receiver struct {
	chip   abi.Chip
	hdrq   sys.Region
	mem    []byte // hdrq as memory
	uregs  sys.Region
	rtail  sys.Region // nil without CapDMARtail
	rheq   sys.Region // nil on WFR
	layout abi.RcvLayout
	lay16B abi.RcvLayout // for 16B entries (JKR)

	cnt, entBytes, entDWs int
	head                  int   // next entry to read
	seq                   uint8 // its expected RcvSeq
	unwritten             int   // entries released since RcvHdrHead was written
	egrHead               int   // last value written to RcvEgrIndexHead
	headEvery             int

	held bool // pkt is polled and not yet released
	pkt  Packet
}

func newReceiver(c *Context) *Receiver {
	hq := c.maps[abi.MmapRcvHdrQ].Region
	cnt := int(c.Info.RcvHdrqCnt)
	r := &Receiver{
		chip:  c.Chip,
		hdrq:  hq,
		mem:   hq.Bytes(),
		uregs: c.maps[abi.MmapURegs].Region,
		rtail: c.maps[abi.MmapRTail].Region,
		rheq:  c.maps[abi.MmapRcvRHEQ].Region,
		layout: abi.RcvLayout{
			Egr:      c.maps[abi.MmapRcvEgrBuf].Region.Bytes(),
			EgrSize:  int(c.Info.RcvEgrSize),
			EgrTIDs:  int(c.Info.EgrTIDs),
			HdrBytes: abi.Header9BSize,
		},
		lay16B: abi.RcvLayout{
			Egr:       c.maps[abi.MmapRcvEgrBuf].Region.Bytes(),
			EgrSize:   int(c.Info.RcvEgrSize),
			EgrTIDs:   int(c.Info.EgrTIDs),
			HdrBytes:  abi.Header16BSize,
			TailBytes: abi.Tail16BSize,
		},
		cnt:       cnt,
		entBytes:  int(c.Info.RcvHdrqEntSize),
		entDWs:    int(c.Info.RcvHdrqEntSize) / 4,
		seq:       abi.RcvSeqFirst,
		headEvery: max(1, min(cnt/4, 64)),
	}
	return r
}

// SetHeadEvery sets how many released entries make the receiver write
// RcvHdrHead (at least 1: every entry).
func (r *Receiver) SetHeadEvery(n int) { r.headEvery = max(1, n) }

// Poll returns the packet at the head of the queue, or false if there is
// none yet. The same packet is returned until Release.
func (r *Receiver) Poll() (*Packet, bool) {
	if r.held {
		return &r.pkt, true
	}
	rhfOff := r.head*r.entBytes + r.entBytes - abi.RHFSize
	var raw uint64
	if r.rtail != nil {
		if int(r.rtail.Load64(0)) == r.head*r.entDWs {
			r.idle()
			return nil, false
		}
		raw = r.hdrq.Load64(rhfOff)
	} else {
		raw = r.hdrq.Load64(rhfOff)
		if r.seqOf(raw) != r.seq {
			r.idle()
			return nil, false
		}
	}
	r.decode(raw)
	r.held = true
	return &r.pkt, true
}

func (r *Receiver) seqOf(raw uint64) uint8 {
	if r.chip == abi.ChipWFR {
		return abi.RHF(raw).RcvSeq()
	}
	return abi.RHFJKR(raw).RcvSeq()
}

// decode fills r.pkt from the entry at the head.
func (r *Receiver) decode(raw uint64) {
	p := &r.pkt
	*p = Packet{RHF: raw, L2Type: abi.L2Type9B}
	layout := &r.layout
	var errs uint64
	if r.chip == abi.ChipWFR {
		p.Fields = abi.RHF(raw).Decode()
		errs = p.Fields.Errors
	} else {
		p.Fields = abi.RHFJKR(raw).Decode()
		errs = p.Fields.Errors // KHdrLenErr only
		if p.Fields.RHEValid {
			p.RHE = abi.RHE(r.rheq.Load64(r.head * 8))
			errs |= rheAsRHF(p.RHE)
		}
		p.L2Type = p.Fields.L2Type
		if p.L2Type == abi.L2Type16B {
			layout = &r.lay16B
		}
	}
	entry := abi.HdrqEntry(r.mem[r.head*r.entBytes : (r.head+1)*r.entBytes])
	hdr, payload, err := entry.Split(&p.Fields, layout)
	if p.L2Type == abi.L2Type16B {
		p.Header16B = hdr
	} else {
		p.Header = hdr
	}
	p.Payload = payload
	switch {
	case p.L2Type != abi.L2Type9B && p.L2Type != abi.L2Type16B:
		// 8B or 10B: not KDETH formats a user context is given.
		p.Header, p.Payload = nil, nil
		p.Err = ErrBadEntry
	case err != nil:
		p.Err = ErrBadEntry
	case errs&abi.RHFTIDErr != 0 && p.Fields.RcvType == abi.RcvTypeEager && !p.Fields.UseEgrBfr:
		p.Err = ErrEagerFull
	case errs&abi.RHFTIDErr != 0 && p.Fields.RcvType == abi.RcvTypeExpected:
		p.Err = ErrTID
	case errs != 0:
		p.Err = ErrRcvHeader
	}
}

// rheAsRHF maps the RHE's error bits onto the WFR RHF's, so that one test
// classifies both chips.
func rheAsRHF(e abi.RHE) uint64 {
	var v uint64
	for _, m := range [...]struct{ rhe, rhf uint64 }{
		{abi.RHEICRCErr, abi.RHFICRCErr}, {abi.RHEECCErr, abi.RHFECCErr}, {abi.RHELenErr, abi.RHFLenErr},
		{abi.RHETIDErr, abi.RHFTIDErr}, {abi.RHETIDBypassErr, abi.RHFTIDErr},
	} {
		if uint64(e)&m.rhe != 0 {
			v |= m.rhf
		}
	}
	return v | uint64(e.RcvTypeErr())<<abi.RHFRcvTypeErrS
}

// Release gives the polled packet's entry (and, once the receiver moves to
// another eager buffer, the buffers before it) back to the chip. Its
// Header and Payload must not be used afterwards.
func (r *Receiver) Release() {
	if !r.held {
		return
	}
	r.held = false
	// A damaged packet's payload took its eager buffer all the same; only
	// an inconsistent entry's index cannot be trusted.
	if f := &r.pkt.Fields; f.UseEgrBfr && r.pkt.Err != ErrBadEntry && int(f.EgrIndex) != r.egrHead {
		// Everything before the buffer this packet is in is consumed.
		r.egrHead = int(f.EgrIndex)
		r.uregs.Store64(abi.URegRcvEgrIndexHead, uint64(r.egrHead))
	}
	if r.head++; r.head == r.cnt {
		r.head = 0
	}
	r.seq = abi.NextRcvSeq(r.seq)
	if r.unwritten++; r.unwritten >= r.headEvery {
		r.writeHead()
	}
}

// idle writes a pending head: with nothing left to read, the chip should
// see every entry free.
func (r *Receiver) idle() {
	if r.unwritten > 0 {
		r.writeHead()
	}
}

func (r *Receiver) writeHead() {
	r.unwritten = 0
	r.uregs.Store64(abi.URegRcvHdrHead, uint64(r.head*r.entDWs))
}

// Flush writes RcvHdrHead now if entries were released since it was last
// written.
func (r *Receiver) Flush() { r.idle() }
