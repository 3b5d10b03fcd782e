package wire

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

func TestSyndromes(t *testing.T) {
	for _, tc := range []struct {
		s     uint8
		kind  AckKind
		value uint8
	}{
		{AckSyndrome(CreditsInvalid), AckKindACK, 0x1f},
		{AckSyndrome(3), AckKindACK, 3},
		{RNRSyndrome(14), AckKindRNR, 14},
		{NAKSyndrome(NAKPSNSeqErr), AckKindNAK, 0},
		{NAKSyndrome(NAKInvalidRequest), AckKindNAK, 1},
		{NAKSyndrome(NAKRemoteAccessErr), AckKindNAK, 2},
		{NAKSyndrome(NAKRemoteOpErr), AckKindNAK, 3},
		{NAKSyndrome(NAKInvalidRDRequest), AckKindNAK, 4},
	} {
		if SyndromeKind(tc.s) != tc.kind || SyndromeValue(tc.s) != tc.value || tc.s&0x80 != 0 {
			t.Errorf("syndrome %#02x: kind %d value %d, want %d %d", tc.s, SyndromeKind(tc.s), SyndromeValue(tc.s), tc.kind, tc.value)
		}
	}
	// Bytes as rxe puts them on the wire: ACK 0x1f, RNR 0x20|t, NAK 0x60|c.
	if AckSyndrome(CreditsInvalid) != 0x1f || RNRSyndrome(1) != 0x21 || NAKSyndrome(NAKRemoteAccessErr) != 0x62 {
		t.Error("syndrome encodings differ from the IBTA AETH syndrome layout")
	}
	if SyndromeKind(0x40) != AckKindReserved {
		t.Error("0x40 should be the reserved kind")
	}
}

func TestRNRTimer(t *testing.T) {
	ms := []float64{
		655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48,
		0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48,
		30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
	}
	for code, want := range ms {
		w := time.Duration(want*1000+0.5) * time.Microsecond
		if got := RNRTimer(uint8(code)); got != w {
			t.Errorf("RNRTimer(%d) = %v, want %v", code, got, w)
		}
	}
	if RNRTimer(0x20|5) != RNRTimer(5) {
		t.Error("RNRTimer must ignore bits above the five-bit code")
	}
}

func TestBTHFields(t *testing.T) {
	f := BTHFields{
		Opcode: RCWriteFirst, Solicited: true, MigReq: true, PadCount: 3, TVer: 0,
		PKey: 0x8001, FECN: true, BECN: false, DestQP: 0xabcdef, AckReq: true, PSN: 0xfedcba,
	}
	b := make(BTH, BTHSize)
	b.Encode(&f)
	want := []byte{0x06, 0xf0, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef, 0x80, 0xfe, 0xdc, 0xba}
	if !bytes.Equal(b, want) {
		t.Fatalf("Encode: %x, want %x", []byte(b), want)
	}
	if got := b.Fields(); got != f {
		t.Fatalf("Fields: %+v, want %+v", got, f)
	}
	b.SetPSN(0x1000001)
	b.SetAckReq(false)
	b.SetBECN(true)
	b.SetFECN(false)
	b.SetDestQP(0x123456)
	if b.PSN() != 1 || b.AckReq() || !b.BECN() || b.FECN() || b.DestQP() != 0x123456 || b.PKey() != 0x8001 {
		t.Fatalf("setters: %+v", b.Fields())
	}
	b.SetAckReq(true)
	if b.PSN() != 1 || !b.AckReq() {
		t.Fatal("SetAckReq changed the PSN")
	}
	if !b.IsValid() || BTH(b[:11]).IsValid() {
		t.Error("IsValid")
	}
}

func TestExtHeaders(t *testing.T) {
	r := make(RETH, RETHSize)
	r.Encode(0x0102030405060708, 0x0a0b0c0d, 0x10203040)
	if r.VA() != 0x0102030405060708 || r.RKey() != 0x0a0b0c0d || r.DMALen() != 0x10203040 || r[0] != 1 {
		t.Error("RETH")
	}
	a := make(AETH, AETHSize)
	a.Encode(NAKSyndrome(NAKRemoteOpErr), 0x1abcdef)
	if a.Syndrome() != 0x63 || a.MSN() != 0xabcdef {
		t.Error("AETH")
	}
	at := make(AtomicETH, AtomicETHSize)
	at.Encode(1<<63|5, 7, 1<<40|9, 1<<50|11)
	if at.VA() != 1<<63|5 || at.RKey() != 7 || at.SwapAdd() != 1<<40|9 || at.Compare() != 1<<50|11 {
		t.Error("AtomicETH")
	}
	aa := make(AtomicAckETH, AtomicAckETHSize)
	aa.Encode(0xdeadbeefcafe)
	if aa.OrigData() != 0xdeadbeefcafe {
		t.Error("AtomicAckETH")
	}
	im := make(ImmDt, ImmDtSize)
	im.Encode(0x11223344)
	if im.Imm() != 0x11223344 || im[0] != 0x11 {
		t.Error("ImmDt")
	}
	ie := make(IETH, IETHSize)
	ie.Encode(0x55667788)
	if ie.RKey() != 0x55667788 {
		t.Error("IETH")
	}
	d := make(DETH, DETHSize)
	d.Encode(0x80010000, 0xff000001)
	if d.QKey() != 0x80010000 || d.SrcQP() != 1 || d[4] != 0 {
		t.Error("DETH")
	}
	for _, ok := range []bool{r.IsValid(), a.IsValid(), at.IsValid(), aa.IsValid(), im.IsValid(), ie.IsValid(), d.IsValid(),
		!RETH(r[:15]).IsValid(), !AETH(a[:3]).IsValid(), !AtomicETH(at[:27]).IsValid(), !AtomicAckETH(aa[:7]).IsValid(),
		!ImmDt(im[:3]).IsValid(), !IETH(ie[:3]).IsValid(), !DETH(d[:7]).IsValid()} {
		if !ok {
			t.Error("IsValid")
		}
	}
}

func TestEthernet(t *testing.T) {
	for _, f := range []EthernetFields{
		{Dst: [6]byte{1, 2, 3, 4, 5, 6}, Src: [6]byte{7, 8, 9, 10, 11, 12}, EtherType: EtherTypeIPv6},
		{Dst: [6]byte{1, 2, 3, 4, 5, 6}, Src: [6]byte{7, 8, 9, 10, 11, 12}, VLAN: true, VLANID: 0xabc, PCP: 5, EtherType: EtherTypeIPv4},
	} {
		b := make(Ethernet, 18)
		b.Encode(&f)
		got := EthernetFields{Dst: b.Dst(), Src: b.Src(), VLAN: b.HasVLAN(), VLANID: b.VLANID(), PCP: b.PCP(), EtherType: b.EtherType()}
		if got != f || !b.IsValid() {
			t.Errorf("round trip %+v -> %+v", f, got)
		}
		if want := map[bool]int{false: 14, true: 18}[f.VLAN]; b.HeaderLen() != want || Ethernet(b[:want-1]).IsValid() {
			t.Errorf("HeaderLen %d / IsValid on short", b.HeaderLen())
		}
	}
	if Ethernet(nil).IsValid() {
		t.Error("nil Ethernet valid")
	}
}

func TestIPv4View(t *testing.T) {
	f := IPv4Fields{
		TOS: 0x8a, TotalLength: 40, ID: 0x1234, Flags: IPv4FlagDontFragment, FragmentOffset: 0,
		TTL: 3, Protocol: ProtocolUDP, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		Options: []byte{1, 1, 1}, // padded to 4
	}
	b := make(IPv4, 40)
	b.Encode(&f)
	b.SetChecksum(b.CalculateChecksum())
	if b.HeaderLength() != 24 || !bytes.Equal(b.Options(), []byte{1, 1, 1, 0}) || !b.IsValid() || !b.IsChecksumValid() {
		t.Fatalf("header %x", []byte(b))
	}
	if b.TOS() != 0x8a || b.TotalLength() != 40 || b.ID() != 0x1234 || !b.DF() || b.FragmentOffset() != 0 ||
		b.TTL() != 3 || b.Protocol() != ProtocolUDP || b.SourceAddress() != f.Src || b.DestinationAddress() != f.Dst ||
		len(b.Payload()) != 16 {
		t.Fatal("getters")
	}
	f.Flags, f.FragmentOffset, f.Options = IPv4FlagMoreFragments, 1480, nil
	b.Encode(&f)
	if b.HeaderLength() != 20 || b.Flags() != IPv4FlagMoreFragments || b.FragmentOffset() != 1480 || b.DF() {
		t.Fatal("fragment fields")
	}
	b[ipv4TTL]++
	if b.IsChecksumValid() {
		t.Fatal("checksum still valid after a change")
	}
	b.SetTotalLength(41)
	if b.IsValid() {
		t.Fatal("total length beyond the slice accepted")
	}
}

func TestIPv6View(t *testing.T) {
	f := IPv6Fields{
		TrafficClass: 0xa5, FlowLabel: 0xfedcb, PayloadLength: 8, NextHeader: ProtocolUDP, HopLimit: 9,
		Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("ff02::2"),
	}
	b := make(IPv6, 48)
	b.Encode(&f)
	got := IPv6Fields{
		TrafficClass: b.TrafficClass(), FlowLabel: b.FlowLabel(), PayloadLength: b.PayloadLength(),
		NextHeader: b.NextHeader(), HopLimit: b.HopLimit(), Src: b.SourceAddress(), Dst: b.DestinationAddress(),
	}
	if got != f || !b.IsValid() || len(b.Payload()) != 8 || b[0] != 0x6a {
		t.Fatalf("round trip %+v", got)
	}
	b.SetPayloadLength(9)
	if b.IsValid() {
		t.Fatal("payload beyond the slice accepted")
	}
}

func TestUDPView(t *testing.T) {
	b := make(UDP, 12)
	b.Encode(&UDPFields{SrcPort: 0xc001, DstPort: UDPPort, Length: 12})
	if b.SourcePort() != 0xc001 || b.DestinationPort() != 4791 || b.Length() != 12 || b.Checksum() != 0 || !b.IsValid() {
		t.Fatal("UDP")
	}
	b.SetLength(13)
	if b.IsValid() {
		t.Fatal("length beyond the slice accepted")
	}
}

// TestEUI64: rxe's node GUID for the lab guest's MAC, as its REQs carry it.
func TestEUI64(t *testing.T) {
	if got, want := EUI64([6]byte{0x52, 0x54, 0x00, 0x18, 0x01, 0x02}), [8]byte{0x50, 0x54, 0x00, 0xff, 0xfe, 0x18, 0x01, 0x02}; got != want {
		t.Fatalf("EUI64 = % x, want % x", got, want)
	}
}
