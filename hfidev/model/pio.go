package model

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// pioRegion is a PIO aperture (SOP or non-SOP): write-only device memory
// whose stores are the doorbell. A block counts as written once all eight
// of its words have been stored, as a flushed write-combining buffer
// delivers it; the send context then takes it in.
type pioRegion struct {
	sop   bool
	send  *sendCtxt
	words []uint64
	mask  []uint8 // per block: words stored since it was last taken in; reset clears it
}

func newPIORegion(length int, sop bool, s *sendCtxt) *pioRegion {
	p := &pioRegion{sop: sop, send: s, words: make([]uint64, length/8),
		mask: make([]uint8, length/abi.PIOBlockSize)}
	s.regions = append(s.regions, p)
	return p
}

func (p *pioRegion) Len() int      { return len(p.words) * 8 }
func (p *pioRegion) Bytes() []byte { return nil }

// Load64 returns what was last stored at off. A real PIO mapping must not
// be read; the model permits it for inspection only.
func (p *pioRegion) Load64(off int) uint64 { return atomic.LoadUint64(&p.words[p.index(off)]) }

func (p *pioRegion) Store64(off int, v uint64) {
	i := p.index(off)
	p.send.mu.Lock()
	defer p.send.mu.Unlock()
	p.words[i] = v
	blk := i / 8
	p.mask[blk] |= 1 << (i % 8)
	if p.mask[blk] == 0xff {
		p.mask[blk] = 0
		p.send.takeBlock(blk, p.sop, (*[8]uint64)(p.words[blk*8:]))
	}
}

func (p *pioRegion) StoreBlock(off int, b *[8]uint64) {
	i := p.index(off)
	if i%8 != 0 {
		panic("model: PIO block store not 64-byte aligned")
	}
	p.send.mu.Lock()
	defer p.send.mu.Unlock()
	copy(p.words[i:i+8], b[:])
	blk := i / 8
	p.mask[blk] = 0
	p.send.takeBlock(blk, p.sop, (*[8]uint64)(p.words[i:]))
}

func (p *pioRegion) index(off int) int {
	if off%8 != 0 {
		panic("model: misaligned PIO store")
	}
	_ = p.words[off/8]
	return off / 8
}

// Egress receives every packet a send context emits: the PBC followed by
// LengthDWs×4−8 bytes. pkt is only valid during the call.
type Egress func(sendCtxt uint16, pkt []byte)

// sendCtxt is the chip's view of one PIO send context: the block ring, the
// packet being assembled, the free counter and the credit-return word.
type sendCtxt struct {
	mu        sync.Mutex
	num       uint16
	credits   int
	threshold int
	hold      bool   // Config.HoldCreditReturns
	word      []byte // the 8 bytes the chip DMAs the credit word to
	egress    *atomic.Pointer[Egress]
	regions   []*pioRegion // SOP and non-SOP apertures

	next       int    // block index the chip expects next
	free       uint16 // FreeCounter, 11 bits
	unreturned int    // blocks freed since the word was last written
	halted     bool
	inPkt      bool
	pbc        abi.PBC
	need, got  int
	buf        []byte // the packet being assembled, credits×64 bytes
	sent       uint64
}

// takeBlock is one 64-byte block arriving at index i. The checks that halt
// the context (a block at an unexpected index, SOP inside a packet, non-SOP
// outside one, a PBC whose length is zero or exceeds the context) are the
// model's reading of "halt on a PBC/length mismatch": the sources do not
// list the chip's exact halt causes.
func (s *sendCtxt) takeBlock(i int, sop bool, blk *[8]uint64) {
	if s.halted {
		return
	}
	if i != s.next {
		s.halt()
		return
	}
	if sop {
		if s.inPkt {
			s.halt()
			return
		}
		pbc := abi.PBC(blk[0])
		dws := int(pbc.LengthDWs())
		need := (dws*4 + abi.PIOBlockSize - 1) / abi.PIOBlockSize
		if dws*4 <= abi.PBCSize || need > s.credits {
			s.halt()
			return
		}
		s.inPkt, s.pbc, s.need, s.got = true, pbc, need, 0
	} else if !s.inPkt {
		s.halt()
		return
	}
	for j, w := range blk {
		binary.LittleEndian.PutUint64(s.buf[s.got*abi.PIOBlockSize+8*j:], w)
	}
	s.got++
	s.next = (i + 1) % s.credits
	if s.got < s.need {
		return
	}
	// The whole packet is in: it leaves, and its blocks are free.
	s.inPkt = false
	s.sent++
	if e := s.egress.Load(); e != nil {
		(*e)(s.num, s.buf[:int(s.pbc.LengthDWs())*4])
	}
	s.free = (s.free + uint16(s.need)) & abi.CreditCounterMask
	s.unreturned += s.need
	switch {
	case s.hold:
	case s.pbc.CreditReturn():
		s.writeWord(abi.CreditReturnFields{DueToPBC: true})
	case s.unreturned >= s.threshold:
		s.writeWord(abi.CreditReturnFields{DueToThreshold: true})
	}
}

// writeWord DMAs the credit-return word with the given reason bits.
func (s *sendCtxt) writeWord(why abi.CreditReturnFields) {
	why.FreeCounter = s.free
	why.Halted = s.halted
	storeWord(s.word, 0, uint64(why.Encode()))
	s.unreturned = 0
}

func (s *sendCtxt) halt() {
	s.halted, s.inPkt = true, false
	s.writeWord(abi.CreditReturnFields{DueToErr: true})
}

// force is CREDIT_UPD (sc_return_credits).
func (s *sendCtxt) force() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeWord(abi.CreditReturnFields{DueToForce: true})
}

// reset is CTXT_RESET: ENOLCK unless halted; then the context restarts as
// sc_enable leaves it (counters and ring index at 0) and credits are
// returned.
func (s *sendCtxt) reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.halted {
		return unix.ENOLCK
	}
	s.halted, s.inPkt, s.next, s.free, s.got = false, false, 0, 0, 0
	for _, r := range s.regions {
		clear(r.mask) // half-written blocks from before the halt are gone
	}
	s.writeWord(abi.CreditReturnFields{DueToForce: true})
	return nil
}
