package verbs

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// QPState is a queue pair's state.
type QPState uint8

// Queue pair states, as ibv_qp_state.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

func (s QPState) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateInit:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateSQD:
		return "SQD"
	case StateSQE:
		return "SQE"
	case StateErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// ErrBadTransition is returned for a state change the IBTA does not allow.
var ErrBadTransition = errors.New("invalid queue pair state transition")

// ErrBadAttr is returned for an attribute out of range.
var ErrBadAttr = errors.New("invalid queue pair attribute")

// ErrBadState is returned for an operation the queue pair's state forbids.
var ErrBadState = errors.New("operation not allowed in this queue pair state")

// CheckTransition reports whether a queue pair may move from cur to next:
// RESET→INIT→RTR→RTS⇄SQD, INIT→INIT, RTS→RTS, SQE→RTS, any→RESET, any→ERR.
func CheckTransition(cur, next QPState) error {
	ok := false
	switch next {
	case StateReset, StateErr:
		ok = true
	case StateInit:
		ok = cur == StateReset || cur == StateInit
	case StateRTR:
		ok = cur == StateInit
	case StateRTS:
		ok = cur == StateRTR || cur == StateRTS || cur == StateSQD || cur == StateSQE
	case StateSQD:
		ok = cur == StateRTS || cur == StateSQD
	}
	if !ok {
		return fmt.Errorf("%w: %v to %v", ErrBadTransition, cur, next)
	}
	return nil
}

// AttrMask says which fields of QPAttr a Modify call sets.
type AttrMask uint32

// Attribute mask bits, as ibv_qp_attr_mask.
const (
	AttrState AttrMask = 1 << iota
	AttrAccess
	AttrPKey
	AttrQKey
	AttrPath
	AttrPathMTU
	AttrTimeout
	AttrRetryCnt
	AttrRNRRetry
	AttrRQPSN
	AttrMaxRdAtomic
	AttrMinRNRTimer
	AttrSQPSN
	AttrMaxDestRdAtomic
	AttrDestQPN
)

// QPAttr are a queue pair's attributes.
type QPAttr struct {
	State QPState
	// Access are the remote operations the QP accepts as a responder
	// (mr.RemoteWrite, mr.RemoteRead, mr.RemoteAtomic).
	Access mr.Access
	PKey   uint16
	// QKey is the UD queue key.
	QKey uint32
	// Path is the address vector of the connected peer (RC).
	Path wire.PathFields
	// PathMTU in bytes: 256, 512, 1024, 2048 or 4096.
	PathMTU int
	DestQPN uint32
	// RQPSN is the PSN the responder expects next; SQPSN the first PSN the
	// requester sends.
	RQPSN, SQPSN uint32
	// Timeout is the local ACK timeout, 4.096 µs × 2^Timeout; 0 is infinite.
	Timeout uint8
	// RetryCnt is how often a request is retried after a timeout or a
	// sequence error without progress (0–7).
	RetryCnt uint8
	// RNRRetry is how often a request is retried after an RNR NAK (0–6);
	// 7 retries forever.
	RNRRetry uint8
	// MinRNRTimer is the RNR NAK timer code the responder advertises.
	MinRNRTimer uint8
	// MaxRdAtomic bounds the reads and atomics outstanding as initiator;
	// MaxDestRdAtomic those kept as responder resources.
	MaxRdAtomic, MaxDestRdAtomic uint8
}

// CheckModify validates a modify call against the current attributes a
// holds: the state transition and the range of every attribute in mask.
// What each transport additionally requires is its own check.
func (cur *QPAttr) CheckModify(a *QPAttr, mask AttrMask) error {
	if mask&AttrState != 0 {
		if err := CheckTransition(cur.State, a.State); err != nil {
			return err
		}
	}
	switch {
	case mask&AttrPathMTU != 0 && !ValidMTU(a.PathMTU):
		return fmt.Errorf("%w: path MTU %d", ErrBadAttr, a.PathMTU)
	case mask&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return fmt.Errorf("%w: retry count %d", ErrBadAttr, a.RetryCnt)
	case mask&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return fmt.Errorf("%w: RNR retry %d", ErrBadAttr, a.RNRRetry)
	case mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return fmt.Errorf("%w: min RNR timer %d", ErrBadAttr, a.MinRNRTimer)
	case mask&AttrTimeout != 0 && a.Timeout > 31:
		return fmt.Errorf("%w: timeout %d", ErrBadAttr, a.Timeout)
	}
	return nil
}

// Apply copies the attributes in mask from a, QPNs and PSNs masked to 24
// bits. It changes the state field too; the transport acts on the change.
func (cur *QPAttr) Apply(a *QPAttr, mask AttrMask) {
	if mask&AttrState != 0 {
		cur.State = a.State
	}
	if mask&AttrAccess != 0 {
		cur.Access = a.Access
	}
	if mask&AttrPKey != 0 {
		cur.PKey = a.PKey
	}
	if mask&AttrQKey != 0 {
		cur.QKey = a.QKey
	}
	if mask&AttrPath != 0 {
		cur.Path = a.Path
	}
	if mask&AttrPathMTU != 0 {
		cur.PathMTU = a.PathMTU
	}
	if mask&AttrDestQPN != 0 {
		cur.DestQPN = a.DestQPN & 0xffffff
	}
	if mask&AttrRQPSN != 0 {
		cur.RQPSN = a.RQPSN & 0xffffff
	}
	if mask&AttrSQPSN != 0 {
		cur.SQPSN = a.SQPSN & 0xffffff
	}
	if mask&AttrTimeout != 0 {
		cur.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		cur.RetryCnt = a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		cur.RNRRetry = a.RNRRetry
	}
	if mask&AttrMinRNRTimer != 0 {
		cur.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrMaxRdAtomic != 0 {
		cur.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		cur.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
}

// ValidMTU reports whether n is an IBTA path MTU.
func ValidMTU(n int) bool {
	switch n {
	case 256, 512, 1024, 2048, 4096:
		return true
	}
	return false
}

// AddressHandle addresses a datagram: the path to the remote port, its QPN
// and its Q_Key.
type AddressHandle struct {
	Path    wire.Path
	DestQPN uint32
	QKey    uint32
}

// NewAddressHandle builds an address handle.
func NewAddressHandle(f wire.PathFields, destQPN, qkey uint32) (*AddressHandle, error) {
	p, err := wire.NewPath(f)
	if err != nil {
		return nil, err
	}
	return &AddressHandle{Path: p, DestQPN: destQPN & 0xffffff, QKey: qkey}, nil
}
