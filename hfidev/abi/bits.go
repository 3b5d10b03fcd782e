package abi

// field extracts width bits of v starting at shift.
func field(v uint64, shift, width uint) uint64 { return v >> shift & (1<<width - 1) }

// put places x (truncated to width bits) at shift.
func put(x uint64, shift, width uint) uint64 { return (x & (1<<width - 1)) << shift }

func bit(v uint64, n uint) bool { return v>>n&1 != 0 }

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
