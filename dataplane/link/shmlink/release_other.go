//go:build !amd64

package shmlink

import "sync/atomic"

// storeRelease stores v at p with release ordering (and more: Go's atomic
// Store is sequentially consistent). See release_amd64.go.
func storeRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
