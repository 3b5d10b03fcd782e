package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC (IBTA Vol. 1 annex A17, RoCEv2; Linux rxe_icrc.c) is CRC-32 as in
// hash/crc32's IEEE over: eight bytes of 0xff standing for the LRH of native
// InfiniBand, the IP header with the fields routers may change set to ones,
// the UDP header with its checksum set to ones, the BTH with its byte 4
// (FECN, BECN, reserved) set to ones, and the rest of the packet up to the
// ICRC. It is stored as the little-endian bytes of the CRC.
//
// Only the first IP+UDP+BTH bytes need masking. They are copied to a stack
// array and run through our own slicing-by-8 loop: passing a stack array to
// crc32.Update would move it to the heap, since crc32 dispatches through a
// function variable. The payload goes to crc32.Update in place, which uses
// the carry-less multiply path where the CPU has it.

// icrcMaxHeader is the longest masked prefix: an IPv4 header with 40 bytes
// of options, UDP and BTH.
const icrcMaxHeader = IPv4MaxSize + UDPSize + BTHSize

var (
	icrcSeed uint32 // CRC of the eight 0xff bytes
	icrcTab  [8][256]uint32
)

func init() {
	var ff [8]byte
	for i := range ff {
		ff[i] = 0xff
	}
	icrcSeed = crc32.ChecksumIEEE(ff[:])
	icrcTab[0] = *crc32.IEEETable
	for i := range 256 {
		c := icrcTab[0][i]
		for k := 1; k < 8; k++ {
			c = icrcTab[0][c&0xff] ^ c>>8
			icrcTab[k][i] = c
		}
	}
}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p) for short p that must
// stay on the caller's stack.
func crcUpdate(crc uint32, p []byte) uint32 {
	crc = ^crc
	t := &icrcTab
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// ComputeICRC returns the ICRC of a RoCEv2 packet: ipPacket runs from the
// first byte of the IPv4 or IPv6 header (told apart by the version nibble)
// to the last byte before the ICRC. It reads ipPacket without changing it
// and does not allocate. Any input is accepted; a packet too short to hold
// its headers gets the CRC of what there is, masked where it reaches.
func ComputeICRC(ipPacket []byte) uint32 {
	if len(ipPacket) == 0 {
		return crcUpdate(icrcSeed, nil)
	}
	var buf [icrcMaxHeader + 8]byte // slack so the masks below need no checks
	var l4 int
	if ipPacket[0]>>4 == 6 {
		l4 = IPv6Size
	} else {
		l4 = max(int(ipPacket[0]&0xf)*4, IPv4MinSize)
	}
	n := min(l4+UDPSize+BTHSize, len(ipPacket))
	copy(buf[:], ipPacket[:n])
	if l4 == IPv6Size && ipPacket[0]>>4 == 6 {
		buf[0] |= 0x0f // traffic class and flow label
		buf[1], buf[2], buf[3] = 0xff, 0xff, 0xff
		buf[ipv6HopLimit] = 0xff
	} else {
		buf[ipv4TOS] = 0xff
		buf[ipv4TTL] = 0xff
		buf[ipv4Checksum], buf[ipv4Checksum+1] = 0xff, 0xff
	}
	buf[l4+udpChecksum], buf[l4+udpChecksum+1] = 0xff, 0xff
	buf[l4+UDPSize+bthECN] = 0xff
	crc := crcUpdate(icrcSeed, buf[:n])
	return crc32.Update(crc, crc32.IEEETable, ipPacket[n:])
}

// PutICRC computes the ICRC of ipPacket, which includes the 4-byte ICRC
// slot at its end, and stores it there. Short inputs are left alone.
func PutICRC(ipPacket []byte) {
	end := len(ipPacket) - ICRCSize
	if end < 0 {
		return
	}
	binary.LittleEndian.PutUint32(ipPacket[end:], ComputeICRC(ipPacket[:end]))
}
