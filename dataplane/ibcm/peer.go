package ibcm

import "net/netip"

// Peer is the remote end of the CM's MADs: its GSI (QP1) on the port with
// GID. On RoCEv2 the GID is the port's IPv6 address, or for IPv4 the
// IPv4-mapped IPv6 address (::ffff:a.b.c.d); the caller maps it to the
// IP and MAC addresses to send to.
type Peer struct {
	GID [16]byte
}

// PeerFromAddr returns the Peer whose GID is a's RoCEv2 GID.
func PeerFromAddr(a netip.Addr) Peer { return Peer{GID: GIDFromAddr(a)} }

// GIDFromAddr returns a RoCEv2 GID for an IP address: a itself for IPv6, the
// IPv4-mapped IPv6 address for IPv4 (rdma_ip2gid).
func GIDFromAddr(a netip.Addr) [16]byte { return a.As16() }

// Addr returns the IP address the peer's GID stands for, unmapped to IPv4
// where it is an IPv4-mapped address.
func (p Peer) Addr() netip.Addr { return netip.AddrFrom16(p.GID).Unmap() }
