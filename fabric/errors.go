package fabric

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/verbs"
)

// Errors. Calls return them bare on the data path (posting never
// allocates) and wrapped with %w on the control path: match with errors.Is.
var (
	// ErrAgain: a queue is full (libfabric's FI_EAGAIN). Read completions
	// (which, with manual progress, also drives the transport) and retry.
	ErrAgain = errors.New("fabric: resource temporarily unavailable")
	// ErrBusy: the object has open children, or the device is owned by
	// another process.
	ErrBusy = errors.New("fabric: busy")
	// ErrCanceled: the operation was canceled (Cancel, or its endpoint
	// closed).
	ErrCanceled = errors.New("fabric: operation canceled")
	// ErrTruncated: a message was longer than the receive buffer.
	ErrTruncated = errors.New("fabric: message truncated")
	// ErrRemoteAccess: the target refused an RMA or atomic access (bad
	// key, range or permission: the IBTA remote access NAK).
	ErrRemoteAccess = errors.New("fabric: remote access error")
	// ErrAccess: a local buffer is outside the memory region its
	// descriptor names, or the region does not allow the access.
	ErrAccess = errors.New("fabric: local access error")
	// ErrNoMsg: a peek found no matching message.
	ErrNoMsg = errors.New("fabric: no matching message")
	// ErrNotSupported: the provider does not do this.
	ErrNotSupported = errors.New("fabric: not supported")
	// ErrNoData: no offer matches the hints (FI_ENODATA).
	ErrNoData = errors.New("fabric: no matching offer")
	// ErrInvalid: an argument is invalid.
	ErrInvalid = errors.New("fabric: invalid argument")
	// ErrClosed: the object is closed.
	ErrClosed = errors.New("fabric: closed")
	// ErrAddrNotAvail: an address is not in the address vector.
	ErrAddrNotAvail = errors.New("fabric: address not available")
	// ErrNotConnected: the endpoint is not connected (or not enabled).
	ErrNotConnected = errors.New("fabric: not connected")
	// ErrRejected: the peer rejected the connection.
	ErrRejected = errors.New("fabric: connection rejected")
	// ErrTimedOut: the transport gave up on the peer (retries exhausted).
	ErrTimedOut = errors.New("fabric: timed out")
	// ErrRemoteOp: the target could not execute the operation.
	ErrRemoteOp = errors.New("fabric: remote operation error")
	// ErrOverrun: a completion queue overflowed.
	ErrOverrun = errors.New("fabric: queue overrun")
	// ErrDeviceGone: the domain's device stopped under it (the daemon
	// that served it exited): outstanding operations complete in error,
	// and waiting reads return this.
	ErrDeviceGone = errors.New("fabric: device gone")
)

// Status is the outcome of an operation, carried by its Completion.
type Status uint8

// Statuses.
const (
	StatusOK Status = iota
	StatusCanceled
	StatusTruncated
	StatusRemoteAccess
	StatusAccess
	StatusTimedOut
	StatusRemoteOp
	StatusInvalid
	StatusAddrNotAvail
	StatusNotConnected
	StatusNoMsg
	StatusOther
	numStatuses
)

// CompletionError is the error of a failed completion. One value per
// Status is preallocated, so Err never allocates.
type CompletionError struct {
	Status Status
	err    error
}

func (e *CompletionError) Error() string { return e.err.Error() }

// Unwrap returns the sentinel (ErrCanceled, ErrTruncated, ...).
func (e *CompletionError) Unwrap() error { return e.err }

var completionErrors = func() [numStatuses]*CompletionError {
	sent := [numStatuses]error{
		StatusCanceled:     ErrCanceled,
		StatusTruncated:    ErrTruncated,
		StatusRemoteAccess: ErrRemoteAccess,
		StatusAccess:       ErrAccess,
		StatusTimedOut:     ErrTimedOut,
		StatusRemoteOp:     ErrRemoteOp,
		StatusInvalid:      ErrInvalid,
		StatusAddrNotAvail: ErrAddrNotAvail,
		StatusNotConnected: ErrNotConnected,
		StatusNoMsg:        ErrNoMsg,
		StatusOther:        errors.New("fabric: operation failed"),
	}
	var out [numStatuses]*CompletionError
	for s := Status(1); s < numStatuses; s++ {
		out[s] = &CompletionError{Status: s, err: sent[s]}
	}
	return out
}()

func (s Status) String() string {
	if s == StatusOK {
		return "ok"
	}
	if s < numStatuses {
		return completionErrors[s].err.Error()
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Err returns nil for StatusOK, else the preallocated *CompletionError.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	if s >= numStatuses {
		return completionErrors[StatusOther]
	}
	return completionErrors[s]
}

// statusOf maps a verbs work completion status to a fabric one. recv says
// the completion is a receive's (where a local length error is a
// truncation).
func statusOf(s verbs.Status, recv bool) Status {
	switch s {
	case verbs.Success:
		return StatusOK
	case verbs.WRFlushErr:
		return StatusCanceled
	case verbs.LocLenErr:
		if recv {
			return StatusTruncated
		}
		return StatusInvalid
	case verbs.LocProtErr, verbs.LocAccessErr:
		return StatusAccess
	case verbs.RemAccessErr:
		return StatusRemoteAccess
	case verbs.RemInvReqErr:
		return StatusRemoteOp
	case verbs.RemOpErr:
		return StatusRemoteOp
	case verbs.RetryExcErr, verbs.RNRRetryExcErr, verbs.RespTimeoutErr:
		return StatusTimedOut
	}
	return StatusOther
}
