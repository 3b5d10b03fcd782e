package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Errors returned by Packet.Parse. ErrNotRoCE means the frame is some other
// traffic and belongs to the host stack; the others mean a RoCEv2 frame is
// malformed and should be counted and dropped.
var (
	ErrNotRoCE    = errors.New("wire: not a roce v2 frame")
	ErrTruncated  = errors.New("wire: truncated frame")
	ErrBadLength  = errors.New("wire: inconsistent length")
	ErrBadVersion = errors.New("wire: bad transport header version")
	ErrBadOpcode  = errors.New("wire: unsupported opcode")
	ErrBadPad     = errors.New("wire: pad count exceeds payload")
)

// Packet is a parsed RoCEv2 frame. Its slices alias the frame given to
// Parse; nothing is copied. The zero Packet and a Packet whose Parse failed
// hand out nil views.
type Packet struct {
	Frame  []byte // the frame as given
	L3     int    // offset of the IP header
	L4     int    // offset of the UDP header
	BTHOff int    // offset of the BTH
	IPv6   bool
	Opcode Opcode
	Info   *OpInfo
	// Payload is the data after the extension headers, without pad bytes
	// and ICRC.
	Payload []byte
	// End is the offset just past the ICRC. The IP length bounds the packet:
	// Ethernet padding after it is ignored.
	End int
}

// Parse parses frame, which starts with an Ethernet header, and validates
// it: an optional 802.1Q tag; IPv4 (options allowed, not fragmented; the
// header checksum is not checked) or IPv6 without extension headers; UDP to
// port 4791 with a length that agrees with IP; a BTH of version 0 with a
// supported opcode; room for the opcode's headers, pad and ICRC; and no more
// pad than payload. The ICRC is not checked: see CheckICRC.
//
// Parse does not allocate. Its errors are the sentinels above, comparable
// with errors.Is or ==.
func (p *Packet) Parse(frame []byte) error {
	*p = Packet{Frame: frame}
	if len(frame) < EthernetSize {
		return ErrTruncated
	}
	l3 := EthernetSize
	et := binary.BigEndian.Uint16(frame[ethType:])
	if et == EtherTypeVLAN {
		if len(frame) < EthernetSize+VLANSize {
			return ErrTruncated
		}
		et = binary.BigEndian.Uint16(frame[vlanIn:])
		l3 += VLANSize
	}

	// Decide whether the frame is ours before judging its lengths, so that
	// other traffic goes to the host stack whatever its shape.
	var l4, ipLen int
	ip := frame[l3:]
	switch et {
	case EtherTypeIPv4:
		if len(ip) < IPv4MinSize {
			return ErrTruncated
		}
		if ip[ipv4VerIHL]>>4 != 4 || ip[ipv4Protocol] != ProtocolUDP ||
			binary.BigEndian.Uint16(ip[ipv4FlagsFO:])&0x3fff != 0 { // MF or offset: a fragment
			return ErrNotRoCE
		}
		hl := int(ip[ipv4VerIHL]&0xf) * 4
		if hl < IPv4MinSize {
			return ErrNotRoCE
		}
		l4 = l3 + hl
		ipLen = int(binary.BigEndian.Uint16(ip[ipv4TotalLen:]))
	case EtherTypeIPv6:
		if len(ip) < IPv6Size {
			return ErrTruncated
		}
		if ip[ipv6VerTCFlow]>>4 != 6 || ip[ipv6NextHeader] != ProtocolUDP {
			return ErrNotRoCE
		}
		l4 = l3 + IPv6Size
		ipLen = IPv6Size + int(binary.BigEndian.Uint16(ip[ipv6PayloadLen:]))
	default:
		return ErrNotRoCE
	}
	if len(frame) < l4+UDPSize {
		return ErrTruncated
	}
	if binary.BigEndian.Uint16(frame[l4+udpDstPort:]) != UDPPort {
		return ErrNotRoCE
	}
	end := l3 + ipLen
	if end < l4+UDPSize {
		return ErrBadLength
	}
	if len(frame) < end {
		return ErrTruncated
	}
	if int(binary.BigEndian.Uint16(frame[l4+udpLength:])) != end-l4 {
		return ErrBadLength
	}
	bth := l4 + UDPSize
	if end-bth < BTHSize+ICRCSize {
		return ErrBadLength
	}
	if frame[bth+bthFlags]&bthTVer != 0 {
		return ErrBadVersion
	}
	op := Opcode(frame[bth+bthOpcode])
	info := &opTable[op]
	if info.Mask == 0 {
		return ErrBadOpcode
	}
	data := end - ICRCSize - bth - info.HeaderLen // payload and pad
	if data < 0 {
		return ErrBadLength
	}
	if data > 0 && info.Mask&MaskPayload == 0 {
		return ErrBadLength
	}
	pad := int(frame[bth+bthFlags]&bthPadMask) >> bthPadSh
	if pad > data {
		return ErrBadPad
	}
	start := bth + info.HeaderLen
	p.L3, p.L4, p.BTHOff, p.End = l3, l4, bth, end
	p.IPv6, p.Opcode, p.Info = et == EtherTypeIPv6, op, info
	p.Payload = frame[start : start+data-pad : start+data-pad]
	return nil
}

// view returns the n bytes at offset off from the BTH, or nil when the
// opcode has no such header (off == 0) or the Packet was not parsed.
func (p *Packet) view(off, n int) []byte {
	if off == 0 || p.Info == nil {
		return nil
	}
	o := p.BTHOff + off
	return p.Frame[o : o+n : o+n]
}

// BTH returns the base transport header, nil if the Packet was not parsed.
func (p *Packet) BTH() BTH {
	if p.Info == nil {
		return nil
	}
	return BTH(p.Frame[p.BTHOff : p.BTHOff+BTHSize : p.BTHOff+BTHSize])
}

// RETH returns the RETH, nil when the opcode has none.
func (p *Packet) RETH() RETH { return RETH(p.view(p.off().RETH, RETHSize)) }

// AETH returns the AETH, nil when the opcode has none.
func (p *Packet) AETH() AETH { return AETH(p.view(p.off().AETH, AETHSize)) }

// AtomicETH returns the AtomicETH, nil when the opcode has none.
func (p *Packet) AtomicETH() AtomicETH {
	return AtomicETH(p.view(p.off().AtomicETH, AtomicETHSize))
}

// AtomicAckETH returns the AtomicAckETH, nil when the opcode has none.
func (p *Packet) AtomicAckETH() AtomicAckETH {
	return AtomicAckETH(p.view(p.off().AtomicAckETH, AtomicAckETHSize))
}

// ImmDt returns the immediate data header, nil when the opcode has none.
func (p *Packet) ImmDt() ImmDt { return ImmDt(p.view(p.off().ImmDt, ImmDtSize)) }

// IETH returns the IETH, nil when the opcode has none.
func (p *Packet) IETH() IETH { return IETH(p.view(p.off().IETH, IETHSize)) }

// DETH returns the DETH, nil when the opcode has none.
func (p *Packet) DETH() DETH { return DETH(p.view(p.off().DETH, DETHSize)) }

var noInfo OpInfo

func (p *Packet) off() *OpInfo {
	if p.Info == nil {
		return &noInfo
	}
	return p.Info
}

// Ethernet returns the Ethernet header, tag included.
func (p *Packet) Ethernet() Ethernet {
	if p.Info == nil {
		return nil
	}
	return Ethernet(p.Frame[:p.L3:p.L3])
}

// IPv4Header returns the IPv4 packet up to the end of the ICRC, nil for
// IPv6.
func (p *Packet) IPv4Header() IPv4 {
	if p.Info == nil || p.IPv6 {
		return nil
	}
	return IPv4(p.Frame[p.L3:p.End:p.End])
}

// IPv6Header returns the IPv6 packet up to the end of the ICRC, nil for
// IPv4.
func (p *Packet) IPv6Header() IPv6 {
	if p.Info == nil || !p.IPv6 {
		return nil
	}
	return IPv6(p.Frame[p.L3:p.End:p.End])
}

// UDP returns the UDP datagram up to the end of the ICRC.
func (p *Packet) UDP() UDP {
	if p.Info == nil {
		return nil
	}
	return UDP(p.Frame[p.L4:p.End:p.End])
}

// ICRC returns the ICRC carried in the frame.
func (p *Packet) ICRC() uint32 {
	if p.Info == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p.Frame[p.End-ICRCSize:])
}

// ComputeICRC returns the ICRC the frame should carry.
func (p *Packet) ComputeICRC() uint32 {
	if p.Info == nil {
		return 0
	}
	return ComputeICRC(p.Frame[p.L3 : p.End-ICRCSize])
}

// CheckICRC reports whether the frame carries the right ICRC; false if the
// Packet was not parsed.
func (p *Packet) CheckICRC() bool {
	return p.Info != nil && p.ComputeICRC() == p.ICRC()
}

// Src returns the source IP address; IPv4 addresses are not mapped.
func (p *Packet) Src() netip.Addr {
	switch {
	case p.Info == nil:
		return netip.Addr{}
	case p.IPv6:
		return netip.AddrFrom16([16]byte(p.Frame[p.L3+ipv6SrcAddr:]))
	default:
		return netip.AddrFrom4([4]byte(p.Frame[p.L3+ipv4SrcAddr:]))
	}
}

// Dst returns the destination IP address; IPv4 addresses are not mapped.
func (p *Packet) Dst() netip.Addr {
	switch {
	case p.Info == nil:
		return netip.Addr{}
	case p.IPv6:
		return netip.AddrFrom16([16]byte(p.Frame[p.L3+ipv6DstAddr:]))
	default:
		return netip.AddrFrom4([4]byte(p.Frame[p.L3+ipv4DstAddr:]))
	}
}

// SrcPort returns the UDP source port, which a UD reply may need.
func (p *Packet) SrcPort() uint16 {
	if p.Info == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p.Frame[p.L4+udpSrcPort:])
}
