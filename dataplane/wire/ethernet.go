package wire

import "encoding/binary"

const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
	vlanTCI = 14 // tag control information of an 802.1Q tag
	vlanIn  = 16 // EtherType behind the tag
)

// Ethernet is an Ethernet II header, optionally followed by one 802.1Q tag.
type Ethernet []byte

// EthernetFields describes an Ethernet header for Encode.
type EthernetFields struct {
	Dst, Src  [6]byte
	VLAN      bool   // insert an 802.1Q tag
	VLANID    uint16 // 12 bits
	PCP       uint8  // 3 bits
	EtherType uint16 // of the payload, behind the tag if any
}

// IsValid reports whether b holds a whole header, tag included.
func (b Ethernet) IsValid() bool {
	return len(b) >= EthernetSize && len(b) >= b.HeaderLen()
}

// Dst returns the destination MAC address.
func (b Ethernet) Dst() [6]byte { return [6]byte(b[ethDst:]) }

// Src returns the source MAC address.
func (b Ethernet) Src() [6]byte { return [6]byte(b[ethSrc:]) }

// HasVLAN reports whether the header carries an 802.1Q tag.
func (b Ethernet) HasVLAN() bool { return binary.BigEndian.Uint16(b[ethType:]) == EtherTypeVLAN }

// VLANID returns the VLAN identifier, 0 when untagged.
func (b Ethernet) VLANID() uint16 {
	if !b.HasVLAN() {
		return 0
	}
	return binary.BigEndian.Uint16(b[vlanTCI:]) & 0x0fff
}

// PCP returns the 802.1p priority, 0 when untagged.
func (b Ethernet) PCP() uint8 {
	if !b.HasVLAN() {
		return 0
	}
	return b[vlanTCI] >> 5
}

// EtherType returns the type of the payload, looking past a VLAN tag.
func (b Ethernet) EtherType() uint16 {
	if b.HasVLAN() {
		return binary.BigEndian.Uint16(b[vlanIn:])
	}
	return binary.BigEndian.Uint16(b[ethType:])
}

// HeaderLen returns the length of the header, tag included.
func (b Ethernet) HeaderLen() int {
	if b.HasVLAN() {
		return EthernetSize + VLANSize
	}
	return EthernetSize
}

// Encode writes the header described by f; b must have room for it
// (EthernetSize, plus VLANSize with a tag).
func (b Ethernet) Encode(f *EthernetFields) {
	copy(b[ethDst:], f.Dst[:])
	copy(b[ethSrc:], f.Src[:])
	if f.VLAN {
		binary.BigEndian.PutUint16(b[ethType:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(b[vlanTCI:], uint16(f.PCP&7)<<13|f.VLANID&0x0fff)
		binary.BigEndian.PutUint16(b[vlanIn:], f.EtherType)
		return
	}
	binary.BigEndian.PutUint16(b[ethType:], f.EtherType)
}

// EUI64 is the modified EUI-64 interface identifier of a MAC address
// (RFC 4291 appendix A): the universal/local bit flipped and ff:fe in the
// middle. It is the low half of a RoCE device's default (link-local) GID,
// and rxe's node GUID.
func EUI64(mac [6]byte) [8]byte {
	return [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}
