// Package mr implements memory regions for the transport engine: registered
// byte buffers with an IOVA, lkey/rkey, access flags and bounds checks, and
// scatter/gather copies between packets and regions.
//
// # Keys
//
// A key is 32 bits: the slot index in the low 16 bits and 16 random bits in
// the high 16 bits. The random bits are fresh for every registration, differ
// between the lkey and the rkey, are never zero (so no key is 0), and differ
// from those of the registration that last held the slot, so the keys of a
// deregistered region are always rejected once its slot is reused. A peer
// that guesses keys has a 1 in 65535 chance per guess; that is what 16 bits
// buy, and why Invalidate exists.
//
// # Concurrency
//
// Lookups (Remote, Local, Atomic64, Gather, Scatter) take no locks and
// allocate nothing: the responder runs them per packet. The table is a fixed
// array of atomic pointers, so a worker may look keys up while an application
// goroutine registers, deregisters or invalidates. Registration locks.
//
// A slice returned by a lookup stays valid memory after Deregister (the
// region's buffer is kept alive by the garbage collector, never freed), but
// the application must not expect operations that raced with Deregister to
// have been refused: as in verbs, deregister once the QPs using a region are
// quiet.
//
// # Zero lengths
//
// A region may be zero bytes long; only zero-length accesses at its IOVA fall
// inside it. A zero-length Remote or Local request succeeds with a nil slice
// and checks nothing, not even the key: IBA C9-88 lets a zero-byte RDMA READ
// or WRITE carry any rkey and address, and rxe skips the check likewise (as
// it skips zero-length SGEs in copy_data). Gather and Scatter skip
// zero-length SGEs the same way.
package mr
