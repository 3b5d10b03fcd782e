package abi

// Sizes of the SDMA request pieces (hfi1_user.h), packed structures.
const (
	SDMAReqInfoSize   = 8  // struct sdma_req_info
	PktHeaderSize     = 64 // struct hfi1_pkt_header
	KDETHHeaderSize   = 36 // struct hfi1_kdeth_header
	SDMACompEntrySize = 8  // struct hfi1_sdma_comp_entry
	// SDMAMaxDataIovs is the most data iovecs a request may carry.
	SDMAMaxDataIovs = 8
)

// SDMAReqVersion is the request version PSM2 and OPX put in ctrl[3:0]
// (the driver does not check it).
const SDMAReqVersion = 1

// SDMA request opcodes (sdma_req_opcode).
const (
	SDMAOpExpected = 0
	SDMAOpEager    = 1
)

// SDMAReqInfo is struct sdma_req_info, the first 8 bytes of iov[0].
type SDMAReqInfo struct {
	// Ctrl holds version [3:0], opcode [7:4] and iovcnt [15:8].
	Ctrl     uint16
	NPkts    uint16
	FragSize uint16
	CompIdx  uint16
}

// MakeSDMACtrl packs the ctrl field.
func MakeSDMACtrl(version, opcode, iovcnt uint8) uint16 {
	return uint16(version&0xf) | uint16(opcode&0xf)<<4 | uint16(iovcnt)<<8
}

// Version is ctrl[3:0].
func (r *SDMAReqInfo) Version() uint8 { return uint8(r.Ctrl & 0xf) }

// Opcode is ctrl[7:4].
func (r *SDMAReqInfo) Opcode() uint8 { return uint8(r.Ctrl>>4) & 0xf }

// IovCnt is ctrl[15:8].
func (r *SDMAReqInfo) IovCnt() uint8 { return uint8(r.Ctrl >> 8) }

// Marshal writes the C image of r to b[:SDMAReqInfoSize].
func (r *SDMAReqInfo) Marshal(b []byte) {
	_ = b[SDMAReqInfoSize-1]
	le.PutUint16(b[0:], r.Ctrl)
	le.PutUint16(b[2:], r.NPkts)
	le.PutUint16(b[4:], r.FragSize)
	le.PutUint16(b[6:], r.CompIdx)
}

// Unmarshal reads r from the C image in b[:SDMAReqInfoSize].
func (r *SDMAReqInfo) Unmarshal(b []byte) {
	_ = b[SDMAReqInfoSize-1]
	r.Ctrl = le.Uint16(b[0:])
	r.NPkts = le.Uint16(b[2:])
	r.FragSize = le.Uint16(b[4:])
	r.CompIdx = le.Uint16(b[6:])
}

// Offsets inside struct hfi1_pkt_header: pbc[4] (LE u16), lrh[4] (BE u16),
// bth[3] (BE u32), then struct hfi1_kdeth_header.
const (
	PktHeaderPBCOff   = 0
	PktHeaderLRHOff   = 8
	PktHeaderBTHOff   = 16
	PktHeaderKDETHOff = 28
)

// SDMACompState is the status of a completion-ring slot
// (enum hfi1_sdma_comp_state).
type SDMACompState uint32

// Completion slot states.
const (
	SDMAFree SDMACompState = iota
	SDMAQueued
	SDMAComplete
	SDMAError
)

// SDMACompEntry is struct hfi1_sdma_comp_entry, one slot of the SDMA_COMP
// region. For ERROR the driver writes ErrCode (a positive errno) before
// Status.
type SDMACompEntry struct {
	Status  SDMACompState // @0
	ErrCode uint32        // @4
}

// SDMA request limits and checks ([K] user_sdma.c, user_sdma.h).
const (
	// SDMAMaxTIDEntries is MAX_TID_PAIR_ENTRIES: the longest tidlist an
	// EXPECTED request may carry.
	SDMAMaxTIDEntries = 1024
	// UserOpcodeMask and UserOpcodeValue: a user packet's BTH.Opcode must
	// satisfy opcode&mask == value (USER_OPCODE_CHECK_MASK/_VAL).
	UserOpcodeMask  = 0xc0
	UserOpcodeValue = 0xc0
	// KDETHBTHSeqMask is HFI1_KDETH_BTH_SEQ_MASK: the PSN bits an EXPECTED
	// request advances per packet.
	KDETHBTHSeqMask = 0x7ff
)

// PktHeader is a view of struct hfi1_pkt_header, the 64-byte header
// template of an SDMA request: the PBC (little-endian) then a 9B header.
type PktHeader []byte

// PBC is the template's PBC.
func (h PktHeader) PBC() PBC { return PBC(le.Uint64(h[PktHeaderPBCOff:])) }

// SetPBC stores p as the template's PBC.
func (h PktHeader) SetPBC(p PBC) { le.PutUint64(h[PktHeaderPBCOff:], uint64(p)) }

// Header is the 9B header after the PBC.
func (h PktHeader) Header() Header9B { return Header9B(h[PktHeaderLRHOff:PktHeaderSize]) }

// Header16B is the 16B header after the PBC of a 16B template
// (PktHeader16BSize bytes: [C] hfi2 user_sdma.c takes PBC, 16B LRH, BTH
// and KDETH when the PBC says 16B).
func (h PktHeader) Header16B() Header16B { return Header16B(h[PktHeaderLRHOff:PktHeader16BSize]) }
