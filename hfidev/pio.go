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
	// ErrPacketLength: the packet is not a whole number of dwords or does
	// not fit the context.
	ErrPacketLength = errors.New("hfidev: bad PIO packet length")
)

// PIO writes packets into a context's PIO send buffer ([P] spio.c; [O]
// fi_opx_hfi1_transport.h). It is owned by one goroutine.
type PIO struct {
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
// It does not allocate.
func (p *PIO) Send(pbc abi.PBC, hdr, payload []byte) error {
	n := len(hdr) + len(payload)
	dws := (abi.PBCSize + n) / 4
	blocks := abi.PIOBlocks(n)
	if n == 0 || n%4 != 0 || dws > abi.PBCMaxLengthDWs || blocks > int(p.credits) {
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
