package fabric

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/wire"
)

// Address is an endpoint's address on the fabric: its device's GID (an
// IPv4 address, IPv4-mapped, or IPv6) and its queue pair number. An
// unconnected endpoint opened with a service has QPN = service, so a peer
// knows it from the host's address and the service alone.
type Address struct {
	IP  netip.Addr
	QPN uint32
}

// String is "IP:QPN" ("[IPv6]:QPN"), which ParseAddress reads back.
func (a Address) String() string {
	return netip.AddrPortFrom(a.IP.Unmap(), uint16(a.QPN)).String()
}

// ParseAddress reads "IP" (the DefaultService's endpoint), "IP:service"
// or "[IPv6]:service".
func ParseAddress(s string) (Address, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() < 2 {
			return Address{}, fmt.Errorf("%w: address %q: service %d", ErrInvalid, s, ap.Port())
		}
		return Address{IP: ap.Addr().Unmap(), QPN: uint32(ap.Port())}, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return Address{}, fmt.Errorf("%w: address %q", ErrInvalid, s)
	}
	return Address{IP: a.Unmap(), QPN: DefaultService}, nil
}

// AV is an address vector (a table): it turns peers' addresses into small
// indices (Addr) that sends name, resolving each address's route and
// next hop once, at insertion.
type AV struct {
	d    *Domain
	mu   sync.Mutex // writers
	tab  atomic.Pointer[avTable]
	free []Addr
	by   map[Address]Addr
	refs refs
	gen  uint32
}

type avTable struct{ e []atomic.Pointer[avEntry] }

// avEntry is an inserted address, with its path resolved.
type avEntry struct {
	addr Address
	path wire.PathFields
	gen  uint32 // changes on every insertion, so endpoints' caches notice reuse
	// qkey, with hasQKey, is the Q_Key that sends to the address use
	// (an rdma_cm peer's, from SIDR); else the endpoint's.
	qkey    uint32
	hasQKey bool
}

// AV opens an address vector with room for size addresses to start with
// (it grows).
func (d *Domain) AV(size int) (*AV, error) {
	if size < 0 {
		return nil, fmt.Errorf("opening an AV: %w: size %d", ErrInvalid, size)
	}
	if err := d.refs.add(); err != nil {
		return nil, err
	}
	a := &AV{d: d, by: map[Address]Addr{}}
	a.tab.Store(&avTable{e: make([]atomic.Pointer[avEntry], 0, max(size, 8))})
	return a, nil
}

// resolveTimeout bounds the route and neighbour lookup of an insertion.
const resolveTimeout = 3 * time.Second

// Insert adds a peer's address and returns its index. Inserting an
// address twice returns the same index. It fails (ErrAddrNotAvail,
// wrapped) when no route or next hop reaches the address.
func (a *AV) Insert(addr Address) (Addr, error) {
	return a.insert(addr, 0, false)
}

// insert inserts addr, with the Q_Key for sends to it if hasQKey. An
// address inserted again keeps its index; a new Q_Key replaces the old.
func (a *AV) insert(addr Address, qkey uint32, hasQKey bool) (Addr, error) {
	if !addr.IP.IsValid() || addr.QPN == 0 || addr.QPN >= 1<<24 {
		return AddrUnspec, fmt.Errorf("inserting %v: %w", addr, ErrInvalid)
	}
	addr.IP = addr.IP.Unmap()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refs.isClosed() {
		return AddrUnspec, ErrClosed
	}
	x, ok := a.by[addr]
	if ok {
		e := a.tab.Load().e[x].Load()
		if e.hasQKey == hasQKey && e.qkey == qkey {
			return x, nil
		}
		a.gen++
		n := *e
		n.qkey, n.hasQKey, n.gen = qkey, hasQKey, a.gen
		a.tab.Load().e[x].Store(&n)
		return x, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	path, err := a.d.dev.Path(ctx, addr.IP, 0, 0)
	if err != nil {
		return AddrUnspec, fmt.Errorf("inserting %v: %w: %w", addr, ErrAddrNotAvail, err)
	}
	a.gen++
	e := &avEntry{addr: addr, path: path, gen: a.gen, qkey: qkey, hasQKey: hasQKey}
	if n := len(a.free); n > 0 {
		x = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		t := a.tab.Load()
		x = Addr(len(t.e))
		if len(t.e) == cap(t.e) {
			nt := &avTable{e: make([]atomic.Pointer[avEntry], len(t.e), 2*cap(t.e))}
			for i := range t.e {
				nt.e[i].Store(t.e[i].Load())
			}
			t = nt
		}
		t.e = t.e[:len(t.e)+1]
		a.tab.Store(t)
	}
	a.tab.Load().e[x].Store(e)
	a.by[addr] = x
	return x, nil
}

// InsertString inserts an address in ParseAddress's form.
func (a *AV) InsertString(s string) (Addr, error) {
	addr, err := ParseAddress(s)
	if err != nil {
		return AddrUnspec, err
	}
	return a.Insert(addr)
}

// InsertService inserts the endpoint of service on the host with address ip.
func (a *AV) InsertService(ip netip.Addr, service uint16) (Addr, error) {
	return a.Insert(Address{IP: ip, QPN: uint32(service)})
}

// InsertGID inserts the endpoint qpn of the device with GID gid (16 bytes,
// as on the wire).
func (a *AV) InsertGID(gid [16]byte, qpn uint32) (Addr, error) {
	return a.Insert(Address{IP: netip.AddrFrom16(gid), QPN: qpn})
}

// Remove removes addresses; their indices may be reused by later
// insertions. An index not in the AV fails with ErrAddrNotAvail and
// removes nothing.
func (a *AV) Remove(addrs ...Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tab.Load()
	for _, x := range addrs {
		if uint64(x) >= uint64(len(t.e)) || t.e[x].Load() == nil {
			return fmt.Errorf("removing %d: %w", x, ErrAddrNotAvail)
		}
	}
	for _, x := range addrs {
		e := t.e[x].Swap(nil)
		delete(a.by, e.addr)
		a.free = append(a.free, x)
	}
	return nil
}

// Lookup returns the address at index x.
func (a *AV) Lookup(x Addr) (Address, error) {
	e := a.entry(x)
	if e == nil {
		return Address{}, fmt.Errorf("looking up %d: %w", x, ErrAddrNotAvail)
	}
	return e.addr, nil
}

// Count is how many addresses the AV holds.
func (a *AV) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.by)
}

// entry returns the entry at x, or nil. It takes no lock.
func (a *AV) entry(x Addr) *avEntry {
	t := a.tab.Load()
	if uint64(x) >= uint64(len(t.e)) {
		return nil
	}
	return t.e[x].Load()
}

// reverse finds the index of addr (AddrUnspec if absent): the source of a
// received message, for endpoints with CapSource.
func (a *AV) reverse(addr Address) Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x, ok := a.by[addr]; ok {
		return x
	}
	return AddrUnspec
}

// Close closes the AV; ErrBusy while endpoints are bound to it.
func (a *AV) Close() error {
	first, err := a.refs.closing()
	if first {
		a.d.refs.done()
	}
	return err
}
