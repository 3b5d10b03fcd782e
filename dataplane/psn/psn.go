// Package psn implements 24-bit packet sequence number arithmetic for the
// InfiniBand/RoCEv2 Base Transport Header.
//
// PSNs wrap at 2^24. Comparisons are meaningful only between numbers less
// than 2^23 apart, exactly as with TCP sequence numbers (gVisor's seqnum):
// a is before b when the 24-bit difference a-b, read as a signed number, is
// negative.
package psn

// Bits is the width of a PSN.
const Bits = 24

// Mask selects the 24 PSN bits of a 32-bit word.
const Mask = 1<<Bits - 1

// Half is half the PSN space; the largest distance Diff can report.
const Half = 1 << (Bits - 1)

// PSN is a 24-bit packet sequence number. Values are always kept in
// [0, 2^24); use the methods to do arithmetic.
type PSN uint32

// New masks v to 24 bits.
func New(v uint32) PSN { return PSN(v & Mask) }

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & Mask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return p.Add(1) }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return PSN((uint32(p) - n) & Mask) }

// Diff returns the signed distance p-q in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 {
	return int32((uint32(p)-uint32(q))<<(32-Bits)) >> (32 - Bits)
}

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// BeforeEq reports whether p comes before q or equals it.
func (p PSN) BeforeEq(q PSN) bool { return p.Diff(q) <= 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether p lies in the window of size n that starts at
// first: first <= p < first+n. n must be at most Half.
func (p PSN) InWindow(first PSN, n uint32) bool {
	return uint32(p.Sub(uint32(first))) < n
}
