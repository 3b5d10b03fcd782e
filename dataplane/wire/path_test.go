package wire

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestSourcePort(t *testing.T) {
	// Values worked out by hand from rdma_calc_flow_label and
	// rdma_flow_label_to_udp_sport in include/rdma/ib_verbs.h.
	for _, tc := range []struct {
		qpn, dest uint32
		fl        uint32
		port      uint16
	}{
		{0x11, 0x22, 0x242, 0xc242},
		{0xabcdef, 0x123456, 0xac3e3, 0xc3c8},
		{0xffffff, 0xffffff, 0xfff1e, 0xff21},
		{1, 0, 0, 0xc000},
	} {
		if fl := QPFlowLabel(tc.qpn, tc.dest); fl != tc.fl {
			t.Errorf("QPFlowLabel(%#x, %#x) = %#x, want %#x", tc.qpn, tc.dest, fl, tc.fl)
		}
		if p := SourcePort(tc.qpn, tc.dest); p != tc.port {
			t.Errorf("SourcePort(%#x, %#x) = %#x, want %#x", tc.qpn, tc.dest, p, tc.port)
		}
		if SourcePort(tc.dest, tc.qpn) != tc.port {
			t.Errorf("SourcePort not symmetric for %#x, %#x", tc.qpn, tc.dest)
		}
	}
}

func TestNewPathErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mangle func(*PathFields)
		want   error
	}{
		{"mixed families", func(f *PathFields) { f.Dst = netip.MustParseAddr("2001:db8::2") }, ErrAddrFamily},
		{"no addresses", func(f *PathFields) { f.Src, f.Dst = netip.Addr{}, netip.Addr{} }, ErrAddrFamily},
		{"vlan id", func(f *PathFields) { f.VLAN, f.VLANID = true, 4096 }, ErrPathField},
		{"pcp", func(f *PathFields) { f.VLAN, f.PCP = true, 8 }, ErrPathField},
		{"vlan id without vlan", func(f *PathFields) { f.VLANID = 5 }, ErrPathField},
		{"flow label on ipv4", func(f *PathFields) { f.FlowLabel = 1 }, ErrPathField},
	} {
		f := v4Path()
		tc.mangle(&f)
		if _, err := NewPath(f); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	f := v6Path()
	f.FlowLabel = 1 << 20
	if _, err := NewPath(f); err != ErrPathField {
		t.Errorf("flow label 2^20: %v", err)
	}
}

func TestPathFields(t *testing.T) {
	mapped := v4Path()
	mapped.Src = netip.AddrFrom16(mapped.Src.As16())
	mapped.Dst = netip.AddrFrom16(mapped.Dst.As16())
	vlan := v6Path()
	vlan.VLAN, vlan.VLANID, vlan.PCP, vlan.SrcPort = true, 7, 6, 0xd00d
	for _, f := range []PathFields{v4Path(), v6Path(), mapped, vlan} {
		p := mustPath(t, f)
		want := f
		want.Src, want.Dst = f.Src.Unmap(), f.Dst.Unmap()
		if want.HopLimit == 0 {
			want.HopLimit = DefaultHopLimit
		}
		if want.SrcPort == 0 {
			want.SrcPort = DefaultSourcePort
		}
		if got := p.Fields(); got != want {
			t.Errorf("Fields() = %+v\nwant %+v", got, want)
		}
		if p.IsIPv6() != want.Src.Is6() {
			t.Error("IsIPv6")
		}
	}
	var zero Path
	if zero.Fields() != (PathFields{}) || zero.HeaderLen() != 0 {
		t.Error("zero Path")
	}
}

func TestFinishLeavesBadFramesAlone(t *testing.T) {
	p := mustPath(t, v4Path())
	short := make([]byte, p.HeaderLen()+BTHSize+ICRCSize-1)
	p.Finish(short)
	if !bytes.Equal(short, make([]byte, len(short))) {
		t.Error("Finish wrote into a frame too short for its headers")
	}
	long := make([]byte, EthernetSize+0x10000)
	p.Finish(long)
	if !bytes.Equal(long[:64], make([]byte, 64)) {
		t.Error("Finish wrote into a frame too long for IPv4")
	}
	var zero Path
	f := make([]byte, 100)
	zero.Finish(f)
	if !bytes.Equal(f, make([]byte, 100)) {
		t.Error("zero Path wrote a frame")
	}
	// The longest frame IPv6 allows is accepted.
	p6 := mustPath(t, v6Path())
	big := make([]byte, EthernetSize+IPv6Size+0xffff)
	big[p6.HeaderLen()] = byte(RCSendOnly)
	p6.Finish(big)
	var pk Packet
	if err := pk.Parse(big); err != nil || !pk.CheckICRC() {
		t.Errorf("64 KiB IPv6 frame: %v", err)
	}
}

// TestGopacket decodes frames built by Path.Finish with an independent
// decoder and checks every L2-L4 field, IPv4 checksum included.
func TestGopacket(t *testing.T) {
	v4vlan := v4Path()
	v4vlan.VLAN, v4vlan.VLANID, v4vlan.PCP = true, 0x123, 5
	v6vlan := v6Path()
	v6vlan.VLAN, v6vlan.VLANID = true, 4094
	for _, f := range []PathFields{v4Path(), v4vlan, v6Path(), v6vlan} {
		for _, n := range []int{0, 1, 4095, 4096} {
			p := mustPath(t, f)
			m := message{BTH: BTHFields{Opcode: RCSendOnly, DestQP: 5}, Payload: payload(n)}
			frame := build(t, &p, &m)
			pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("gopacket: %v", el.Error())
			}
			want := p.Fields()
			eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if eth == nil || !bytes.Equal(eth.SrcMAC, want.SrcMAC[:]) || !bytes.Equal(eth.DstMAC, want.DstMAC[:]) {
				t.Fatalf("ethernet %+v", eth)
			}
			l3 := EthernetSize
			if f.VLAN {
				l3 += VLANSize
				q, _ := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
				if eth.EthernetType != layers.EthernetTypeDot1Q || q == nil || q.VLANIdentifier != f.VLANID || q.Priority != f.PCP {
					t.Fatalf("dot1q %+v", q)
				}
			}
			ipLen := len(frame) - l3
			if f.Src.Is4() {
				ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
				if ip == nil || int(ip.Length) != ipLen || int(ip.IHL) != 5 || ip.Flags != layers.IPv4DontFragment ||
					ip.Id != 0 || ip.TTL != want.HopLimit || ip.TOS != f.TrafficClass || ip.Protocol != layers.IPProtocolUDP ||
					!ip.SrcIP.Equal(net.IP(f.Src.AsSlice())) || !ip.DstIP.Equal(net.IP(f.Dst.AsSlice())) {
					t.Fatalf("ipv4 %+v", ip)
				}
				// Let gopacket compute the checksum and compare.
				got := ip.Checksum
				buf := gopacket.NewSerializeBuffer()
				if err := ip.SerializeTo(buf, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
					t.Fatal(err)
				}
				if ip.Checksum != got {
					t.Fatalf("ipv4 checksum %#04x, gopacket computes %#04x", got, ip.Checksum)
				}
			} else {
				ip, _ := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
				if ip == nil || int(ip.Length) != ipLen-IPv6Size || ip.TrafficClass != f.TrafficClass ||
					ip.FlowLabel != f.FlowLabel || ip.HopLimit != f.HopLimit || ip.NextHeader != layers.IPProtocolUDP ||
					!ip.SrcIP.Equal(net.IP(f.Src.AsSlice())) || !ip.DstIP.Equal(net.IP(f.Dst.AsSlice())) {
					t.Fatalf("ipv6 %+v", ip)
				}
			}
			udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
			udpLen := BTHSize + n + (-n & 3) + ICRCSize + UDPSize
			if udp == nil || udp.DstPort != UDPPort || uint16(udp.SrcPort) != want.SrcPort || int(udp.Length) != udpLen ||
				udp.Checksum != 0 || len(udp.Payload) != udpLen-UDPSize {
				t.Fatalf("udp %+v", udp)
			}
		}
	}
}

// TestFinishGather: a frame finished with its payload elsewhere has the
// headers and the ICRC of the same frame finished with the payload in it,
// over IPv4 and IPv6 and with a pad; arguments that do not fit the frame
// leave it alone.
func TestFinishGather(t *testing.T) {
	for _, pf := range []PathFields{v4Path(), v6Path()} {
		p, err := NewPath(pf)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 3, 64, 1021, 4096} {
			hl := p.HeaderLen()
			at := hl + RCWriteFirst.Info().HeaderLen
			pad := -n & 3
			payload := bytes.Repeat([]byte{0x5a, 0xc3, 0x11}, n)[:n]
			whole := make([]byte, at+n+pad+ICRCSize)
			BTH(whole[hl:]).Encode(&BTHFields{Opcode: RCWriteFirst, PadCount: uint8(pad), DestQP: 0x12, PSN: 7})
			RETH(whole[hl+RCWriteFirst.Info().RETH:]).Encode(0x1000, 0x99, uint32(n))
			gathered := bytes.Clone(whole)
			copy(whole[at:], payload)
			p.Finish(whole)
			p.FinishGather(gathered, at, payload)
			copy(gathered[at:], payload) // as the link sends it
			if !bytes.Equal(gathered, whole) {
				t.Errorf("%v, %d bytes: the gathered frame differs", pf.Src, n)
			}
			var pk Packet
			if err := pk.Parse(gathered); err != nil || !pk.CheckICRC() {
				t.Errorf("%v, %d bytes: %v, ICRC good %v", pf.Src, n, err, err == nil && pk.CheckICRC())
			}
			for _, bad := range []struct{ at, n int }{{hl, n}, {at, n + pad + 1}, {len(whole), 0}} {
				f := make([]byte, len(whole))
				p.FinishGather(f, bad.at, make([]byte, bad.n))
				if !bytes.Equal(f, make([]byte, len(whole))) {
					t.Errorf("FinishGather(at %d, %d bytes) changed a frame of %d", bad.at, bad.n, len(whole))
				}
			}
		}
	}
}
