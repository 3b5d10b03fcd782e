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
)
