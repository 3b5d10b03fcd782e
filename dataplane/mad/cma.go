package mad

import "net/netip"

// rdma_cm's private data header (struct cma_hdr, drivers/infiniband/core/cma.c),
// 36 bytes at the start of a REQ's or SIDR_REQ's private data when the
// rdma_cm ID has an IP address family (cma_user_data_offset).
const (
	cmaVersion   = 0
	cmaIPVersion = 1 // IP version in bits 7:4 (cma_get_ip_ver/cma_set_ip_ver)
	cmaPort      = 2 // the requester's source port, big-endian (cma_format_hdr)
	cmaSrcAddr   = 4 // union cma_ip_addr: IPv4 in the last 4 of 16 bytes
	cmaDstAddr   = 20

	// CMAHeaderSize is sizeof(struct cma_hdr).
	CMAHeaderSize = 36
	// CMAVersion is the only cma_version rdma_cm accepts (CMA_VERSION).
	CMAVersion = 0x00
)

// CMAHeader is rdma_cm's private data header. The passive rdma_cm takes the
// connection's addresses from it (cma_save_ip4_info: its local address is
// the header's destination, the remote address and port the header's source
// and port) and matches listeners bound to a specific address against the
// destination.
type CMAHeader []byte

// CMAHeaderFields describes a CMAHeader for Encode.
type CMAHeaderFields struct {
	Version uint8      // CMAVersion
	Src     netip.Addr // the requester's address
	Dst     netip.Addr // the address connected to
	SrcPort uint16     // the requester's source port
}

// IsValid reports whether h is long enough for a CMAHeader.
func (h CMAHeader) IsValid() bool { return len(h) >= CMAHeaderSize }

// Version returns cma_version.
func (h CMAHeader) Version() uint8 { return h[cmaVersion] }

// IPVersion returns the IP version, 4 or 6 when valid.
func (h CMAHeader) IPVersion() uint8 { return h[cmaIPVersion] >> 4 }

// Port returns the requester's source port.
func (h CMAHeader) Port() uint16 { return get16(h, cmaPort) }

// Src returns the requester's address as IPVersion says to read it, or the
// zero Addr when the version is neither 4 nor 6.
func (h CMAHeader) Src() netip.Addr { return h.addr(cmaSrcAddr) }

// Dst returns the address connected to, like Src.
func (h CMAHeader) Dst() netip.Addr { return h.addr(cmaDstAddr) }

func (h CMAHeader) addr(off int) netip.Addr {
	switch h.IPVersion() {
	case 4:
		return netip.AddrFrom4([4]byte(h[off+12 : off+16]))
	case 6:
		return netip.AddrFrom16([16]byte(h[off : off+16]))
	}
	return netip.Addr{}
}

// SetVersion sets cma_version.
func (h CMAHeader) SetVersion(v uint8) { h[cmaVersion] = v }

// SetIPVersion sets the IP version nibble, keeping the low nibble.
func (h CMAHeader) SetIPVersion(v uint8) { h[cmaIPVersion] = v<<4 | h[cmaIPVersion]&0x0f }

// SetPort sets the requester's source port.
func (h CMAHeader) SetPort(p uint16) { put16(h, cmaPort, p) }

// SetSrc writes a as the source address: an IPv4 (or IPv4-mapped) address
// into the last four bytes of the field with the rest zero, an IPv6 address
// into all sixteen. It does not change IPVersion.
func (h CMAHeader) SetSrc(a netip.Addr) { h.setAddr(cmaSrcAddr, a) }

// SetDst writes a as the destination address, like SetSrc.
func (h CMAHeader) SetDst(a netip.Addr) { h.setAddr(cmaDstAddr, a) }

func (h CMAHeader) setAddr(off int, a netip.Addr) {
	f := h[off : off+16]
	clear(f)
	switch {
	case a.Is4() || a.Is4In6():
		a4 := a.Unmap().As4()
		copy(f[12:], a4[:])
	case a.Is6():
		a16 := a.As16()
		copy(f, a16[:])
	}
}

// Fields returns the fields of h.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{Version: h.Version(), Src: h.Src(), Dst: h.Dst(), SrcPort: h.Port()}
}

// Encode writes the header described by f as cma_format_hdr does. The IP
// version follows f.Src: 4 for IPv4 and IPv4-mapped addresses, whose four
// bytes go at the end of their fields; else 6, with all sixteen bytes
// written (an IPv4 f.Dst then as IPv4-mapped). A destination that cannot be
// written in an IPv4 header is left zero.
func (h CMAHeader) Encode(f *CMAHeaderFields) {
	clear(h[:CMAHeaderSize])
	h.SetVersion(f.Version)
	h.SetPort(f.SrcPort)
	if f.Src.Is4() || f.Src.Is4In6() {
		h.SetIPVersion(4)
		h.SetSrc(f.Src)
		if f.Dst.Is4() || f.Dst.Is4In6() {
			h.SetDst(f.Dst)
		}
		return
	}
	h.SetIPVersion(6)
	src, dst := f.Src.As16(), f.Dst.As16() // zero for the zero Addr
	copy(h[cmaSrcAddr:], src[:])
	copy(h[cmaDstAddr:], dst[:])
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space); it makes
// up bits 31:16 of an rdma_cm service ID.
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002 // RDMA_PS_IPOIB
	PortSpaceTCP   PortSpace = 0x0106 // RDMA_PS_TCP: connected QPs (rping, ib_write_bw -R)
	PortSpaceUDP   PortSpace = 0x0111 // RDMA_PS_UDP: UD QPs via SIDR
	PortSpaceIB    PortSpace = 0x013F // RDMA_PS_IB: any QP type
)

// Service ID ranges (include/rdma/ib_cm.h).
const (
	// CMAServiceIDPrefix marks rdma_cm's service IDs: the bits of
	// CMAServiceIDMask equal it (IB_CMA_SERVICE_ID).
	CMAServiceIDPrefix = 0x0000000001000000
	CMAServiceIDMask   = 0xFFFFFFFFFF000000
)

// ServiceID returns rdma_cm's service ID for a port in a port space
// (rdma_get_service_id: ps << 16 + port), e.g. 0x10604B1 for TCP port 1201.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID returns the port space and port of an rdma_cm service ID
// (rdma_ps_from_service_id, cma_port_from_service_id).
func SplitServiceID(id uint64) (PortSpace, uint16) { return PortSpace(id >> 16), uint16(id) }

// IsCMAServiceID reports whether id lies in rdma_cm's service ID range.
func IsCMAServiceID(id uint64) bool { return id&CMAServiceIDMask == CMAServiceIDPrefix }
