package wire

import (
	"encoding/binary"
	"net/netip"
)

const (
	ipv4VerIHL    = 0
	ipv4TOS       = 1
	ipv4TotalLen  = 2
	ipv4ID        = 4
	ipv4FlagsFO   = 6
	ipv4TTL       = 8
	ipv4Protocol  = 9
	ipv4Checksum  = 10
	ipv4SrcAddr   = 12
	ipv4DstAddr   = 16
	ipv4Options   = 20
	ipv4FlagShift = 13
)

// IPv4 flags, as returned by IPv4.Flags.
const (
	IPv4FlagMoreFragments = 1 << 0
	IPv4FlagDontFragment  = 1 << 1
)

// IPv4 is an IPv4 header, possibly with options, and what follows it.
type IPv4 []byte

// IPv4Fields describes an IPv4 header for Encode.
type IPv4Fields struct {
	TOS            uint8
	TotalLength    uint16
	ID             uint16
	Flags          uint8  // IPv4FlagDontFragment, IPv4FlagMoreFragments
	FragmentOffset uint16 // in bytes; a multiple of 8
	TTL            uint8
	Protocol       uint8
	Checksum       uint16 // written as given; see IPv4.CalculateChecksum
	Src, Dst       netip.Addr
	Options        []byte // padded with zeros to a multiple of 4 bytes, at most 40
}

// IsValid reports whether b starts with a well-formed IPv4 header whose
// total length fits in b.
func (b IPv4) IsValid() bool {
	if len(b) < IPv4MinSize || b[ipv4VerIHL]>>4 != 4 {
		return false
	}
	hl := int(b.HeaderLength())
	tl := int(b.TotalLength())
	return hl >= IPv4MinSize && hl <= len(b) && tl >= hl && tl <= len(b)
}

// HeaderLength returns the length of the header, options included.
func (b IPv4) HeaderLength() uint8 { return (b[ipv4VerIHL] & 0xf) * 4 }

// TOS returns the type of service byte: DSCP and ECN.
func (b IPv4) TOS() uint8 { return b[ipv4TOS] }

// TotalLength returns the length of the header and payload.
func (b IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(b[ipv4TotalLen:]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[ipv4ID:]) }

// Flags returns the three flag bits.
func (b IPv4) Flags() uint8 { return uint8(binary.BigEndian.Uint16(b[ipv4FlagsFO:]) >> ipv4FlagShift) }

// DF reports whether the don't-fragment flag is set.
func (b IPv4) DF() bool { return b.Flags()&IPv4FlagDontFragment != 0 }

// FragmentOffset returns the fragment offset in bytes.
func (b IPv4) FragmentOffset() uint16 { return binary.BigEndian.Uint16(b[ipv4FlagsFO:]) << 3 }

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[ipv4TTL] }

// Protocol returns the protocol of the payload.
func (b IPv4) Protocol() uint8 { return b[ipv4Protocol] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[ipv4Checksum:]) }

// SourceAddress returns the source address.
func (b IPv4) SourceAddress() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4SrcAddr:])) }

// DestinationAddress returns the destination address.
func (b IPv4) DestinationAddress() netip.Addr { return netip.AddrFrom4([4]byte(b[ipv4DstAddr:])) }

// Options returns the options, empty when there are none.
func (b IPv4) Options() []byte { return b[ipv4Options:b.HeaderLength()] }

// Payload returns what follows the header, up to the total length.
func (b IPv4) Payload() []byte { return b[b.HeaderLength():b.TotalLength()] }

// SetTotalLength sets the total length field.
func (b IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(b[ipv4TotalLen:], n) }

// SetChecksum sets the checksum field.
func (b IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[ipv4Checksum:], c) }

// CalculateChecksum returns the checksum the header should carry: the ones'
// complement of the ones' complement sum of the header with the checksum
// field taken as zero.
func (b IPv4) CalculateChecksum() uint16 {
	hdr := b[:b.HeaderLength()]
	sum := checksumAdd(0, hdr[:ipv4Checksum])
	sum = checksumAdd(sum, hdr[ipv4Checksum+2:])
	return ^checksumFold(sum)
}

// IsChecksumValid reports whether the header checksum is correct.
func (b IPv4) IsChecksumValid() bool {
	return checksumFold(checksumAdd(0, b[:b.HeaderLength()])) == 0xffff
}

// Encode writes the header described by f; b must have room for
// IPv4MinSize plus the padded options. Src and Dst must be IPv4 addresses.
func (b IPv4) Encode(f *IPv4Fields) {
	opts := min(len(f.Options), IPv4MaxSize-IPv4MinSize)
	hl := IPv4MinSize + (opts+3)&^3
	b[ipv4VerIHL] = 4<<4 | uint8(hl/4)
	b[ipv4TOS] = f.TOS
	binary.BigEndian.PutUint16(b[ipv4TotalLen:], f.TotalLength)
	binary.BigEndian.PutUint16(b[ipv4ID:], f.ID)
	binary.BigEndian.PutUint16(b[ipv4FlagsFO:], uint16(f.Flags)<<ipv4FlagShift|f.FragmentOffset>>3&0x1fff)
	b[ipv4TTL] = f.TTL
	b[ipv4Protocol] = f.Protocol
	binary.BigEndian.PutUint16(b[ipv4Checksum:], f.Checksum)
	src, dst := f.Src.As4(), f.Dst.As4()
	copy(b[ipv4SrcAddr:], src[:])
	copy(b[ipv4DstAddr:], dst[:])
	n := copy(b[ipv4Options:hl], f.Options[:opts])
	clear(b[ipv4Options+n : hl])
}
