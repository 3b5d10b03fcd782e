package verbs

import (
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mr"
)

// MaxSGE is the largest scatter/gather list a work request may carry.
// Queue slots hold their lists inline, so posting copies and never
// allocates.
const MaxSGE = 8

// Opcode is the operation a send work request asks for.
type Opcode uint8

// Work request opcodes, as ibv_wr_opcode.
const (
	OpSend Opcode = iota
	OpSendImm
	OpSendInv
	OpWrite
	OpWriteImm
	OpRead
	OpCmpSwap
	OpFetchAdd
	numOpcodes
)

var opcodeNames = [numOpcodes]string{
	OpSend:     "SEND",
	OpSendImm:  "SEND_WITH_IMM",
	OpSendInv:  "SEND_WITH_INV",
	OpWrite:    "RDMA_WRITE",
	OpWriteImm: "RDMA_WRITE_WITH_IMM",
	OpRead:     "RDMA_READ",
	OpCmpSwap:  "ATOMIC_CMP_AND_SWP",
	OpFetchAdd: "ATOMIC_FETCH_AND_ADD",
}

func (o Opcode) String() string {
	if o < numOpcodes {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// IsAtomic reports whether o is an atomic operation.
func (o Opcode) IsAtomic() bool { return o == OpCmpSwap || o == OpFetchAdd }

// IsSend reports whether o consumes a receive at the remote end as a send.
func (o Opcode) IsSend() bool { return o == OpSend || o == OpSendImm || o == OpSendInv }

// IsWrite reports whether o is an RDMA write.
func (o Opcode) IsWrite() bool { return o == OpWrite || o == OpWriteImm }

// NeedsResponse reports whether the responder answers o with data (read
// responses or an atomic acknowledge) rather than a plain ACK.
func (o Opcode) NeedsResponse() bool { return o == OpRead || o.IsAtomic() }

// SendFlags modify a send work request.
type SendFlags uint8

// Send flags, as ibv_send_flags.
const (
	// Signaled asks for a completion on success; errors always complete.
	Signaled SendFlags = 1 << iota
	// Fence holds the request until every earlier read and atomic has
	// completed.
	Fence
	// Solicited sets the solicited-event bit on the last packet.
	Solicited
)

// SendWR is a send work request. The scatter/gather list is copied when the
// request is posted.
type SendWR struct {
	ID    uint64
	Op    Opcode
	Flags SendFlags
	SGL   []mr.SGE
	// Imm is the immediate data (OpSendImm, OpWriteImm) or the rkey to
	// invalidate at the responder (OpSendInv).
	Imm uint32
	// RemoteAddr and RKey name the remote memory of RDMA and atomic
	// operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of OpCmpSwap and the addend of
	// OpFetchAdd; Swap is the swap value of OpCmpSwap.
	CompareAdd uint64
	Swap       uint64
	// Dest addresses a datagram (UD queue pairs only).
	Dest *AddressHandle
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []mr.SGE
}
