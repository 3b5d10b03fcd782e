package hfidev

import "errors"

// Sentinel errors, matched with errors.Is. System-call failures are
// wrapped as they come (unix.EINVAL, unix.ENODEV, …) and match too.
var (
	// ErrNoDevice: no /dev/hfi1_N node for the unit asked for.
	ErrNoDevice = errors.New("hfidev: no such hfi1 unit")
	// ErrVersion: the driver's ABI major is not the one this package speaks.
	ErrVersion = errors.New("hfidev: hfi1 ABI version mismatch")
	// ErrUnsupportedChip: hw_version names a chip this package cannot drive.
	ErrUnsupportedChip = errors.New("hfidev: unsupported chip")
	// ErrBadToken: USER_INFO returned a token that does not describe this
	// context's region.
	ErrBadToken = errors.New("hfidev: inconsistent mmap token")
	// ErrPoll: poll(2) on the context's file reported an error (POLLERR:
	// the driver's answer to a poll type other than ANYRCV and URGENT;
	// POLLNVAL, POLLHUP).
	ErrPoll = errors.New("hfidev: poll on the context failed")
	// ErrFrozen: the context is frozen (abi.EventFrozen); Reset first.
	ErrFrozen = errors.New("hfidev: context frozen")
)
