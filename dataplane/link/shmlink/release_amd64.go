package shmlink

// storeRelease stores v at p with release ordering: on amd64 (TSO) a
// plain MOV, which stores made before it cannot pass, and which does not
// wait, as an XCHG (Go's atomic Store) does, for every store before it to
// reach the cache first. p must be 8-byte aligned; readers load it
// atomically.
//
//go:noescape
func storeRelease(p *uint64, v uint64)
