package hfidev

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// PIO send errors.
var (
	// ErrNoCredits: not enough free blocks for the packet now; retry
	// after the credit word advances (CreditUpdate forces it to).
	ErrNoCredits = errors.New("hfidev: PIO credits exhausted")
	// ErrHalted: the send context has halted; Reset restarts it.
	ErrHalted = errors.New("hfidev: send context halted")
	// ErrPacketLength: the packet is not a whole number of dwords (16B:
	// quadwords) or does not fit the context.
	ErrPacketLength = errors.New("hfidev: bad PIO packet length")
	// ErrBypass: a 16B packet on WFR, where 16B packets are bypass packets
	// (PBC.Bypass), which hfi1 forbids user send contexts: the chip's
	// integrity check would halt the context ([K] hfi.h
	// HFI1_PKT_USER_SC_INTEGRITY, chip.c is_sendctxt_err_int). Refused
	// before the chip; SDMA refuses it too (ErrSDMARequest).
	ErrBypass = errors.New("hfidev: 16B (bypass) packets are not allowed on WFR user contexts")
)

// PIO writes packets into a context's PIO send buffer ([P] spio.c; [O]
// fi_opx_hfi1_transport.h). It is owned by one goroutine.
type PIO struct {
	chip        abi.Chip
	sop, nonSOP sys.Region
	cr          sys.Region
	crOff       int
	credits     uint16
	fill        uint16 // blocks written, 11 bits
	idx         int    // next block index, 0..credits-1
	// blk is the block being written. It lives here, not on the stack:
	// passed to a Region method through an interface it would escape and
	// cost an allocation per block.
	blk [8]uint64
}

func newPIO(c *Context) *PIO {
	cr := c.maps[abi.MmapPIOCred]
	return &PIO{
		chip:    c.Chip,
		sop:     c.maps[abi.MmapPIOBufsSOP].Region,
		nonSOP:  c.maps[abi.MmapPIOBufs].Region,
		cr:      cr.Region,
		crOff:   cr.Off,
		credits: c.Info.Credits,
	}
}

// CreditReturn reads the credit-return word.
func (p *PIO) CreditReturn() abi.CreditReturn { return abi.CreditReturn(p.cr.Load64(p.crOff)) }

// Avail is the number of blocks the sender may write now, by the last
// credit return.
func (p *PIO) Avail() uint16 {
	return abi.AvailCredits(p.credits, p.fill, p.CreditReturn().FreeCounter())
}

// Send writes one packet: pbc (its LengthDWs is filled in), then hdr and
// payload back to back. Block 0 — the PBC and the first 56 bytes — goes to
// the SOP aperture at the current block index, the rest to the non-SOP
// aperture at the following indices, wrapping at the context's credits.
//
// A 16B packet (JKR, pbc.L2Type() == abi.L2Type16B) has a 16B header
// (abi.Header16B) and must be whole quadwords; Send appends its ICRC/tail
// quadword, which LengthDWs counts, as zeros (OPX writes a value the chip
// does not use; with PBC.InsertICRC the chip computes the ICRC). The
// header spills into the second block, as OPX notes. On WFR a PBC with
// Bypass (16B) is refused (ErrBypass). It does not allocate.
func (p *PIO) Send(pbc abi.PBC, hdr, payload []byte) error {
	n := len(hdr) + len(payload)
	align := 4
	if p.chip == abi.ChipWFR && pbc.Bypass() {
		return ErrBypass
	}
	if p.chip != abi.ChipWFR && pbc.L2Type() == abi.L2Type16B {
		align = abi.FlitSize
		if n > 0 {
			n += abi.Tail16BSize
		}
	}
	dws := (abi.PBCSize + n) / 4
	blocks := abi.PIOBlocks(n)
	if n == 0 || n%align != 0 || dws > abi.PBCMaxLengthDWs || blocks > int(p.credits) {
		return fmt.Errorf("%w: %d bytes after the PBC", ErrPacketLength, n)
	}
	w := p.CreditReturn()
	if w.Halted() {
		return ErrHalted
	}
	if int(abi.AvailCredits(p.credits, p.fill, w.FreeCounter())) < blocks {
		return ErrNoCredits
	}
	pbc = pbc&^abi.PBCMaxLengthDWs | abi.PBC(dws)

	blk := &p.blk
	blk[0] = uint64(pbc)
	gather(blk[1:], hdr, payload, 0)
	p.sop.StoreBlock(p.idx*abi.PIOBlockSize, blk)
	p.advance()
	for off := abi.PIOBlockSize - abi.PBCSize; off < n; off += abi.PIOBlockSize {
		gather(blk[:], hdr, payload, off)
		p.nonSOP.StoreBlock(p.idx*abi.PIOBlockSize, blk)
		p.advance()
	}
	p.fill = (p.fill + uint16(blocks)) & abi.CreditCounterMask
	return nil
}

func (p *PIO) advance() {
	if p.idx++; p.idx == int(p.credits) {
		p.idx = 0
	}
}

// gather fills words with the bytes of hdr‖payload from off on,
// little-endian, zero past the end.
func gather(words []uint64, hdr, payload []byte, off int) {
	var b [abi.PIOBlockSize]byte
	want := b[:8*len(words)]
	k := 0
	if off < len(hdr) {
		k = copy(want, hdr[off:])
		off = 0
	} else {
		off -= len(hdr)
	}
	if off < len(payload) {
		copy(want[k:], payload[off:])
	}
	for i := range words {
		words[i] = le.Uint64(want[8*i:])
	}
}

// reset puts the sender where a restarted context is: index and counter 0.
func (p *PIO) reset() { p.fill, p.idx = 0, 0 }
