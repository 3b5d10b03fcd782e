package wire

import "encoding/binary"

// checksumAdd adds b to the ones' complement sum in progress; an odd last
// byte is padded with zero as RFC 1071 says.
func checksumAdd(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

// checksumFold folds a 32-bit ones' complement sum to 16 bits.
func checksumFold(sum uint32) uint16 {
	sum = sum>>16 + sum&0xffff
	sum += sum >> 16
	return uint16(sum)
}
