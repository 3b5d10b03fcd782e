package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// sendOnly is an IPv4 RC_SEND_ONLY frame with 9 payload bytes and 3 of pad.
func sendOnly(t *testing.T, f PathFields) ([]byte, Path) {
	t.Helper()
	p := mustPath(t, f)
	m := message{BTH: BTHFields{Opcode: RCSendOnly, PKey: DefaultPKey, DestQP: 0x42, PSN: 7}, Payload: payload(9)}
	return build(t, &p, &m), p
}

func TestParseGood(t *testing.T) {
	vlan := v4Path()
	vlan.VLAN, vlan.VLANID, vlan.PCP = true, 100, 3
	vlan6 := v6Path()
	vlan6.VLAN, vlan6.VLANID = true, 4095
	for _, tc := range []struct {
		name string
		f    PathFields
		l3   int
		l4   int
	}{
		{"ipv4", v4Path(), 14, 34},
		{"ipv4 vlan", vlan, 18, 38},
		{"ipv6", v6Path(), 14, 54},
		{"ipv6 vlan", vlan6, 18, 58},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame, _ := sendOnly(t, tc.f)
			var p Packet
			if err := p.Parse(frame); err != nil {
				t.Fatal(err)
			}
			if p.L3 != tc.l3 || p.L4 != tc.l4 || p.BTHOff != tc.l4+8 || p.End != len(frame) || p.IPv6 != tc.f.Src.Is6() {
				t.Fatalf("offsets %+v", p)
			}
			if !bytes.Equal(p.Payload, payload(9)) || cap(p.Payload) != 9 || p.BTH().PadCount() != 3 {
				t.Fatalf("payload %x cap %d pad %d", p.Payload, cap(p.Payload), p.BTH().PadCount())
			}
			if !p.CheckICRC() || p.Src() != tc.f.Src || p.Dst() != tc.f.Dst || p.SrcPort() != tc.f.SrcPort|map[bool]uint16{true: DefaultSourcePort}[tc.f.SrcPort == 0] {
				t.Fatalf("CheckICRC %v src %v dst %v sport %#x", p.CheckICRC(), p.Src(), p.Dst(), p.SrcPort())
			}
			if p.RETH() != nil || p.AETH() != nil || p.DETH() != nil || p.ImmDt() != nil || p.IETH() != nil ||
				p.AtomicETH() != nil || p.AtomicAckETH() != nil {
				t.Fatal("absent headers are not nil")
			}
			if p.Ethernet().VLANID() != tc.f.VLANID || p.Ethernet().PCP() != tc.f.PCP {
				t.Fatal("vlan fields")
			}
			if (p.IPv4Header() == nil) != p.IPv6 || (p.IPv6Header() == nil) == p.IPv6 || !p.UDP().IsValid() {
				t.Fatal("ip views")
			}

			// Ethernet minimum-size padding after the ICRC is ignored.
			padded := append(append([]byte{}, frame...), make([]byte, 20)...)
			if err := p.Parse(padded); err != nil || p.End != len(frame) || !p.CheckICRC() {
				t.Fatalf("padded: %v End %d", err, p.End)
			}

			// A changed payload byte breaks the ICRC, a changed FECN does not.
			frame[len(frame)-ICRCSize-4] ^= 1
			if err := p.Parse(frame); err != nil || p.CheckICRC() {
				t.Fatal("ICRC accepted a changed payload")
			}
			frame[len(frame)-ICRCSize-4] ^= 1
			_ = p.Parse(frame)
			p.BTH().SetFECN(true)
			if !p.CheckICRC() {
				t.Fatal("FECN is covered by the ICRC")
			}
		})
	}
}

func TestParseIPv4Options(t *testing.T) {
	frame, _ := sendOnly(t, v4Path())
	for _, n := range []int{4, 12, 40} {
		ip := withOptions(frame[EthernetSize:], n)
		f := append(append([]byte{}, frame[:EthernetSize]...), ip...)
		var p Packet
		if err := p.Parse(f); err != nil {
			t.Fatalf("%d bytes of options: %v", n, err)
		}
		if p.L4 != EthernetSize+IPv4MinSize+n || !bytes.Equal(p.Payload, payload(9)) || !p.CheckICRC() {
			t.Fatalf("%d bytes of options: L4 %d payload %x icrc %v", n, p.L4, p.Payload, p.CheckICRC())
		}
		if got := len(p.IPv4Header().Options()); got != n {
			t.Fatalf("Options() %d bytes, want %d", got, n)
		}
	}
}

func TestParseTruncated(t *testing.T) {
	for _, f := range []PathFields{v4Path(), v6Path()} {
		f.VLAN = true
		frame, _ := sendOnly(t, f)
		var p Packet
		for n := range len(frame) {
			if err := p.Parse(frame[:n]); err != ErrTruncated {
				t.Errorf("%v: %d of %d bytes: %v, want ErrTruncated", f.Src, n, len(frame), err)
			}
			if p.Info != nil || p.BTH() != nil || p.Payload != nil || p.CheckICRC() {
				t.Errorf("%d bytes: failed Parse left state behind", n)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	v4, _ := sendOnly(t, v4Path())
	v6, _ := sendOnly(t, v6Path())
	ack := func() []byte {
		p := mustPath(t, v4Path())
		return build(t, &p, &message{BTH: BTHFields{Opcode: RCAcknowledge}, Syndrome: AckSyndrome(CreditsInvalid)})
	}()
	empty := func() []byte {
		p := mustPath(t, v4Path())
		return build(t, &p, &message{BTH: BTHFields{Opcode: RCSendOnly}})
	}()
	const ip4, udp4, bth4 = 14, 34, 42
	const ip6, udp6, bth6 = 14, 54, 62
	put16 := func(off int, v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint16(b[off:], v); return b }
	}
	set := func(off int, v byte) func([]byte) []byte {
		return func(b []byte) []byte { b[off] = v; return b }
	}
	for _, tc := range []struct {
		name   string
		frame  []byte
		mangle func([]byte) []byte
		want   error
	}{
		{"arp", v4, put16(12, 0x0806), ErrNotRoCE},
		{"qinq", v4, put16(12, 0x88a8), ErrNotRoCE},
		{"vlan then arp", v4, func(b []byte) []byte {
			b = append(b[:14:14], append([]byte{0, 100, 0x08, 0x06}, b[14:]...)...)
			binary.BigEndian.PutUint16(b[12:], EtherTypeVLAN)
			return b
		}, ErrNotRoCE},
		{"tcp", v4, set(ip4+9, 6), ErrNotRoCE},
		{"ipv4 version 5", v4, set(ip4, 0x55), ErrNotRoCE},
		{"ipv4 ihl 4", v4, set(ip4, 0x44), ErrNotRoCE},
		{"ipv4 more fragments", v4, put16(ip4+6, 0x2000), ErrNotRoCE},
		{"ipv4 fragment offset", v4, put16(ip4+6, 0x4001), ErrNotRoCE},
		{"ipv4 wrong dport", v4, put16(udp4+2, 4792), ErrNotRoCE},
		{"ipv4 sport 4791 dport other", v4, func(b []byte) []byte {
			binary.BigEndian.PutUint16(b[udp4:], UDPPort)
			binary.BigEndian.PutUint16(b[udp4+2:], 53)
			return b
		}, ErrNotRoCE},
		{"ipv6 hop-by-hop", v6, set(ip6+6, 0), ErrNotRoCE},
		{"ipv6 version 4", v6, set(ip6, 0x4a), ErrNotRoCE},
		{"ipv6 wrong dport", v6, put16(udp6+2, 80), ErrNotRoCE},

		{"ipv4 total length > frame", v4, func(b []byte) []byte {
			return put16(ip4+2, uint16(len(b)-ip4+1))(b)
		}, ErrTruncated},
		{"ipv4 total length < frame", v4, func(b []byte) []byte {
			return put16(ip4+2, uint16(len(b)-ip4-4))(b)
		}, ErrBadLength},
		{"ipv4 total length < header+udp", v4, put16(ip4+2, 27), ErrBadLength},
		{"udp length +1", v4, func(b []byte) []byte { return put16(udp4+4, uint16(len(b)-udp4+1))(b) }, ErrBadLength},
		{"udp length -1", v4, func(b []byte) []byte { return put16(udp4+4, uint16(len(b)-udp4-1))(b) }, ErrBadLength},
		{"udp length 0", v4, put16(udp4+4, 0), ErrBadLength},
		{"ipv6 payload length > frame", v6, func(b []byte) []byte { return put16(ip6+4, uint16(len(b)-udp6+1))(b) }, ErrTruncated},
		{"ipv6 payload length < frame", v6, func(b []byte) []byte { return put16(ip6+4, uint16(len(b)-udp6-4))(b) }, ErrBadLength},
		{"ipv6 payload length 7", v6, put16(ip6+4, 7), ErrBadLength},
		{"ipv6 udp length lie", v6, func(b []byte) []byte { return put16(udp6+4, uint16(len(b)-udp6-1))(b) }, ErrBadLength},
		{"no room for bth", v4, func(b []byte) []byte {
			b = b[:bth4+BTHSize+ICRCSize-1]
			put16(ip4+2, uint16(len(b)-ip4))(b)
			return put16(udp4+4, uint16(len(b)-udp4))(b)
		}, ErrBadLength},
		{"no room for reth", v4, set(bth4, uint8(RCWriteOnly)), ErrBadLength},

		{"tver 1", v4, set(bth4+1, 0x01), ErrBadVersion},
		{"tver 15 ipv6", v6, set(bth6+1, 0x0f), ErrBadVersion},
		{"resync", v4, set(bth4, 0x15), ErrBadOpcode},
		{"flush", v4, set(bth4, 0x1c), ErrBadOpcode},
		{"rd send", v4, set(bth4, 0x40), ErrBadOpcode},
		{"0xff", v6, set(bth6, 0xff), ErrBadOpcode},

		{"ack with payload", v4, set(bth4, uint8(RCAcknowledge)), ErrBadLength},
		{"ack with pad", ack, set(bth4+1, 0x10), ErrBadPad},
		{"pad 1 no payload", empty, set(bth4+1, 0x10), ErrBadPad},
		{"pad 3 no payload", empty, set(bth4+1, 0x30), ErrBadPad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := tc.mangle(append([]byte{}, tc.frame...))
			var p Packet
			err := p.Parse(frame)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse: %v, want %v", err, tc.want)
			}
			if p.Info != nil || p.Payload != nil {
				t.Fatal("failed Parse left a parsed state")
			}
		})
	}

	var p Packet
	if err := p.Parse(ack); err != nil || len(p.Payload) != 0 || p.AETH().Syndrome() != 0x1f {
		t.Fatalf("ack: %v", err)
	}
	if err := p.Parse(empty); err != nil || len(p.Payload) != 0 || p.Payload == nil {
		t.Fatalf("empty send: %v %v", err, p.Payload)
	}
}

func TestPacketZero(t *testing.T) {
	var p Packet
	if p.BTH() != nil || p.RETH() != nil || p.Ethernet() != nil || p.UDP() != nil || p.IPv4Header() != nil ||
		p.IPv6Header() != nil || p.ICRC() != 0 || p.ComputeICRC() != 0 || p.CheckICRC() ||
		p.Src() != (netip.Addr{}) || p.Dst() != (netip.Addr{}) || p.SrcPort() != 0 {
		t.Fatal("zero Packet hands out data")
	}
}

func TestParseAllOpcodes(t *testing.T) {
	for _, row := range ibtaOpcodes {
		op := Opcode(row.op)
		for _, f := range []PathFields{v4Path(), v6Path()} {
			p := mustPath(t, f)
			m := message{
				BTH:    BTHFields{Opcode: op, PKey: 0x8001, DestQP: 0xabcdef, PSN: 0x123456, AckReq: true, Solicited: true},
				RETHVA: 1 << 60, RETHRKey: 2, RETHLen: 3, Syndrome: RNRSyndrome(4), MSN: 5,
				AtomVA: 6, AtomRKey: 7, SwapAdd: 8, Compare: 9, OrigData: 10, Imm: 11, IETHRKey: 12, QKey: 13, SrcQP: 14,
			}
			if row.payload {
				m.Payload = payload(int(row.op) + 1)
			}
			frame := build(t, &p, &m)
			var pk Packet
			if err := pk.Parse(frame); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			got := decodeTransport(&pk)
			want := m
			want.BTH.PadCount = uint8(-len(m.Payload) & 3)
			clearAbsent(&want, op.Info())
			if !equalMessages(got, want) {
				t.Errorf("%v: got %+v\nwant %+v", op, got, want)
			}
			if !pk.CheckICRC() {
				t.Errorf("%v: bad ICRC", op)
			}
		}
	}
}

// clearAbsent zeroes the fields of headers op does not carry.
func clearAbsent(m *message, info *OpInfo) {
	if info.RETH == 0 {
		m.RETHVA, m.RETHRKey, m.RETHLen = 0, 0, 0
	}
	if info.AETH == 0 {
		m.Syndrome, m.MSN = 0, 0
	}
	if info.AtomicETH == 0 {
		m.AtomVA, m.AtomRKey, m.SwapAdd, m.Compare = 0, 0, 0, 0
	}
	if info.AtomicAckETH == 0 {
		m.OrigData = 0
	}
	if info.ImmDt == 0 {
		m.Imm = 0
	}
	if info.IETH == 0 {
		m.IETHRKey = 0
	}
	if info.DETH == 0 {
		m.QKey, m.SrcQP = 0, 0
	}
}

func equalMessages(a, b message) bool {
	pa, pb := a.Payload, b.Payload
	a.Payload, b.Payload = nil, nil
	return reflect.DeepEqual(a, b) && bytes.Equal(pa, pb)
}
