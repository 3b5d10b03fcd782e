package mad

import "encoding/binary"

// Fields of IBTA CM messages are big-endian and often share a byte or a
// word; these helpers name the few shapes they come in.

func get16(b []byte, off int) uint16 { return binary.BigEndian.Uint16(b[off:]) }
func get32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
func get64(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }

func put16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }
func put32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func put64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }

const mask24 = 1<<24 - 1

// get24 reads the 24 most significant bits of the big-endian word at off:
// how IBTA lays out QPNs, EECNs and PSNs.
func get24(b []byte, off int) uint32 { return get32(b, off) >> 8 }

// put24 writes the 24 most significant bits of the word at off, keeping its
// low byte.
func put24(b []byte, off int, v uint32) {
	put32(b, off, v<<8|uint32(b[off+3]))
}

// bits reads width bits of b[off] that sit shift bits above its least
// significant bit.
func bits(b []byte, off int, shift, width uint) uint8 {
	return b[off] >> shift & (1<<width - 1)
}

// setBits writes width bits of b[off] at shift, keeping the others.
func setBits(b []byte, off int, shift, width uint, v uint8) {
	m := uint8(1<<width-1) << shift
	b[off] = b[off]&^m | v<<shift&m
}

func flag(b []byte, off int, mask uint8) bool { return b[off]&mask != 0 }

func setFlag(b []byte, off int, mask uint8, v bool) {
	if v {
		b[off] |= mask
	} else {
		b[off] &^= mask
	}
}

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// gid copies the 16-byte GID at off.
func gid(b []byte, off int) (g [16]byte) {
	copy(g[:], b[off:off+16])
	return g
}
