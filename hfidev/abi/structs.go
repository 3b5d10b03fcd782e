package abi

import "encoding/binary"

var le = binary.LittleEndian

// Sizes of the ioctl argument structures on x86-64 (hfi1_ioctl.h), which
// are also the _IOC_SIZE of their ioctl numbers.
const (
	UserInfoSize = 28  // struct hfi1_user_info
	CtxtInfoSize = 40  // struct hfi1_ctxt_info (38 bytes of fields, padded)
	BaseInfoSize = 120 // struct hfi1_base_info
	TIDInfoSize  = 24  // struct hfi1_tid_info
)

// UserInfo is struct hfi1_user_info, the ASSIGN_CTXT argument. Its Go
// layout matches the C one field for field.
type UserInfo struct {
	UserVersion uint32 // @0: (SWMAJOR<<16)|SWMINOR
	// Pad @4 is not padding to the Cornelis driver [K]: bit 0 is the port
	// index, bits 5:1 the KDETH receive-header size in DW (0 = default,
	// 1 invalid), bits 31:6 must be zero, else EINVAL.
	Pad        uint32
	SubctxtCnt uint16   // @8: ≤ MaxSharedCtxts; 0 = not shared
	SubctxtID  uint16   // @10
	UUID       [16]byte // @12: shared contexts rendezvous on it
}

// UserInfo.Pad fields, as the Cornelis driver decodes them.
const (
	UserPadPortMask      = 0x1
	UserPadKDETHHdrShift = 1
	UserPadKDETHHdrMask  = 0x1f
	UserPadUnusedShift   = 6
)

// Marshal writes the C image of u to b[:UserInfoSize].
func (u *UserInfo) Marshal(b []byte) {
	_ = b[UserInfoSize-1]
	le.PutUint32(b[0:], u.UserVersion)
	le.PutUint32(b[4:], u.Pad)
	le.PutUint16(b[8:], u.SubctxtCnt)
	le.PutUint16(b[10:], u.SubctxtID)
	copy(b[12:28], u.UUID[:])
}

// Unmarshal reads u from the C image in b[:UserInfoSize].
func (u *UserInfo) Unmarshal(b []byte) {
	_ = b[UserInfoSize-1]
	u.UserVersion = le.Uint32(b[0:])
	u.Pad = le.Uint32(b[4:])
	u.SubctxtCnt = le.Uint16(b[8:])
	u.SubctxtID = le.Uint16(b[10:])
	copy(u.UUID[:], b[12:28])
}

// CtxtInfo is struct hfi1_ctxt_info, filled by CTXT_INFO.
type CtxtInfo struct {
	RuntimeFlags uint64 // @0: HFI1_CAP_* in effect
	RcvEgrSize   uint32 // @8: bytes per eager buffer (RcvArray entry)
	NumActive    uint16 // @12: active units
	Unit         uint16 // @14
	Ctxt         uint16 // @16: receive context number
	Subctxt      uint16 // @18
	RcvTIDs      uint16 // @20: RcvArray entries for expected receive
	Credits      uint16 // @22: PIO credits (64-byte blocks)
	NumaNode     uint16 // @24
	RecCPU       uint16 // @26: 0xffff if none
	SendCtxt     uint16 // @28: hardware send context
	EgrTIDs      uint16 // @30: eager buffers
	RcvHdrqCnt   uint16 // @32: RcvHdrQ entries
	// RcvHdrqEntSize is in bytes: the driver returns rcvhdrqentsize<<2
	// (its own field is in DW) [K] file_ops.c get_ctxt_info.
	RcvHdrqEntSize uint16 // @34
	SDMARingSize   uint16 // @36: completion ring entries
	_              uint16 // @38: tail padding to 8-byte alignment
}

// Marshal writes the C image of c to b[:CtxtInfoSize]; padding is zeroed.
func (c *CtxtInfo) Marshal(b []byte) {
	_ = b[CtxtInfoSize-1]
	le.PutUint64(b[0:], c.RuntimeFlags)
	le.PutUint32(b[8:], c.RcvEgrSize)
	le.PutUint16(b[12:], c.NumActive)
	le.PutUint16(b[14:], c.Unit)
	le.PutUint16(b[16:], c.Ctxt)
	le.PutUint16(b[18:], c.Subctxt)
	le.PutUint16(b[20:], c.RcvTIDs)
	le.PutUint16(b[22:], c.Credits)
	le.PutUint16(b[24:], c.NumaNode)
	le.PutUint16(b[26:], c.RecCPU)
	le.PutUint16(b[28:], c.SendCtxt)
	le.PutUint16(b[30:], c.EgrTIDs)
	le.PutUint16(b[32:], c.RcvHdrqCnt)
	le.PutUint16(b[34:], c.RcvHdrqEntSize)
	le.PutUint16(b[36:], c.SDMARingSize)
	le.PutUint16(b[38:], 0)
}

// Unmarshal reads c from the C image in b[:CtxtInfoSize].
func (c *CtxtInfo) Unmarshal(b []byte) {
	_ = b[CtxtInfoSize-1]
	c.RuntimeFlags = le.Uint64(b[0:])
	c.RcvEgrSize = le.Uint32(b[8:])
	c.NumActive = le.Uint16(b[12:])
	c.Unit = le.Uint16(b[14:])
	c.Ctxt = le.Uint16(b[16:])
	c.Subctxt = le.Uint16(b[18:])
	c.RcvTIDs = le.Uint16(b[20:])
	c.Credits = le.Uint16(b[22:])
	c.NumaNode = le.Uint16(b[24:])
	c.RecCPU = le.Uint16(b[26:])
	c.SendCtxt = le.Uint16(b[28:])
	c.EgrTIDs = le.Uint16(b[30:])
	c.RcvHdrqCnt = le.Uint16(b[32:])
	c.RcvHdrqEntSize = le.Uint16(b[34:])
	c.SDMARingSize = le.Uint16(b[36:])
}

// BaseInfo is struct hfi1_base_info, filled by USER_INFO. The u64 fields
// after BTHQP are mmap tokens (see Token).
type BaseInfo struct {
	HWVersion       HWVersion // @0
	SWVersion       uint32    // @4
	JKey            uint16    // @8
	_               uint16    // @10: padding1
	BTHQP           uint32    // @12: KDETHQPPrefix
	SCCreditsAddr   Token     // @16: PIO_CRED, nonzero in-page offset
	PIOBufBaseSOP   Token     // @24: PIO_BUFS_SOP
	PIOBufBase      Token     // @32: PIO_BUFS
	RcvHdrBufBase   Token     // @40: RCV_HDRQ
	RcvEgrBufBase   Token     // @48: RCV_EGRBUF
	SDMACompBufBase Token     // @56: SDMA_COMP
	UserRegBase     Token     // @64: UREGS
	EventsBufBase   Token     // @72: EVENTS, nonzero in-page offset
	StatusBufBase   Token     // @80: STATUS
	RcvHdrTailBase  Token     // @88: RTAIL, 0 without CapDMARtail
	SubctxtURegBase Token     // @96: SUBCTXT_UREGS, 0 if not shared
	SubctxtRcvEgr   Token     // @104: SUBCTXT_EGRBUF
	SubctxtRcvHdr   Token     // @112: SUBCTXT_RCV_HDRQ
}

// tokens lists the token fields of b in C order, from offset 16.
func (b *BaseInfo) tokens() [13]*Token {
	return [13]*Token{&b.SCCreditsAddr, &b.PIOBufBaseSOP, &b.PIOBufBase,
		&b.RcvHdrBufBase, &b.RcvEgrBufBase, &b.SDMACompBufBase, &b.UserRegBase,
		&b.EventsBufBase, &b.StatusBufBase, &b.RcvHdrTailBase,
		&b.SubctxtURegBase, &b.SubctxtRcvEgr, &b.SubctxtRcvHdr}
}

// Marshal writes the C image of bi to b[:BaseInfoSize].
func (bi *BaseInfo) Marshal(b []byte) {
	_ = b[BaseInfoSize-1]
	le.PutUint32(b[0:], uint32(bi.HWVersion))
	le.PutUint32(b[4:], bi.SWVersion)
	le.PutUint16(b[8:], bi.JKey)
	le.PutUint16(b[10:], 0)
	le.PutUint32(b[12:], bi.BTHQP)
	for i, t := range bi.tokens() {
		le.PutUint64(b[16+8*i:], uint64(*t))
	}
}

// Unmarshal reads bi from the C image in b[:BaseInfoSize].
func (bi *BaseInfo) Unmarshal(b []byte) {
	_ = b[BaseInfoSize-1]
	bi.HWVersion = HWVersion(le.Uint32(b[0:]))
	bi.SWVersion = le.Uint32(b[4:])
	bi.JKey = le.Uint16(b[8:])
	bi.BTHQP = le.Uint32(b[12:])
	for i, t := range bi.tokens() {
		*t = Token(le.Uint64(b[16+8*i:]))
	}
}

// TIDInfo is struct hfi1_tid_info, the TID_UPDATE/FREE/INVAL_READ argument.
type TIDInfo struct {
	VAddr   uint64 // @0: page-aligned buffer (TID_UPDATE)
	TIDList uint64 // @8: user pointer to a u32 array
	TIDCnt  uint32 // @16
	Length  uint32 // @20
}

// Marshal writes the C image of t to b[:TIDInfoSize].
func (t *TIDInfo) Marshal(b []byte) {
	_ = b[TIDInfoSize-1]
	le.PutUint64(b[0:], t.VAddr)
	le.PutUint64(b[8:], t.TIDList)
	le.PutUint32(b[16:], t.TIDCnt)
	le.PutUint32(b[20:], t.Length)
}

// Unmarshal reads t from the C image in b[:TIDInfoSize].
func (t *TIDInfo) Unmarshal(b []byte) {
	_ = b[TIDInfoSize-1]
	t.VAddr = le.Uint64(b[0:])
	t.TIDList = le.Uint64(b[8:])
	t.TIDCnt = le.Uint32(b[16:])
	t.Length = le.Uint32(b[20:])
}
