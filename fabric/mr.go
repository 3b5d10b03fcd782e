package fabric

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/device"
)

// Access is what a memory region may be used for (libfabric's FI_SEND,
// FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE).
type Access uint32

// Accesses. Zero means all of them.
const (
	AccessSend Access = 1 << iota
	AccessRecv
	AccessRead
	AccessWrite
	AccessRemoteRead
	AccessRemoteWrite
	accessAll = AccessSend | AccessRecv | AccessRead | AccessWrite | AccessRemoteRead | AccessRemoteWrite
)

func (a Access) engine() mr.Access {
	var m mr.Access
	if a&(AccessRecv|AccessRead) != 0 {
		m |= mr.LocalWrite // receives and read results land in it
	}
	if a&AccessRemoteRead != 0 {
		m |= mr.RemoteRead
	}
	if a&AccessRemoteWrite != 0 {
		m |= mr.RemoteWrite | mr.RemoteAtomic | mr.LocalWrite
	}
	return m
}

// MR is a registered memory region. Registration is zero-copy: the
// transport reads and writes the application's own []byte, which must
// stay untouched while operations on it are outstanding.
type MR struct {
	d      *Domain
	r      *mr.Region
	buf    []byte
	free   func() error // of memory from AllocMemory
	closed atomic.Bool
}

// Desc names a registered region for a local buffer in a post.
type Desc struct{ r *mr.Region }

// RegisterMemory registers b for the accesses acc (0: all).
func (d *Domain) RegisterMemory(b []byte, acc Access) (*MR, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("registering memory: %w: empty buffer", ErrInvalid)
	}
	if acc&^accessAll != 0 {
		return nil, fmt.Errorf("registering memory: %w: access %#x", ErrInvalid, uint32(acc))
	}
	if acc == 0 {
		acc = accessAll
	}
	if err := d.refs.add(); err != nil {
		return nil, err
	}
	r, err := d.dev.MRs().Register(b, acc.engine())
	if err != nil {
		d.refs.done()
		return nil, fmt.Errorf("registering memory: %w", err)
	}
	return &MR{d: d, r: r, buf: b}, nil
}

// AllocMemory allocates n bytes of page-aligned memory outside the Go heap
// and registers them; Close frees them. Use it for buffers that live as
// long as the domain, or that must not move. On a device attached to the
// softfabric daemon the memory is shared with the daemon (MRShared), which
// can then place received payloads straight into it.
func (d *Domain) AllocMemory(n int, acc Access) (*MR, error) {
	if n <= 0 {
		return nil, fmt.Errorf("allocating memory: %w: %d bytes", ErrInvalid, n)
	}
	b, free, err := d.dev.AllocMemory(n)
	if errors.Is(err, device.ErrGone) {
		return nil, fmt.Errorf("%w: %w", ErrDeviceGone, err)
	}
	if err != nil {
		return nil, err
	}
	m, err := d.RegisterMemory(b, acc)
	if err != nil {
		_ = free()
		return nil, err
	}
	m.free = free
	return m, nil
}

// Desc is the descriptor to pass with buffers inside the region.
func (m *MR) Desc() Desc { return Desc{m.r} }

// Key is the remote key peers use to access the region.
func (m *MR) Key() uint64 { return uint64(m.r.RKey()) }

// Addr is the address of the region's first byte, as peers name it in RMA
// (virtual addressing, MRVirtAddr).
func (m *MR) Addr() uint64 { return m.r.Addr() }

// Bytes is the registered memory.
func (m *MR) Bytes() []byte { return m.buf }

// Close deregisters the region: its keys stop working at once. Closing
// twice is not an error.
func (m *MR) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	err := m.d.dev.MRs().Deregister(m.r)
	if m.free != nil {
		if ferr := m.free(); err == nil {
			err = ferr
		}
	}
	m.d.refs.done()
	return err
}

// addrOf is the address of b's first byte (its IOVA under virtual
// addressing).
func addrOf(b []byte) uint64 {
	if cap(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// sge describes b for the engine: it must lie inside desc's region. A
// zero-length buffer needs no region.
func sge(b []byte, d Desc, out *mr.SGE) error {
	if len(b) == 0 {
		*out = mr.SGE{}
		return nil
	}
	if d.r == nil {
		return ErrAccess
	}
	a := addrOf(b)
	if a < d.r.Addr() || a+uint64(len(b)) > d.r.Addr()+uint64(d.r.Len()) {
		return ErrAccess
	}
	*out = mr.SGE{Addr: a, Length: uint32(len(b)), LKey: d.r.LKey()}
	return nil
}
