package wire

import (
	"encoding/binary"
	"net/netip"
)

const (
	ipv6VerTCFlow   = 0
	ipv6PayloadLen  = 4
	ipv6NextHeader  = 6
	ipv6HopLimit    = 7
	ipv6SrcAddr     = 8
	ipv6DstAddr     = 24
	ipv6FlowLabelMx = 0xfffff
)

// IPv6 is an IPv6 fixed header and what follows it.
type IPv6 []byte

// IPv6Fields describes an IPv6 header for Encode.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32 // 20 bits
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      netip.Addr
}

// IsValid reports whether b starts with an IPv6 header whose payload fits
// in b.
func (b IPv6) IsValid() bool {
	return len(b) >= IPv6Size && b[ipv6VerTCFlow]>>4 == 6 && IPv6Size+int(b.PayloadLength()) <= len(b)
}

// TrafficClass returns the traffic class: DSCP and ECN.
func (b IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(b[ipv6VerTCFlow:]) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(b[ipv6VerTCFlow:]) & ipv6FlowLabelMx }

// PayloadLength returns the length of what follows the fixed header.
func (b IPv6) PayloadLength() uint16 { return binary.BigEndian.Uint16(b[ipv6PayloadLen:]) }

// NextHeader returns the type of the header that follows.
func (b IPv6) NextHeader() uint8 { return b[ipv6NextHeader] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[ipv6HopLimit] }

// SourceAddress returns the source address.
func (b IPv6) SourceAddress() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6SrcAddr:])) }

// DestinationAddress returns the destination address.
func (b IPv6) DestinationAddress() netip.Addr { return netip.AddrFrom16([16]byte(b[ipv6DstAddr:])) }

// Payload returns what follows the fixed header, up to the payload length.
func (b IPv6) Payload() []byte { return b[IPv6Size : IPv6Size+int(b.PayloadLength())] }

// SetPayloadLength sets the payload length field.
func (b IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(b[ipv6PayloadLen:], n) }

// Encode writes the header described by f; b must have room for IPv6Size
// bytes. IPv4 addresses are written in their IPv4-mapped form.
func (b IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(b[ipv6VerTCFlow:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&ipv6FlowLabelMx)
	binary.BigEndian.PutUint16(b[ipv6PayloadLen:], f.PayloadLength)
	b[ipv6NextHeader] = f.NextHeader
	b[ipv6HopLimit] = f.HopLimit
	src, dst := f.Src.As16(), f.Dst.As16()
	copy(b[ipv6SrcAddr:], src[:])
	copy(b[ipv6DstAddr:], dst[:])
}
