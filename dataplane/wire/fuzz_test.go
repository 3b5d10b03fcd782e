package wire

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"
)

// addSeeds seeds f with the known-answer frames when they are available;
// TestVectors reports when they are not.
func addSeeds(f *testing.F) {
	vs, _ := readVectors()
	for _, v := range vs {
		f.Add(v.frame)
	}
}

func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Add([]byte{})
	vlan6 := v6Path()
	vlan6.VLAN = true
	for _, pf := range []PathFields{v4Path(), vlan6} {
		p := mustPath(f, pf)
		for _, op := range []Opcode{RCAtomicAcknowledge, UDSendOnlyImm, RCSendLastInv, CNP} {
			m := message{BTH: BTHFields{Opcode: op}}
			if op.Info().Mask&MaskPayload != 0 {
				m.Payload = payload(5)
			}
			frame := build(f, &p, &m)
			f.Add(frame)
			if !pf.Src.Is6() {
				f.Add(withOptions(frame[EthernetSize:], 8)) // no Ethernet header: must fail cleanly
				f.Add(append(frame[:EthernetSize:EthernetSize], withOptions(frame[EthernetSize:], 8)...))
			}
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p Packet
		if err := p.Parse(frame); err != nil {
			if p.Info != nil || p.BTH() != nil || p.Payload != nil || p.CheckICRC() {
				t.Fatal("failed Parse left a parsed state")
			}
			return
		}
		if p.Info == nil || p.Info != p.Opcode.Info() || !p.Opcode.Valid() {
			t.Fatal("Info")
		}
		if !(EthernetSize <= p.L3 && p.L3 < p.L4 && p.L4+UDPSize == p.BTHOff &&
			p.BTHOff+p.Info.HeaderLen+len(p.Payload)+p.BTH().PadCount()+ICRCSize == p.End && p.End <= len(frame)) {
			t.Fatalf("offsets out of order: %+v", p)
		}
		if len(p.Payload) > 0 {
			start := int(uintptr(unsafe.Pointer(unsafe.SliceData(p.Payload))) - uintptr(unsafe.Pointer(unsafe.SliceData(frame))))
			if start != p.BTHOff+p.Info.HeaderLen || start+cap(p.Payload) > p.End-ICRCSize {
				t.Fatalf("payload at %d cap %d outside the frame", start, cap(p.Payload))
			}
		}
		if !p.Ethernet().IsValid() || !p.UDP().IsValid() || !p.BTH().IsValid() {
			t.Fatal("invalid view")
		}
		if p.IPv6 {
			if !p.IPv6Header().IsValid() || p.IPv4Header() != nil {
				t.Fatal("ipv6 view")
			}
		} else if !p.IPv4Header().IsValid() || p.IPv6Header() != nil {
			t.Fatal("ipv4 view")
		}
		// Every header view must be in bounds and readable.
		if h := p.RETH(); h != nil {
			_ = h.VA() + uint64(h.RKey()+h.DMALen())
		}
		if h := p.AETH(); h != nil {
			_ = h.MSN() + uint32(h.Syndrome())
		}
		if h := p.AtomicETH(); h != nil {
			_ = h.VA() + h.SwapAdd() + h.Compare() + uint64(h.RKey())
		}
		if h := p.AtomicAckETH(); h != nil {
			_ = h.OrigData()
		}
		if h := p.ImmDt(); h != nil {
			_ = h.Imm()
		}
		if h := p.IETH(); h != nil {
			_ = h.RKey()
		}
		if h := p.DETH(); h != nil {
			_ = h.QKey() + h.SrcQP()
		}
		_ = p.BTH().Fields()
		_, _, _ = p.Src(), p.Dst(), p.SrcPort()
		_ = p.CheckICRC()
	})
}

// reader hands out fuzz bytes as field values, zeros once they run out.
type reader []byte

func (r *reader) u8() uint8 {
	if len(*r) == 0 {
		return 0
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v
}

func (r *reader) u16() uint16 { return uint16(r.u8())<<8 | uint16(r.u8()) }
func (r *reader) u32() uint32 { return uint32(r.u16())<<16 | uint32(r.u16()) }
func (r *reader) u64() uint64 { return uint64(r.u32())<<32 | uint64(r.u32()) }
func (r *reader) bool() bool  { return r.u8()&1 != 0 }

func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17"))
	f.Add(binary.BigEndian.AppendUint64(make([]byte, 90), 0xfedcba9876543210))
	for i := range ibtaOpcodes {
		f.Add([]byte{byte(i), 0xff, 0x80, 0x01, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, byte(i * 37)})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := reader(data)
		row := ibtaOpcodes[int(r.u8())%len(ibtaOpcodes)]
		pf := PathFields{
			SrcMAC:       [6]byte{r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()},
			DstMAC:       [6]byte{r.u8(), r.u8(), r.u8(), r.u8(), r.u8(), r.u8()},
			TrafficClass: r.u8(),
			HopLimit:     r.u8(),
			SrcPort:      r.u16(),
		}
		if r.bool() {
			pf.VLAN, pf.VLANID, pf.PCP = true, r.u16()&0xfff, r.u8()&7
		}
		if r.bool() {
			pf.Src = netip.AddrFrom4([4]byte{r.u8(), r.u8(), r.u8(), r.u8()})
			pf.Dst = netip.AddrFrom4([4]byte{r.u8(), r.u8(), r.u8(), r.u8()})
		} else {
			var s, d [16]byte
			for i := range s {
				s[i], d[i] = r.u8(), r.u8()
			}
			pf.Src, pf.Dst = netip.AddrFrom16(s).Unmap(), netip.AddrFrom16(d).Unmap()
			if pf.Src.Is4() != pf.Dst.Is4() {
				return // NewPath refuses mixed families; tested elsewhere
			}
			if pf.Src.Is6() {
				pf.FlowLabel = r.u32() & 0xfffff
			}
		}
		path, err := NewPath(pf)
		if err != nil {
			t.Fatalf("NewPath(%+v): %v", pf, err)
		}
		m := message{
			BTH: BTHFields{
				Opcode: Opcode(row.op), Solicited: r.bool(), MigReq: r.bool(), PKey: r.u16(),
				FECN: r.bool(), BECN: r.bool(), DestQP: r.u32() & mask24, AckReq: r.bool(), PSN: r.u32() & mask24,
			},
			RETHVA: r.u64(), RETHRKey: r.u32(), RETHLen: r.u32(), Syndrome: r.u8(), MSN: r.u32() & mask24,
			AtomVA: r.u64(), AtomRKey: r.u32(), SwapAdd: r.u64(), Compare: r.u64(), OrigData: r.u64(),
			Imm: r.u32(), IETHRKey: r.u32(), QKey: r.u32(), SrcQP: r.u32() & mask24,
			ExtraTail: int(r.u8() % 64),
		}
		if row.payload {
			m.Payload = []byte(r)
		}
		frame := build(t, &path, &m)
		var p Packet
		if err := p.Parse(frame); err != nil {
			t.Fatalf("Parse of a built %v frame: %v", m.BTH.Opcode, err)
		}
		want := m
		want.ExtraTail = 0
		want.BTH.PadCount = uint8(-len(m.Payload) & 3)
		clearAbsent(&want, m.BTH.Opcode.Info())
		got := decodeTransport(&p)
		if !equalMessages(got, want) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, want)
		}
		if !p.CheckICRC() || p.End != len(frame)-m.ExtraTail {
			t.Fatalf("CheckICRC %v End %d len %d", p.CheckICRC(), p.End, len(frame))
		}
		if p.Src() != pf.Src || p.Dst() != pf.Dst {
			t.Fatalf("addresses %v %v", p.Src(), p.Dst())
		}
		if !p.IPv6 && !p.IPv4Header().IsChecksumValid() {
			t.Fatal("bad IPv4 checksum")
		}
		back, err := NewPath(path.Fields())
		if err != nil || back != path {
			t.Fatalf("NewPath(Fields()) differs: %v", err)
		}
	})
}
