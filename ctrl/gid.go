package ctrl

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/softfabric/softfabric/dataplane/wire"
)

// GIDs returns the RoCEv2 GID table of d as Linux rxe builds it when the
// device is registered (ib_core's roce_gid_mgmt.c): index 0 is the default
// GID, fe80::/64 with the EUI-64 interface id made from the MAC; then one
// GID per address, the IPv4 addresses first (as IPv4-mapped IPv6,
// ::ffff:a.b.c.d) and the IPv6 addresses after, each family in the kernel's
// list order, which is the netlink dump order of d.Addrs. An address whose
// GID is already in the table (the EUI-64 link-local address equals the
// default GID) is not added twice, as ib_cache_gid_add skips duplicates.
//
// On a live rxe device the table can differ: addresses added after the
// device are appended as they come, and a deleted address leaves a hole
// that the next one fills. RoCE NICs that also speak RoCEv1 hold two
// entries per address; rxe, and this table, RoCEv2 only.
//
// A device without a 6-byte Ethernet MAC has no GID table: GIDs returns nil.
func GIDs(d *Device) []netip.Addr {
	if len(d.MAC) != 6 {
		return nil
	}
	var eui [16]byte
	eui[0], eui[1] = 0xfe, 0x80
	id := wire.EUI64([6]byte(d.MAC))
	copy(eui[8:], id[:])
	gids := []netip.Addr{netip.AddrFrom16(eui)}
	seen := map[netip.Addr]bool{gids[0]: true}
	for _, v4 := range []bool{true, false} {
		for _, p := range d.Addrs {
			a := p.Addr().Unmap()
			if a.Is4() != v4 {
				continue
			}
			g := netip.AddrFrom16(a.As16())
			if !seen[g] {
				seen[g] = true
				gids = append(gids, g)
			}
		}
	}
	return gids
}

// FormatGID formats a GID as ibv_devinfo -v and show_gids print it: eight
// groups of four hex digits, "0000:0000:0000:0000:0000:ffff:c612:0001". An
// IPv4 address is formatted as its IPv4-mapped GID.
func FormatGID(a netip.Addr) string {
	b := a.As16()
	var s strings.Builder
	s.Grow(39)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s.WriteByte(':')
		}
		fmt.Fprintf(&s, "%02x%02x", b[i], b[i+1])
	}
	return s.String()
}

// WireGID formats a GID as the rdma-core example programs
// (ibv_rc_pingpong and friends) exchange it: 32 lowercase hex digits
// without separators. pingpong.c's gid_to_wire_gid prints, for each 4-byte
// word, htonl of the word loaded in host order; htonl undoes the host-order
// load on little- and big-endian hosts alike, so the digits are the GID's
// bytes in order. An IPv4 address is formatted as its IPv4-mapped GID.
func WireGID(a netip.Addr) string {
	b := a.As16()
	return hex.EncodeToString(b[:])
}

// ParseWireGID parses the 32 hex digits of WireGID (either case), as
// pingpong.c's wire_gid_to_gid. The result is always a 16-byte address;
// an IPv4-mapped GID stays mapped (Unmap gives the IPv4 address).
func ParseWireGID(s string) (netip.Addr, error) {
	var b [16]byte
	if len(s) != 32 {
		return netip.Addr{}, fmt.Errorf("invalid wire GID %q: want 32 hex digits", s)
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return netip.Addr{}, fmt.Errorf("invalid wire GID %q: want 32 hex digits", s)
	}
	return netip.AddrFrom16(b), nil
}
