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
