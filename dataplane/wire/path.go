package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
)

// PathFields describes the L2-L4 headers of the frames sent to one peer.
type PathFields struct {
	SrcMAC, DstMAC [6]byte
	VLAN           bool
	VLANID         uint16 // 12 bits
	PCP            uint8  // 3 bits
	// Src and Dst are both IPv4 or both IPv6; an IPv4-mapped IPv6 address
	// counts as IPv4.
	Src, Dst     netip.Addr
	TrafficClass uint8  // IPv4 TOS or IPv6 traffic class: DSCP and ECN
	HopLimit     uint8  // IPv4 TTL or IPv6 hop limit; 0 means 64
	FlowLabel    uint32 // IPv6 only; 20 bits
	SrcPort      uint16 // UDP source port; 0 means DefaultSourcePort
}

// DefaultHopLimit is the TTL or hop limit of a Path given none.
const DefaultHopLimit = 64

const pathMaxHeader = EthernetSize + VLANSize + IPv6Size + UDPSize

// Path is a prebuilt L2-L4 header template for frames to one peer. It is a
// plain value holding no pointers, so it can be copied and stored in
// per-QP state freely.
type Path struct {
	hdr  [pathMaxHeader]byte
	hlen uint8 // 0 in the zero Path, which Finish ignores
	l3   uint8
	ipv6 bool
	// sum is the ones' complement sum of the IPv4 header with total length
	// and checksum zero, so Finish only has to add the length.
	sum uint32
}

// Errors returned by NewPath.
var (
	ErrAddrFamily = errors.New("wire: path needs two ipv4 or two ipv6 addresses")
	ErrPathField  = errors.New("wire: path field out of range")
)

// NewPath builds the template described by f.
func NewPath(f PathFields) (Path, error) {
	var p Path
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	switch {
	case src.Is4() && dst.Is4():
	case src.Is6() && dst.Is6():
		p.ipv6 = true
	default:
		return Path{}, ErrAddrFamily
	}
	if f.VLANID > 0x0fff || f.PCP > 7 || f.FlowLabel > ipv6FlowLabelMx || (!f.VLAN && (f.VLANID != 0 || f.PCP != 0)) {
		return Path{}, ErrPathField
	}
	if f.FlowLabel != 0 && !p.ipv6 {
		return Path{}, ErrPathField
	}
	hop := f.HopLimit
	if hop == 0 {
		hop = DefaultHopLimit
	}
	sport := f.SrcPort
	if sport == 0 {
		sport = DefaultSourcePort
	}

	eth := EthernetFields{Dst: f.DstMAC, Src: f.SrcMAC, VLAN: f.VLAN, VLANID: f.VLANID, PCP: f.PCP, EtherType: EtherTypeIPv4}
	if p.ipv6 {
		eth.EtherType = EtherTypeIPv6
	}
	Ethernet(p.hdr[:]).Encode(&eth)
	l3 := EthernetSize
	if f.VLAN {
		l3 += VLANSize
	}
	l4 := l3 + IPv4MinSize
	if p.ipv6 {
		l4 = l3 + IPv6Size
		IPv6(p.hdr[l3:]).Encode(&IPv6Fields{
			TrafficClass: f.TrafficClass,
			FlowLabel:    f.FlowLabel,
			NextHeader:   ProtocolUDP,
			HopLimit:     hop,
			Src:          src,
			Dst:          dst,
		})
	} else {
		ip := IPv4(p.hdr[l3:l4])
		ip.Encode(&IPv4Fields{
			TOS:      f.TrafficClass,
			Flags:    IPv4FlagDontFragment,
			TTL:      hop,
			Protocol: ProtocolUDP,
			Src:      src,
			Dst:      dst,
		})
		p.sum = checksumAdd(0, ip)
	}
	UDP(p.hdr[l4:]).Encode(&UDPFields{SrcPort: sport, DstPort: UDPPort})
	p.l3 = uint8(l3)
	p.hlen = uint8(l4 + UDPSize)
	return p, nil
}

// Fields returns the fields p was built from, with defaults filled in and
// addresses unmapped.
func (p *Path) Fields() PathFields {
	if p.hlen == 0 {
		return PathFields{}
	}
	eth := Ethernet(p.hdr[:])
	f := PathFields{
		SrcMAC:  eth.Src(),
		DstMAC:  eth.Dst(),
		VLAN:    eth.HasVLAN(),
		VLANID:  eth.VLANID(),
		PCP:     eth.PCP(),
		SrcPort: UDP(p.hdr[p.hlen-UDPSize:]).SourcePort(),
	}
	if p.ipv6 {
		ip := IPv6(p.hdr[p.l3:])
		f.Src, f.Dst = ip.SourceAddress(), ip.DestinationAddress()
		f.TrafficClass, f.HopLimit, f.FlowLabel = ip.TrafficClass(), ip.HopLimit(), ip.FlowLabel()
	} else {
		ip := IPv4(p.hdr[p.l3:])
		f.Src, f.Dst = ip.SourceAddress(), ip.DestinationAddress()
		f.TrafficClass, f.HopLimit = ip.TOS(), ip.TTL()
	}
	return f
}

// HeaderLen returns the number of bytes in front of the BTH: Ethernet, the
// VLAN tag if any, IP and UDP.
func (p *Path) HeaderLen() int { return int(p.hlen) }

// IsIPv6 reports whether the path is over IPv6.
func (p *Path) IsIPv6() bool { return p.ipv6 }

// Finish completes a frame laid out as HeaderLen bytes of room, then the BTH,
// extension headers, payload and pad written by the caller, then a 4-byte
// ICRC slot. It writes the Ethernet, IP and UDP headers with the lengths
// this frame needs (IPv4: DF set, ID 0, header checksum; UDP checksum 0),
// then computes and stores the ICRC. It does not allocate.
//
// A frame too short to hold the headers, a BTH and the ICRC, or too long
// for the IP length field, is left unchanged, as is any frame given to the
// zero Path.
func (p *Path) Finish(frame []byte) {
	if !p.PutHeaders(frame) {
		return
	}
	l3, end := int(p.l3), len(frame)-ICRCSize
	binary.LittleEndian.PutUint32(frame[end:], ComputeICRC(frame[l3:end]))
}

// FinishGather is Finish for a frame whose payload is not in it: a link
// takes the payload from where it lies when it sends the frame
// (link.Gatherer). frame holds the headers, room for the payload at byte
// at (left as it is), the pad and the ICRC slot; the ICRC covers payload
// in its place. It does not allocate.
func (p *Path) FinishGather(frame []byte, at int, payload []byte) {
	if at < int(p.hlen)+BTHSize || at+len(payload) > len(frame)-ICRCSize || !p.PutHeaders(frame) {
		return
	}
	l3, end := int(p.l3), len(frame)-ICRCSize
	c := ComputeICRC(frame[l3:at])
	c = crc32.Update(c, crc32.IEEETable, payload)
	c = crc32.Update(c, crc32.IEEETable, frame[at+len(payload):end])
	binary.LittleEndian.PutUint32(frame[end:], c)
}

// PutHeaders is Finish without the ICRC: it writes the Ethernet, IP and
// UDP headers with the lengths frame needs and leaves the ICRC slot as it
// is, for a link that carries the sender's ICRC across another fabric and
// rebuilds the headers around it (hfidev/hfilink). It reports false, and
// leaves frame unchanged, where Finish would.
func (p *Path) PutHeaders(frame []byte) bool {
	hl := int(p.hlen)
	if hl == 0 || len(frame) < hl+BTHSize+ICRCSize {
		return false
	}
	l3, l4 := int(p.l3), hl-UDPSize
	ipLen := len(frame) - l3
	if p.ipv6 {
		ipLen -= IPv6Size
	}
	if ipLen > 0xffff {
		return false
	}
	copy(frame, p.hdr[:hl])
	if p.ipv6 {
		binary.BigEndian.PutUint16(frame[l3+ipv6PayloadLen:], uint16(ipLen))
	} else {
		binary.BigEndian.PutUint16(frame[l3+ipv4TotalLen:], uint16(ipLen))
		binary.BigEndian.PutUint16(frame[l3+ipv4Checksum:], ^checksumFold(p.sum+uint32(ipLen)))
	}
	binary.BigEndian.PutUint16(frame[l4+udpLength:], uint16(len(frame)-l4))
	return true
}

// QPFlowLabel returns the 20-bit flow label Linux derives from a QP pair
// when none is configured (rdma_calc_flow_label in include/rdma/ib_verbs.h).
// It is symmetric, so requester and responder agree.
func QPFlowLabel(qpn, destQPN uint32) uint32 {
	fl := uint64(qpn) * uint64(destQPN)
	fl ^= fl >> 20
	fl ^= fl >> 40
	return uint32(fl & ipv6FlowLabelMx)
}

// FlowLabelSourcePort folds a 20-bit flow label into a RoCEv2 UDP source
// port in [0xc000, 0xffff] (rdma_flow_label_to_udp_sport).
func FlowLabelSourcePort(fl uint32) uint16 {
	low, high := fl&0x3fff, fl&0xfc000
	low ^= high >> 14
	return uint16(low | DefaultSourcePort)
}

// SourcePort returns the UDP source port Linux (rxe and the RoCE NIC
// drivers, through rdma_get_udp_sport) uses for a QP with no configured
// flow label. Keeping to it makes a QP's packets hash to one RSS queue, and
// lets a peer's classifier predict the port.
func SourcePort(qpn, destQPN uint32) uint16 {
	return FlowLabelSourcePort(QPFlowLabel(qpn, destQPN))
}

// Dst16 is the destination address in 16-byte form (IPv4 mapped); zero
// for the zero Path.
func (p *Path) Dst16() [16]byte {
	switch {
	case p.hlen == 0:
		return [16]byte{}
	case p.ipv6:
		return IPv6(p.hdr[p.l3:]).DestinationAddress().As16()
	default:
		return IPv4(p.hdr[p.l3:]).DestinationAddress().As16()
	}
}
