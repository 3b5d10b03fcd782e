package ctrl

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestWireGIDVector(t *testing.T) {
	// ibv_rc_pingpong on x86_64 for the GID of 198.18.0.1. The GID's
	// bytes are 00×10 ff ff c6 12 00 01. pingpong.c's gid_to_wire_gid
	// does, for i in 0..3:
	//   sprintf(&wgid[i*8], "%08x", htonl(*(uint32_t *)(gid->raw + i*4)));
	// Word 2, bytes 00 00 ff ff, loads little-endian as 0xffff0000;
	// htonl swaps it to 0x0000ffff: "0000ffff". Word 3, bytes c6 12 00
	// 01, loads as 0x010012c6 and swaps to 0xc6120001: "c6120001". So
	// the wire form is the GID's bytes in order.
	const want = "00000000000000000000ffffc6120001"
	a := netip.MustParseAddr("198.18.0.1")
	if got := WireGID(a); got != want {
		t.Fatalf("WireGID(%s) = %s, want %s", a, got, want)
	}
	if got := WireGID(netip.AddrFrom16(a.As16())); got != want {
		t.Fatalf("WireGID(mapped) = %s, want %s", got, want)
	}
	if got, want := FormatGID(a), "0000:0000:0000:0000:0000:ffff:c612:0001"; got != want {
		t.Fatalf("FormatGID(%s) = %s, want %s", a, got, want)
	}
	a6 := netip.MustParseAddr("fd00:198:18::1")
	if got, want := WireGID(a6), "fd000198001800000000000000000001"; got != want {
		t.Fatalf("WireGID(%s) = %s, want %s", a6, got, want)
	}
	if got, want := FormatGID(a6), "fd00:0198:0018:0000:0000:0000:0000:0001"; got != want {
		t.Fatalf("FormatGID(%s) = %s, want %s", a6, got, want)
	}
}

// pingpongWire is gid_to_wire_gid of pingpong.c as it runs on a
// little-endian host: load each word in host order, htonl, print %08x.
func pingpongWire(gid [16]byte) string {
	var s strings.Builder
	for i := range 4 {
		host := binary.LittleEndian.Uint32(gid[i*4:])
		fmt.Fprintf(&s, "%08x", bits.ReverseBytes32(host)) // htonl on x86_64
	}
	return s.String()
}

// pingpongParse is wire_gid_to_gid on a little-endian host: sscanf %x of
// each 8 digits, ntohl, store in host order.
func pingpongParse(w string) (gid [16]byte) {
	for i := range 4 {
		var v uint32
		fmt.Sscanf(w[i*8:i*8+8], "%x", &v)
		binary.LittleEndian.PutUint32(gid[i*4:], bits.ReverseBytes32(v))
	}
	return gid
}

func TestWireGIDRoundTrip(t *testing.T) {
	for _, s := range []string{
		"198.18.0.1", "0.0.0.0", "255.255.255.255", "fe80::5054:ff:fe12:3456",
		"fd00:198:18::2", "2001:db8:1:2:3:4:5:6", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	} {
		a := netip.MustParseAddr(s)
		w := WireGID(a)
		if got := pingpongWire(a.As16()); got != w {
			t.Errorf("%s: WireGID %s, pingpong.c %s", s, w, got)
		}
		if got := pingpongParse(w); got != a.As16() {
			t.Errorf("%s: pingpong.c parses %s as %x", s, w, got)
		}
		back, err := ParseWireGID(w)
		if err != nil {
			t.Fatalf("ParseWireGID(%s): %v", w, err)
		}
		if back != netip.AddrFrom16(a.As16()) || back.Unmap() != a {
			t.Errorf("%s: round trip gives %s", s, back)
		}
		if up, err := ParseWireGID(strings.ToUpper(w)); err != nil || up != back {
			t.Errorf("ParseWireGID(upper %s) = %s, %v", w, up, err)
		}
		f := FormatGID(a)
		if len(f) != 39 {
			t.Errorf("FormatGID(%s) = %q: want 39 characters", s, f)
		}
		if p, err := netip.ParseAddr(f); err != nil || p != netip.AddrFrom16(a.As16()) {
			t.Errorf("FormatGID(%s) = %s parses as %s, %v", s, f, p, err)
		}
	}
	for _, bad := range []string{"", "00", "00000000000000000000ffffc612000", "00000000000000000000ffffc61200011",
		"00000000000000000000ffffc612000g", "0000:0000:0000:0000:0000:ffff:c612:0001"} {
		if a, err := ParseWireGID(bad); err == nil {
			t.Errorf("ParseWireGID(%q) = %s, want an error", bad, a)
		}
	}
}

func TestGIDs(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	d := &Device{
		Name: "eth0",
		MAC:  mac,
		// Netlink order; an IPv6 address first to check that IPv4 goes
		// first in the table, and the EUI-64 link-local address that
		// duplicates the default GID.
		Addrs: []netip.Prefix{
			netip.MustParsePrefix("fd00::1/64"),
			netip.MustParsePrefix("198.18.0.1/24"),
			netip.MustParsePrefix("10.1.2.3/8"),
			netip.MustParsePrefix("fe80::5054:ff:fe12:3456/64"),
			netip.MustParsePrefix("fe80::1/64"),
		},
	}
	want := []netip.Addr{
		netip.MustParseAddr("fe80::5054:ff:fe12:3456"), // 52 ^ 02 = 50; ff:fe inserted
		netip.MustParseAddr("::ffff:198.18.0.1"),
		netip.MustParseAddr("::ffff:10.1.2.3"),
		netip.MustParseAddr("fd00::1"),
		netip.MustParseAddr("fe80::1"),
	}
	got := GIDs(d)
	if !slices.Equal(got, want) {
		t.Fatalf("GIDs = %v, want %v", got, want)
	}
	if got, want := FormatGID(got[0]), "fe80:0000:0000:0000:5054:00ff:fe12:3456"; got != want {
		t.Fatalf("default GID %s, want %s", got, want)
	}
	// A locally administered MAC has the U/L bit set; the flip clears it.
	d = &Device{MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 1}}
	if got := GIDs(d); len(got) != 1 || got[0] != netip.MustParseAddr("fe80::ff:fe00:1") {
		t.Fatalf("GIDs(02:00:00:00:00:01) = %v", got)
	}
	if got := GIDs(&Device{Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}}); got != nil {
		t.Fatalf("GIDs without a MAC = %v, want nil", got)
	}
}
