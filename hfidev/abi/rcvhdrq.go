package abi

import "errors"

// Per-context user registers: byte offsets in the UREGS region (ur_*×8,
// [K] chip_registers.h), and the RcvHdrHead encoding.
const (
	URegRcvHdrTail       = 0x00
	URegRcvHdrHead       = 0x08
	URegRcvEgrIndexTail  = 0x10
	URegRcvEgrIndexHead  = 0x18
	URegRcvEgrOffsetTail = 0x20
	URegTIDFlow          = 0x800

	// RcvHdrHeadMask is RcvHdrHead [18:0]: the dword offset of the next
	// entry software will read. Bits 39:32 are an interrupt counter.
	RcvHdrHeadMask = 1<<19 - 1
)

// Receive placement constants.
const (
	// HdrqOffset9B is the RHF.HdrqOffset, in dwords, at which the model
	// puts a 9B header in its entry. hfi1-abi.md §7 infers 2; OPX reads
	// the 9B LRH at entry+HdrqOffset and keeps 8 bytes of padding before
	// it in its header union, which fits 2 (so that the BTH lands at byte
	// 16 for 9B and 16B alike). Not confirmed by a source.
	HdrqOffset9B = 2
	// HdrqOffset16B is where the model puts a 16B header: at the start
	// of the entry. OPX reads a 16B LRH at entry+HdrqOffset with no
	// padding before it, and a 15-quadword header union then fills a
	// 128-byte entry up to the RHF exactly as the 9B one at offset 2
	// does (the BTH at byte 16 in both). Inferred; not confirmed by a
	// source.
	HdrqOffset16B = 0
	// ICRCSize is the trailing ICRC dword every packet carries on the
	// wire; RHF.PktLen and LRH.PktLen count it, and the chip writes it to
	// the eager buffer after the payload.
	ICRCSize = 4
	// EgrOffsetUnit is the unit of RHF.EgrOffset: packets are packed into
	// an eager buffer at 64-byte boundaries (CapMultiPktEgr).
	EgrOffsetUnit = 64
)

// Errors from HdrqEntry.Split: the RHF does not describe a packet that
// fits the queue entry or the eager area.
var (
	ErrEntryHeader = errors.New("hfi1 rcvhdrq: header outside the entry")
	ErrEntryEager  = errors.New("hfi1 rcvhdrq: payload outside the eager buffers")
)

// HdrqEntry is a view of one RcvHdrQ entry, rcvhdrq_entsize bytes: the
// header at RHF.HdrqOffset dwords, the RHF in the last 8 bytes (on WFR and
// JKR alike: OPX's rhf_off is (entsize−8)/4 for both).
type HdrqEntry []byte

// RHFOffset is where the RHF starts in the entry.
func (e HdrqEntry) RHFOffset() int { return len(e) - RHFSize }

// RcvLayout is what Split needs besides the RHF: the eager area and the
// geometry of its buffers.
type RcvLayout struct {
	Egr      []byte // all eager buffers, EgrTIDs×EgrSize bytes
	EgrSize  int    // rcvegr_size
	EgrTIDs  int    // egrtids
	HdrBytes int    // the header length to expect: Header9BSize for 9B KDETH, Header16BSize for 16B
	// TailBytes is what RHF.PktLen counts after the payload: ICRCSize
	// for 9B, Tail16BSize for 16B; 0 means ICRCSize.
	TailBytes int
}

// Split returns the header and eager payload that rhf describes: the
// header is HdrBytes at HdrqOffset dwords into e; the payload, when
// UseEgrBfr is set, is PktLen×4 − HdrBytes − TailBytes bytes at
// egr[EgrIndex×EgrSize + EgrOffset×64], and must not cross into the next
// buffer. Nothing is copied. It never panics on any rhf or entry.
func (e HdrqEntry) Split(f *RHFFields, l *RcvLayout) (hdr, payload []byte, err error) {
	off := int(f.HdrqOffset) * 4
	if l.HdrBytes < 0 || off+l.HdrBytes > e.RHFOffset() {
		return nil, nil, ErrEntryHeader
	}
	hdr = e[off : off+l.HdrBytes]
	if !f.UseEgrBfr {
		return hdr, nil, nil
	}
	tail := l.TailBytes
	if tail <= 0 {
		tail = ICRCSize
	}
	n := int(f.PktLen)*4 - l.HdrBytes - tail
	idx, eoff := int(f.EgrIndex), int(f.EgrOffset)*EgrOffsetUnit
	if n < 0 || idx >= l.EgrTIDs || eoff+n+tail > l.EgrSize {
		return hdr, nil, ErrEntryEager
	}
	start := idx*l.EgrSize + eoff
	if start+n > len(l.Egr) {
		return hdr, nil, ErrEntryEager
	}
	return hdr, l.Egr[start : start+n : start+n], nil
}
