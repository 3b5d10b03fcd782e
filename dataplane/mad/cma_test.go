package mad

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestServiceID(t *testing.T) {
	// rping's default port 7174 in RDMA_PS_TCP; RDMA_IB_IP_PS_TCP is
	// 0x0000000001060000.
	if id := ServiceID(PortSpaceTCP, 7174); id != 0x01061c06 {
		t.Errorf("ServiceID = %#x", id)
	}
	if ps, port := SplitServiceID(0x0000000001110035); ps != PortSpaceUDP || port != 53 {
		t.Errorf("SplitServiceID = %#x %d", ps, port)
	}
	if !IsCMAServiceID(ServiceID(PortSpaceIB, 1)) || !IsCMAServiceID(ServiceID(PortSpaceTCP, 0xffff)) ||
		IsCMAServiceID(ServiceID(PortSpaceIPoIB, 1)) || IsCMAServiceID(0x0200000000000001) {
		t.Error("IsCMAServiceID")
	}
	if PortSpaceIPoIB != 0x0002 || PortSpaceTCP != 0x0106 || PortSpaceUDP != 0x0111 || PortSpaceIB != 0x013f {
		t.Error("port spaces differ from enum rdma_ucm_port_space")
	}
}

func TestCMAHeaderIPv4(t *testing.T) {
	// cma_format_hdr for 10.0.0.1:40000 -> 10.0.0.2: version 0, ip_version
	// 4 << 4, the source port, then two union cma_ip_addr with the IPv4
	// address in their last four bytes.
	want := []byte{
		0x00, 0x40, 0x9c, 0x40,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
	}
	h := CMAHeader(bytes.Repeat([]byte{0xee}, CMAHeaderSize))
	f := CMAHeaderFields{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.0.0.2"), SrcPort: 40000}
	h.Encode(&f)
	if !bytes.Equal(h, want) {
		t.Fatalf("Encode\n got %x\nwant %x", []byte(h), want)
	}
	got := h.Fields()
	if got.Src != f.Src || got.Dst != netip.MustParseAddr("10.0.0.2") || got.SrcPort != 40000 || got.Version != CMAVersion {
		t.Errorf("Fields() = %+v", got)
	}
	h.SetIPVersion(5)
	if h.Src().IsValid() || h.Dst().IsValid() || h[1] != 0x50 {
		t.Error("an unknown IP version must give invalid addresses")
	}
}

func TestCMAHeaderIPv6(t *testing.T) {
	src, dst := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	h := CMAHeader(make([]byte, CMAHeaderSize))
	h.Encode(&CMAHeaderFields{Src: src, Dst: dst, SrcPort: 1})
	if h[1] != 0x60 || h.Src() != src || h.Dst() != dst || h.Port() != 1 {
		t.Errorf("IPv6 header %x", []byte(h))
	}
	// An IPv4 destination in an IPv6 header is written mapped; an IPv6
	// destination cannot go in an IPv4 header and is left zero.
	h.Encode(&CMAHeaderFields{Src: src, Dst: netip.MustParseAddr("10.0.0.2")})
	if h.Dst() != netip.MustParseAddr("::ffff:10.0.0.2") {
		t.Errorf("mapped dst %v", h.Dst())
	}
	h.Encode(&CMAHeaderFields{Src: netip.MustParseAddr("10.0.0.1"), Dst: dst})
	if h.Dst() != netip.AddrFrom4([4]byte{}) {
		t.Errorf("IPv6 dst in an IPv4 header: %v", h.Dst())
	}
	h.Encode(&CMAHeaderFields{}) // zero addresses must not panic
	if h[1] != 0x60 || !bytes.Equal(h[4:], make([]byte, 32)) {
		t.Errorf("zero header %x", []byte(h))
	}
}
