package wire

// Opcode is the BTH opcode: the transport service in the top three bits and
// the operation in the low five.
type Opcode uint8

// Opcodes, numbered as in the IBTA BTH opcode list and the kernel's
// include/rdma/ib_pack.h. Reliable datagram opcodes, RESYNC and the
// FLUSH/ATOMIC_WRITE extensions are not supported.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAcknowledge        Opcode = 0x11
	RCAtomicAcknowledge  Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17
	UCSendFirst          Opcode = 0x20
	UCSendMiddle         Opcode = 0x21
	UCSendLast           Opcode = 0x22
	UCSendLastImm        Opcode = 0x23
	UCSendOnly           Opcode = 0x24
	UCSendOnlyImm        Opcode = 0x25
	UCWriteFirst         Opcode = 0x26
	UCWriteMiddle        Opcode = 0x27
	UCWriteLast          Opcode = 0x28
	UCWriteLastImm       Opcode = 0x29
	UCWriteOnly          Opcode = 0x2a
	UCWriteOnlyImm       Opcode = 0x2b
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65
	CNP                  Opcode = 0x81
)

// Mask describes an opcode: which headers follow the BTH and what the packet
// means. Code should test properties (info.Mask&MaskRead != 0) rather than
// lists of opcodes.
type Mask uint32

// Header-presence bits.
const (
	MaskRETH Mask = 1 << iota
	MaskAETH
	MaskAtomicETH
	MaskAtomicAckETH
	MaskImmDt
	MaskIETH
	MaskDETH
	MaskPayload

	// MaskRequest marks packets sent by a requester.
	MaskRequest
	// MaskResponse marks read responses, acknowledges and atomic acknowledges.
	MaskResponse
	// MaskAck marks ACKNOWLEDGE and ATOMIC_ACKNOWLEDGE.
	MaskAck
	MaskSend
	MaskWrite
	// MaskRead marks a read request.
	MaskRead
	MaskReadResponse
	// MaskAtomic marks an atomic request.
	MaskAtomic
	MaskAtomicAck
	// MaskFirst, MaskMiddle and MaskLast place a packet in its message;
	// single-packet operations (ONLY, read requests, atomics, acks, UD) carry
	// MaskFirst|MaskLast.
	MaskFirst
	MaskMiddle
	MaskLast
	// MaskRecvWQE marks packets that consume a receive WQE at the responder:
	// sends and RDMA writes with immediate.
	MaskRecvWQE
	// MaskComplete marks the packet on which the responder generates a
	// completion: the last packet of a send or of a write with immediate.
	MaskComplete
	MaskImm
	MaskInv
	MaskRC
	MaskUC
	MaskUD
	MaskCNP
)

// Convenience combinations.
const (
	MaskOnly    = MaskFirst | MaskLast
	MaskHeaders = MaskRETH | MaskAETH | MaskAtomicETH | MaskAtomicAckETH | MaskImmDt | MaskIETH | MaskDETH
)

// Has reports whether every bit of bits is set in m.
func (m Mask) Has(bits Mask) bool { return m&bits == bits }

// Any reports whether any bit of bits is set in m.
func (m Mask) Any(bits Mask) bool { return m&bits != 0 }

// CNPReservedSize is the length of the reserved field that follows the BTH
// of a RoCEv2 congestion notification packet.
const CNPReservedSize = 16

// OpInfo describes one opcode. Only Name and Mask are declared; the rest is
// computed from the IBTA header order.
type OpInfo struct {
	Name string
	Mask Mask
	// HeaderLen is the number of bytes from the start of the BTH to the
	// payload: the BTH and every extension header.
	HeaderLen int
	// Offsets from the start of the BTH of each present extension header;
	// 0 when absent.
	RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH int
}

// Building blocks for the declarations below.
const (
	rcSend  = MaskRC | MaskRequest | MaskSend | MaskPayload | MaskRecvWQE
	ucSend  = MaskUC | MaskRequest | MaskSend | MaskPayload | MaskRecvWQE
	rcWrite = MaskRC | MaskRequest | MaskWrite | MaskPayload
	ucWrite = MaskUC | MaskRequest | MaskWrite | MaskPayload
	imm     = MaskImmDt | MaskImm
	inv     = MaskIETH | MaskInv
	writeIm = imm | MaskRecvWQE | MaskComplete
	rdResp  = MaskRC | MaskResponse | MaskReadResponse | MaskPayload
	atomic  = MaskRC | MaskRequest | MaskAtomic | MaskAtomicETH | MaskOnly
	udSend  = MaskUD | MaskRequest | MaskSend | MaskDETH | MaskPayload | MaskRecvWQE | MaskComplete | MaskOnly
)

var opDecl = [...]struct {
	op   Opcode
	name string
	mask Mask
}{
	{RCSendFirst, "RC_SEND_FIRST", rcSend | MaskFirst},
	{RCSendMiddle, "RC_SEND_MIDDLE", rcSend | MaskMiddle},
	{RCSendLast, "RC_SEND_LAST", rcSend | MaskLast | MaskComplete},
	{RCSendLastImm, "RC_SEND_LAST_WITH_IMMEDIATE", rcSend | imm | MaskLast | MaskComplete},
	{RCSendOnly, "RC_SEND_ONLY", rcSend | MaskOnly | MaskComplete},
	{RCSendOnlyImm, "RC_SEND_ONLY_WITH_IMMEDIATE", rcSend | imm | MaskOnly | MaskComplete},
	{RCWriteFirst, "RC_RDMA_WRITE_FIRST", rcWrite | MaskRETH | MaskFirst},
	{RCWriteMiddle, "RC_RDMA_WRITE_MIDDLE", rcWrite | MaskMiddle},
	{RCWriteLast, "RC_RDMA_WRITE_LAST", rcWrite | MaskLast},
	{RCWriteLastImm, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", rcWrite | writeIm | MaskLast},
	{RCWriteOnly, "RC_RDMA_WRITE_ONLY", rcWrite | MaskRETH | MaskOnly},
	{RCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", rcWrite | MaskRETH | writeIm | MaskOnly},
	{RCReadRequest, "RC_RDMA_READ_REQUEST", MaskRC | MaskRequest | MaskRead | MaskRETH | MaskOnly},
	{RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", rdResp | MaskAETH | MaskFirst},
	{RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", rdResp | MaskMiddle},
	{RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", rdResp | MaskAETH | MaskLast},
	{RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", rdResp | MaskAETH | MaskOnly},
	{RCAcknowledge, "RC_ACKNOWLEDGE", MaskRC | MaskResponse | MaskAck | MaskAETH | MaskOnly},
	{RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", MaskRC | MaskResponse | MaskAck | MaskAtomicAck | MaskAETH | MaskAtomicAckETH | MaskOnly},
	{RCCompareSwap, "RC_COMPARE_SWAP", atomic},
	{RCFetchAdd, "RC_FETCH_ADD", atomic},
	{RCSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", rcSend | inv | MaskLast | MaskComplete},
	{RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", rcSend | inv | MaskOnly | MaskComplete},

	{UCSendFirst, "UC_SEND_FIRST", ucSend | MaskFirst},
	{UCSendMiddle, "UC_SEND_MIDDLE", ucSend | MaskMiddle},
	{UCSendLast, "UC_SEND_LAST", ucSend | MaskLast | MaskComplete},
	{UCSendLastImm, "UC_SEND_LAST_WITH_IMMEDIATE", ucSend | imm | MaskLast | MaskComplete},
	{UCSendOnly, "UC_SEND_ONLY", ucSend | MaskOnly | MaskComplete},
	{UCSendOnlyImm, "UC_SEND_ONLY_WITH_IMMEDIATE", ucSend | imm | MaskOnly | MaskComplete},
	{UCWriteFirst, "UC_RDMA_WRITE_FIRST", ucWrite | MaskRETH | MaskFirst},
	{UCWriteMiddle, "UC_RDMA_WRITE_MIDDLE", ucWrite | MaskMiddle},
	{UCWriteLast, "UC_RDMA_WRITE_LAST", ucWrite | MaskLast},
	{UCWriteLastImm, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", ucWrite | writeIm | MaskLast},
	{UCWriteOnly, "UC_RDMA_WRITE_ONLY", ucWrite | MaskRETH | MaskOnly},
	{UCWriteOnlyImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", ucWrite | MaskRETH | writeIm | MaskOnly},

	{UDSendOnly, "UD_SEND_ONLY", udSend},
	{UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", udSend | imm},

	{CNP, "CNP", MaskCNP},
}

// extOrder is the IBTA order in which extension headers follow the BTH. No
// opcode carries both ImmDt and IETH.
var extOrder = [...]struct {
	bit  Mask
	size int
	off  func(*OpInfo) *int
}{
	{MaskDETH, DETHSize, func(i *OpInfo) *int { return &i.DETH }},
	{MaskRETH, RETHSize, func(i *OpInfo) *int { return &i.RETH }},
	{MaskAtomicETH, AtomicETHSize, func(i *OpInfo) *int { return &i.AtomicETH }},
	{MaskAETH, AETHSize, func(i *OpInfo) *int { return &i.AETH }},
	{MaskAtomicAckETH, AtomicAckETHSize, func(i *OpInfo) *int { return &i.AtomicAckETH }},
	{MaskImmDt, ImmDtSize, func(i *OpInfo) *int { return &i.ImmDt }},
	{MaskIETH, IETHSize, func(i *OpInfo) *int { return &i.IETH }},
}

var (
	opTable   [256]OpInfo
	opUnknown [256]string // String of undefined opcodes, so String never allocates
)

func init() {
	const hex = "0123456789abcdef"
	for i := range opUnknown {
		opUnknown[i] = "OPCODE(0x" + string(hex[i>>4]) + string(hex[i&0xf]) + ")"
	}
	for _, d := range opDecl {
		info := OpInfo{Name: d.name, Mask: d.mask, HeaderLen: BTHSize}
		for _, h := range extOrder {
			if d.mask&h.bit != 0 {
				*h.off(&info) = info.HeaderLen
				info.HeaderLen += h.size
			}
		}
		if d.mask&MaskCNP != 0 {
			info.HeaderLen += CNPReservedSize
		}
		opTable[d.op] = info
	}
}

// Info returns the description of o. It is never nil; for an undefined
// opcode the Mask is 0. The result is shared and must not be modified.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether o is an opcode this package can parse and build.
func (o Opcode) Valid() bool { return opTable[o].Mask != 0 }

// String returns the IBTA name without the IB_OPCODE_ prefix, such as
// "RC_SEND_ONLY", or "OPCODE(0x1c)" for an undefined opcode.
func (o Opcode) String() string {
	if n := opTable[o].Name; n != "" {
		return n
	}
	return opUnknown[o]
}
