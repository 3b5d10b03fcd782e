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
	// held are domains passive endpoints opened to listen through, on a
	// device where the application had none (listenDomain), with how many
	// listen through each; the next Domain call for that device with the
	// same attributes takes one over (adopt).
	held map[*Domain]int
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

// listenDomain is the domain a passive endpoint listens for RDMA-CM
// requests through: the newest open one on its device, else one opened
// for it from its info, as libfabric's applications listen before they
// open a domain (the kernel's CM needs none). held reports a domain
// opened for passive endpoints, to give back with release.
func (f *Fabric) listenDomain(p *PassiveEndpoint) (d *Domain, held bool, err error) {
	if d := f.domainOn(p.info.Domain.Name); d != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, held = f.held[d]; held {
			f.held[d]++
		}
		return d, held, nil
	}
	if d, err = f.Domain(&p.info); err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	if f.held == nil {
		f.held = map[*Domain]int{}
	}
	f.held[d] = 1
	f.mu.Unlock()
	return d, true, nil
}

// adopt hands the application a domain a passive endpoint opened on the
// device info names, if one is held with the attributes info asks for.
func (f *Fabric) adopt(info *Info) *Domain {
	f.mu.Lock()
	defer f.mu.Unlock()
	for d := range f.held {
		if d.info.Domain.Name == info.Domain.Name && sameDomainAttr(d.info.Domain, info.Domain) {
			delete(f.held, d)
			return d
		}
	}
	return nil
}

// release gives back a domain listenDomain held: the last passive
// endpoint to give it back closes it, unless the application took it
// over.
func (f *Fabric) release(d *Domain) error {
	f.mu.Lock()
	n, held := f.held[d]
	if held && n > 1 {
		f.held[d] = n - 1
	} else {
		delete(f.held, d)
	}
	f.mu.Unlock()
	if !held || n > 1 {
		return nil
	}
	return d.Close()
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
