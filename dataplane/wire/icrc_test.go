package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// referenceICRC is the ICRC computed the plain way: copy the whole packet,
// overwrite the variant fields with ones, prefix eight 0xff bytes, CRC-32.
func referenceICRC(ip []byte) uint32 {
	buf := append(make([]byte, 8, 8+len(ip)), ip...)
	for i := range 8 {
		buf[i] = 0xff
	}
	pkt := buf[8:]
	var l4 int
	if pkt[0]>>4 == 6 {
		pkt[0] |= 0x0f // low nibble of the traffic class
		pkt[1], pkt[2], pkt[3] = 0xff, 0xff, 0xff
		pkt[7] = 0xff // hop limit
		l4 = 40
	} else {
		pkt[1] = 0xff  // TOS
		pkt[8] = 0xff  // TTL
		pkt[10] = 0xff // header checksum
		pkt[11] = 0xff
		l4 = int(pkt[0]&0xf) * 4
	}
	pkt[l4+6], pkt[l4+7] = 0xff, 0xff // UDP checksum
	pkt[l4+8+4] = 0xff                // BTH FECN, BECN, reserved
	return crc32.ChecksumIEEE(buf)
}

func TestICRCReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var f PathFields
		if i%2 == 0 {
			f = v4Path()
		} else {
			f = v6Path()
		}
		f.VLAN = i%3 == 0
		p := mustPath(t, f)
		ops := []Opcode{RCSendOnly, RCWriteFirst, RCAcknowledge, UDSendOnlyImm, RCCompareSwap}
		m := message{BTH: BTHFields{Opcode: ops[i%len(ops)], DestQP: rng.Uint32(), PSN: rng.Uint32(), FECN: rng.IntN(2) == 0}}
		if m.BTH.Opcode.Info().Mask&MaskPayload != 0 {
			m.Payload = make([]byte, rng.IntN(5000))
			for j := range m.Payload {
				m.Payload[j] = byte(rng.Uint32())
			}
		}
		frame := build(t, &p, &m)
		ip := frame[p.Fields().hdrL3():]
		if i%4 == 2 && !p.IsIPv6() {
			ip = withOptions(ip, rng.IntN(11)*4)
		}
		body := ip[:len(ip)-ICRCSize]
		if got, want := ComputeICRC(body), referenceICRC(body); got != want {
			t.Fatalf("case %d: ComputeICRC %#08x, reference %#08x", i, got, want)
		}
	}
}

// hdrL3 returns where the IP header starts in a frame built for f.
func (f PathFields) hdrL3() int {
	if f.VLAN {
		return EthernetSize + VLANSize
	}
	return EthernetSize
}

// withOptions returns a copy of the IPv4 packet ip with n bytes of NOP
// options inserted after the fixed header, lengths and ICRC fixed up.
func withOptions(ip []byte, n int) []byte {
	out := make([]byte, 0, len(ip)+n)
	out = append(out, ip[:IPv4MinSize]...)
	for range n {
		out = append(out, 1) // NOP
	}
	out = append(out, ip[IPv4MinSize:]...)
	out[0] = 0x40 | byte((IPv4MinSize+n)/4)
	IPv4(out).SetTotalLength(uint16(len(out)))
	IPv4(out).SetChecksum(IPv4(out).CalculateChecksum())
	PutICRC(out)
	return out
}

// TestICRCMaskedFields flips every bit of a packet in turn: the ICRC must
// ignore exactly the fields routers and switches may rewrite.
func TestICRCMaskedFields(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      PathFields
		masked func(i, bit int) bool
	}{
		{"ipv4", v4Path(), func(i, bit int) bool {
			return i == 1 || i == 8 || i == 10 || i == 11 || i == 20+6 || i == 20+7 || i == 28+4
		}},
		{"ipv6", v6Path(), func(i, bit int) bool {
			return (i == 0 && bit < 4) || i == 1 || i == 2 || i == 3 || i == 7 || i == 46 || i == 47 || i == 48+4
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPath(t, tc.f)
			m := message{BTH: BTHFields{Opcode: RCWriteOnlyImm, DestQP: 0x1234, PSN: 77, PKey: DefaultPKey}, Imm: 5, Payload: payload(33)}
			frame := build(t, &p, &m)
			ip := frame[EthernetSize : len(frame)-ICRCSize]
			base := ComputeICRC(ip)
			for i := range ip {
				for bit := range 8 {
					ip[i] ^= 1 << bit
					got := ComputeICRC(ip)
					ip[i] ^= 1 << bit
					if changed := got != base; changed == tc.masked(i, bit) {
						t.Errorf("byte %d bit %d: ICRC changed %v, masked %v", i, bit, changed, tc.masked(i, bit))
					}
				}
			}
		})
	}
}

// TestICRCIPv6Variants rebuilds the same packet with other traffic class,
// flow label and hop limit: the ICRC must not move.
func TestICRCIPv6Variants(t *testing.T) {
	m := message{BTH: BTHFields{Opcode: UDSendOnly, DestQP: 9, PSN: 1}, QKey: 0x11111111, SrcQP: 3, Payload: payload(100)}
	var want uint32
	for i, v := range []struct {
		tc  uint8
		fl  uint32
		hop uint8
	}{{0, 0, 64}, {0xff, 0xfffff, 1}, {0x02, 0x12345, 255}, {0xb8, 1, 2}} {
		f := v6Path()
		f.TrafficClass, f.FlowLabel, f.HopLimit = v.tc, v.fl, v.hop
		p := mustPath(t, f)
		frame := build(t, &p, &m)
		var pk Packet
		if err := pk.Parse(frame); err != nil || !pk.CheckICRC() {
			t.Fatalf("variant %d: Parse %v, CheckICRC %v", i, err, pk.CheckICRC())
		}
		if i == 0 {
			want = pk.ICRC()
		} else if pk.ICRC() != want {
			t.Errorf("variant %+v: ICRC %#08x, want %#08x", v, pk.ICRC(), want)
		}
	}
}

func TestICRCShortInputs(t *testing.T) {
	// Any input must be accepted; check agreement with the reference where
	// the reference can index, and no panic elsewhere.
	frame := func() []byte {
		p := mustPath(t, v6Path())
		return build(t, &p, &message{BTH: BTHFields{Opcode: RCSendOnly}, Payload: payload(8)})
	}()
	ip := frame[EthernetSize:]
	for n := range len(ip) {
		got := ComputeICRC(ip[:n])
		if n >= IPv6Size+UDPSize+BTHSize {
			if want := referenceICRC(ip[:n]); got != want {
				t.Errorf("len %d: %#08x, want %#08x", n, got, want)
			}
		}
	}
	for _, b := range [][]byte{nil, {0x4f}, {0x40}, {0x60, 1}, make([]byte, 100)} {
		ComputeICRC(b)
	}
	PutICRC([]byte{1, 2, 3})
	// The crc of nothing after the LRH stand-in is the seed itself.
	if ComputeICRC(nil) != crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		t.Error("ComputeICRC(nil)")
	}
}

func TestPutICRC(t *testing.T) {
	p := mustPath(t, v4Path())
	frame := build(t, &p, &message{BTH: BTHFields{Opcode: RCSendOnly}, Payload: payload(20)})
	ip := frame[EthernetSize:]
	want := binary.LittleEndian.Uint32(ip[len(ip)-4:])
	clear(ip[len(ip)-4:])
	PutICRC(ip)
	if got := binary.LittleEndian.Uint32(ip[len(ip)-4:]); got != want {
		t.Fatalf("PutICRC %#08x, Finish %#08x", got, want)
	}
}
