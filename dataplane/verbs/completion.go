package verbs

import "fmt"

// Status is the outcome of a work request, numbered as ibv_wc_status.
type Status uint8

// Completion statuses.
const (
	Success Status = iota
	LocLenErr
	LocQPOpErr
	LocEECOpErr
	LocProtErr
	WRFlushErr
	MWBindErr
	BadRespErr
	LocAccessErr
	RemInvReqErr
	RemAccessErr
	RemOpErr
	RetryExcErr
	RNRRetryExcErr
	LocRDDViolErr
	RemInvRDReqErr
	RemAbortErr
	InvEECNErr
	InvEECStateErr
	FatalErr
	RespTimeoutErr
	GeneralErr
	numStatuses
)

var statusNames = [numStatuses]string{
	Success:        "success",
	LocLenErr:      "local length error",
	LocQPOpErr:     "local QP operation error",
	LocEECOpErr:    "local EE context operation error",
	LocProtErr:     "local protection error",
	WRFlushErr:     "work request flushed",
	MWBindErr:      "memory window bind error",
	BadRespErr:     "bad response error",
	LocAccessErr:   "local access error",
	RemInvReqErr:   "remote invalid request error",
	RemAccessErr:   "remote access error",
	RemOpErr:       "remote operation error",
	RetryExcErr:    "transport retry counter exceeded",
	RNRRetryExcErr: "RNR retry counter exceeded",
	LocRDDViolErr:  "local RDD violation error",
	RemInvRDReqErr: "remote invalid RD request",
	RemAbortErr:    "operation aborted",
	InvEECNErr:     "invalid EE context number",
	InvEECStateErr: "invalid EE context state",
	FatalErr:       "fatal error",
	RespTimeoutErr: "response timeout error",
	GeneralErr:     "general error",
}

func (s Status) String() string {
	if s < numStatuses {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// CompOpcode says what a completion completes, numbered as ibv_wc_opcode.
type CompOpcode uint8

// Completion opcodes.
const (
	CompSend         CompOpcode = 0
	CompWrite        CompOpcode = 1
	CompRead         CompOpcode = 2
	CompCmpSwap      CompOpcode = 3
	CompFetchAdd     CompOpcode = 4
	CompRecv         CompOpcode = 128
	CompRecvWriteImm CompOpcode = 129
)

func (o CompOpcode) String() string {
	switch o {
	case CompSend:
		return "SEND"
	case CompWrite:
		return "RDMA_WRITE"
	case CompRead:
		return "RDMA_READ"
	case CompCmpSwap:
		return "COMP_SWAP"
	case CompFetchAdd:
		return "FETCH_ADD"
	case CompRecv:
		return "RECV"
	case CompRecvWriteImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("CompOpcode(%d)", uint8(o))
}

// SendCompOpcode is the completion opcode of a send work request's opcode.
func SendCompOpcode(op Opcode) CompOpcode {
	switch op {
	case OpWrite, OpWriteImm:
		return CompWrite
	case OpRead:
		return CompRead
	case OpCmpSwap:
		return CompCmpSwap
	case OpFetchAdd:
		return CompFetchAdd
	}
	return CompSend
}

// CompFlags qualify a completion, as ibv_wc_flags.
type CompFlags uint8

// Completion flags.
const (
	// WithImm: Imm holds immediate data.
	WithImm CompFlags = 1 << iota
	// WithInv: Imm holds the rkey the sender invalidated.
	WithInv
	// GRH: the first 40 bytes of a UD receive buffer hold the GRH (or, for
	// IPv4, the IPv4 header in its last 20 bytes), and SrcGID is valid.
	GRH
)

// Completion reports a finished work request.
type Completion struct {
	WRID    uint64
	Status  Status
	Opcode  CompOpcode
	Flags   CompFlags
	QPN     uint32
	ByteLen uint32
	// Imm is the immediate data (WithImm) or the invalidated rkey (WithInv).
	Imm uint32
	// SrcQP is the sender's queue pair on a UD receive.
	SrcQP uint32
	// SrcGID is the sender's GID (IPv6, or IPv4-mapped) on a UD receive.
	SrcGID [16]byte
}
