package abi

// PageSize is the page size the token encoding assumes: the in-page offset
// field is 12 bits wide, so tokens are only meaningful with 4 KiB pages.
const PageSize = 4096

// PageAlign rounds n up to a multiple of PageSize (the kernel's PAGE_ALIGN).
func PageAlign(n int) int { return (n + PageSize - 1) &^ (PageSize - 1) }

// Memory protections and mapping flags, with Linux's values so they pass
// unchanged to mmap(2).
const (
	ProtRead  = 0x1
	ProtWrite = 0x2
	MapShared = 0x1
)

// MmapType is the region selector in a token ([K] file_ops.c mmap_types).
type MmapType uint8

// The mmap region types.
const (
	MmapPIOBufs        MmapType = 1  // PIO non-SOP blocks
	MmapPIOBufsSOP     MmapType = 2  // PIO SOP blocks
	MmapPIOCred        MmapType = 3  // page holding the credit-return word
	MmapRcvHdrQ        MmapType = 4  // RcvHdrQ
	MmapRcvEgrBuf      MmapType = 5  // eager buffers
	MmapURegs          MmapType = 6  // per-context RXE user registers
	MmapEvents         MmapType = 7  // one u64 per (ctxt, subctxt)
	MmapStatus         MmapType = 8  // struct hfi1_status
	MmapRTail          MmapType = 9  // DMA'd RcvHdrTail, CapDMARtail only
	MmapSubctxtURegs   MmapType = 10 // subcontext sharing
	MmapSubctxtRcvHdrQ MmapType = 11
	MmapSubctxtEgrBuf  MmapType = 12
	MmapSDMAComp       MmapType = 13 // SDMA completion ring
	MmapRcvRHEQ        MmapType = 14 // JKR: one u64 per hdrq entry
)

var mmapTypeNames = [...]string{
	MmapPIOBufs: "PIO_BUFS", MmapPIOBufsSOP: "PIO_BUFS_SOP", MmapPIOCred: "PIO_CRED",
	MmapRcvHdrQ: "RCV_HDRQ", MmapRcvEgrBuf: "RCV_EGRBUF", MmapURegs: "UREGS",
	MmapEvents: "EVENTS", MmapStatus: "STATUS", MmapRTail: "RTAIL",
	MmapSubctxtURegs: "SUBCTXT_UREGS", MmapSubctxtRcvHdrQ: "SUBCTXT_RCV_HDRQ",
	MmapSubctxtEgrBuf: "SUBCTXT_EGRBUF", MmapSDMAComp: "SDMA_COMP", MmapRcvRHEQ: "RCV_RHEQ",
}

func (t MmapType) String() string {
	if int(t) < len(mmapTypeNames) && mmapTypeNames[t] != "" {
		return mmapTypeNames[t]
	}
	return "mmap(unknown)"
}

// Token field layout ([K] file_ops.c HFI1_MMAP_*).
const (
	TokenMagic = 0xdabbad00

	tokenOffsetMask  = 0xfff
	tokenSubctxtMask = 0xf
	tokenSubctxtShft = 12
	tokenCtxtMask    = 0xff
	tokenCtxtShift   = 16
	tokenTypeMask    = 0xf
	tokenTypeShift   = 24
	tokenMagicShift  = 32
)

// Token is an mmap token: magic [63:32], type [27:24], ctxt [23:16],
// subctxt [15:12], in-page offset [11:0]. User space maps MapOffset and adds
// PageOffset to the address it gets.
type Token uint64

// MakeToken encodes a token as HFI1_MMAP_TOKEN does: each field is masked
// to its width, and only addr's in-page offset is kept.
func MakeToken(t MmapType, ctxt, subctxt uint16, addr uint64) Token {
	return Token(uint64(TokenMagic)<<tokenMagicShift |
		(uint64(t)&tokenTypeMask)<<tokenTypeShift |
		(uint64(ctxt)&tokenCtxtMask)<<tokenCtxtShift |
		(uint64(subctxt)&tokenSubctxtMask)<<tokenSubctxtShft |
		addr&tokenOffsetMask)
}

// Magic is bits [63:32].
func (t Token) Magic() uint32 { return uint32(t >> tokenMagicShift) }

// Valid reports whether the magic is right (is_valid_mmap).
func (t Token) Valid() bool { return t.Magic() == TokenMagic }

// Type is bits [27:24].
func (t Token) Type() MmapType { return MmapType(t >> tokenTypeShift & tokenTypeMask) }

// Ctxt is bits [23:16].
func (t Token) Ctxt() uint16 { return uint16(t >> tokenCtxtShift & tokenCtxtMask) }

// Subctxt is bits [15:12].
func (t Token) Subctxt() uint16 { return uint16(t >> tokenSubctxtShft & tokenSubctxtMask) }

// PageOffset is bits [11:0]: where the object starts inside the mapping.
func (t Token) PageOffset() int { return int(t & tokenOffsetMask) }

// MapOffset is the mmap(2) offset to pass: the token without its in-page
// offset (the kernel sees vm_pgoff << PAGE_SHIFT). The magic sets bit 63,
// so as an off_t it is negative; mmap passes the bits through unchanged.
func (t Token) MapOffset() int64 { return int64(t &^ tokenOffsetMask) }

// Region lengths that do not depend on the context.
const (
	PIOBlockSize   = 64   // one PIO credit
	URegsSizeWFR   = 4096 // RXE_PER_CONTEXT_SIZE on WFR
	URegsSizeJKR   = 8192 // per-context user-register stride on JKR
	CreditPageSize = PageSize
)

// RegionLen is the exact mapping length the driver requires for region t
// of a context described by ci on chip c (it compares vma length with it).
// It returns 0 for types whose length this package does not model
// (subcontext sharing) or that the chip lacks (RHEQ on WFR).
func RegionLen(t MmapType, ci *CtxtInfo, c Chip) int {
	switch t {
	case MmapPIOBufs, MmapPIOBufsSOP:
		return PageAlign(int(ci.Credits) * PIOBlockSize)
	case MmapPIOCred, MmapEvents, MmapStatus, MmapRTail:
		return PageSize
	case MmapRcvHdrQ:
		return PageAlign(int(ci.RcvHdrqCnt) * int(ci.RcvHdrqEntSize))
	case MmapRcvEgrBuf:
		return int(ci.EgrTIDs) * int(ci.RcvEgrSize)
	case MmapURegs:
		if c == ChipWFR {
			return URegsSizeWFR
		}
		return URegsSizeJKR
	case MmapSDMAComp:
		return PageAlign(int(ci.SDMARingSize) * SDMACompEntrySize)
	case MmapRcvRHEQ:
		if c == ChipWFR {
			return 0
		}
		return PageAlign(8 * int(ci.RcvHdrqCnt))
	}
	return 0
}

// RegionProt is the protection user space maps region t with, as OPX and
// PSM2 do. The driver refuses PROT_WRITE with EPERM on PIO_CRED,
// RCV_EGRBUF, STATUS, RTAIL and RCV_RHEQ; the others are read-only by
// convention only.
func RegionProt(t MmapType) int {
	switch t {
	case MmapPIOBufs, MmapPIOBufsSOP:
		return ProtWrite
	case MmapURegs:
		return ProtRead | ProtWrite
	}
	return ProtRead
}
