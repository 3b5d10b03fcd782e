package wire

import "encoding/binary"

const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// UDP is a UDP header and what follows it.
type UDP []byte

// UDPFields describes a UDP header for Encode.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16
	Checksum         uint16 // RoCEv2 sends 0
}

// IsValid reports whether b starts with a UDP header whose length field is
// consistent and fits in b.
func (b UDP) IsValid() bool {
	return len(b) >= UDPSize && int(b.Length()) >= UDPSize && int(b.Length()) <= len(b)
}

// SourcePort returns the source port.
func (b UDP) SourcePort() uint16 { return binary.BigEndian.Uint16(b[udpSrcPort:]) }

// DestinationPort returns the destination port.
func (b UDP) DestinationPort() uint16 { return binary.BigEndian.Uint16(b[udpDstPort:]) }

// Length returns the length of the header and payload.
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[udpLength:]) }

// Checksum returns the checksum field.
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[udpChecksum:]) }

// SetLength sets the length field.
func (b UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(b[udpLength:], n) }

// Encode writes the header described by f; b must have room for UDPSize
// bytes.
func (b UDP) Encode(f *UDPFields) {
	binary.BigEndian.PutUint16(b[udpSrcPort:], f.SrcPort)
	binary.BigEndian.PutUint16(b[udpDstPort:], f.DstPort)
	binary.BigEndian.PutUint16(b[udpLength:], f.Length)
	binary.BigEndian.PutUint16(b[udpChecksum:], f.Checksum)
}
