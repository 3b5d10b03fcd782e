package fabric

import (
	"fmt"
	"slices"
	"sync"
)

// Fabric is the root of a provider's objects: domains, event queues and
// passive endpoints hang from it.
type Fabric struct {
	provider string
	refs     refs

	// domains are the open domains, for passive endpoints that listen
	// for RDMA-CM requests through one on their device.
	mu      sync.Mutex
	domains []*Domain
}

func (f *Fabric) remember(d *Domain) {
	f.mu.Lock()
	f.domains = append(f.domains, d)
	f.mu.Unlock()
}

func (f *Fabric) forget(d *Domain) {
	f.mu.Lock()
	f.domains = slices.DeleteFunc(f.domains, func(x *Domain) bool { return x == d })
	f.mu.Unlock()
}

// domainOn is the newest open domain on device name, nil if none.
func (f *Fabric) domainOn(name string) *Domain {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.domains) - 1; i >= 0; i-- {
		if f.domains[i].info.Domain.Name == name {
			return f.domains[i]
		}
	}
	return nil
}

// OpenFabric opens the fabric of an offer from GetInfo.
func OpenFabric(info *Info) (*Fabric, error) {
	if info == nil || info.Provider == "" {
		return nil, fmt.Errorf("%w: no info", ErrInvalid)
	}
	return &Fabric{provider: info.Provider}, nil
}

// Provider names the fabric's provider.
func (f *Fabric) Provider() string { return f.provider }

// Close closes the fabric. It fails with ErrBusy while domains, event
// queues or passive endpoints are open. Closing twice is not an error.
func (f *Fabric) Close() error { return f.refs.close() }

// refs counts an object's open children and makes Close idempotent.
type refs struct {
	mu       sync.Mutex
	children int
	closed   bool
}

// add records a new child; it fails once the parent is closed.
func (r *refs) add() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	r.children++
	return nil
}

func (r *refs) done() {
	r.mu.Lock()
	r.children--
	r.mu.Unlock()
}

// close marks the object closed: false when it was already (nothing to
// do), ErrBusy while children are open.
func (r *refs) close() error {
	_, err := r.closing()
	return err
}

func (r *refs) closing() (first bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, nil
	}
	if r.children > 0 {
		return false, fmt.Errorf("%w: %d objects still open", ErrBusy, r.children)
	}
	r.closed = true
	return true, nil
}

func (r *refs) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}
