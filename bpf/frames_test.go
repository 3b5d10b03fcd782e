package bpf

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softfabric/softfabric/dataplane/wire"
)

// Frames for the tests, built with dataplane/wire for RoCEv2 and gopacket
// for everything else.

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0xb}
	ip4A = netip.MustParseAddr("198.18.0.1")
	ip4B = netip.MustParseAddr("198.18.0.2")
	ip6A = netip.MustParseAddr("fd00:198:18::1")
	ip6B = netip.MustParseAddr("fd00:198:18::2")
)

// roce describes a RoCEv2 frame.
type roce struct {
	v6      bool
	vlan    bool
	ipOpts  []byte // IPv4 options, a multiple of 4 bytes
	sport   uint16
	opcode  wire.Opcode
	tver    uint8
	pkey    uint16 // 0 means 0xffff
	qpn     uint32
	payload int
}

// frame builds the frame: headers, BTH, payload, ICRC.
func (r roce) frame(t testing.TB) []byte {
	t.Helper()
	f := wire.PathFields{SrcMAC: macA, DstMAC: macB, Src: ip4A, Dst: ip4B, SrcPort: r.sport}
	if r.v6 {
		f.Src, f.Dst = ip6A, ip6B
	}
	if r.vlan {
		f.VLAN, f.VLANID, f.PCP = true, 42, 3
	}
	p, err := wire.NewPath(f)
	if err != nil {
		t.Fatal(err)
	}
	hl := p.HeaderLen()
	frame := make([]byte, hl+wire.BTHSize+r.payload+wire.ICRCSize)
	pkey := r.pkey
	if pkey == 0 {
		pkey = wire.DefaultPKey
	}
	wire.BTH(frame[hl:]).Encode(&wire.BTHFields{
		Opcode: r.opcode, TVer: r.tver, PKey: pkey, DestQP: r.qpn, PSN: 0x123456, AckReq: true,
	})
	for i := range r.payload {
		frame[hl+wire.BTHSize+i] = byte(i)
	}
	p.Finish(frame)
	if len(r.ipOpts) == 0 {
		return frame
	}
	if r.v6 || len(r.ipOpts)%4 != 0 {
		t.Fatal("ipv4 options must be a multiple of 4 bytes")
	}
	l3 := hl - wire.UDPSize - wire.IPv4MinSize
	l4 := l3 + wire.IPv4MinSize
	out := append(append(append([]byte(nil), frame[:l4]...), r.ipOpts...), frame[l4:]...)
	ip := wire.IPv4(out[l3:])
	ip[0] = 4<<4 | byte((wire.IPv4MinSize+len(r.ipOpts))/4)
	ip.SetTotalLength(uint16(len(out) - l3))
	ip.SetChecksum(ip.CalculateChecksum())
	end := len(out) - wire.ICRCSize
	binary.LittleEndian.PutUint32(out[end:], wire.ComputeICRC(out[l3:end]))
	return out
}

// headerLen is the length of the headers in front of the BTH.
func (r roce) headerLen() int {
	n := wire.EthernetSize + wire.IPv4MinSize + len(r.ipOpts) + wire.UDPSize
	if r.v6 {
		n += wire.IPv6Size - wire.IPv4MinSize
	}
	if r.vlan {
		n += wire.VLANSize
	}
	return n
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func ethernet(typ layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: net.HardwareAddr(macA[:]), DstMAC: net.HardwareAddr(macB[:]), EthernetType: typ}
}

func ipv4(proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, SrcIP: ip4A.AsSlice(), DstIP: ip4B.AsSlice(), Flags: layers.IPv4DontFragment}
}

func arpFrame(t testing.TB) []byte {
	return serialize(t, ethernet(layers.EthernetTypeARP), &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
		SourceHwAddress: macA[:], SourceProtAddress: ip4A.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: ip4B.AsSlice(),
	})
}

func tcpFrame(t testing.TB) []byte {
	ip := ipv4(layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 4791, SYN: true, Window: 65535, Seq: 1}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	return serialize(t, ethernet(layers.EthernetTypeIPv4), ip, tcp)
}

func udpFrame(t testing.TB, sport, dport uint16) []byte {
	ip := ipv4(layers.IPProtocolUDP)
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	return serialize(t, ethernet(layers.EthernetTypeIPv4), ip, udp, gopacket.Payload(make([]byte, 32)))
}

func ndFrame(t testing.TB) []byte {
	ip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: 255, SrcIP: ip6A.AsSlice(), DstIP: net.ParseIP("ff02::1:ff00:2")}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: ip6B.AsSlice(), Options: layers.ICMPv6Options{
		{Type: layers.ICMPv6OptSourceAddress, Data: macA[:]},
	}}
	return serialize(t, ethernet(layers.EthernetTypeIPv6), ip, icmp, ns)
}

func pingFrame(t testing.TB) []byte {
	return serialize(t, ethernet(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1},
		gopacket.Payload(make([]byte, 56)))
}

// fragment turns an IPv4 RoCE frame into the first fragment of a datagram.
func fragment(t testing.TB, frame []byte, offset bool) []byte {
	t.Helper()
	out := append([]byte(nil), frame...)
	ip := wire.IPv4(out[wire.EthernetSize:])
	if offset {
		binary.BigEndian.PutUint16(ip[6:], 185) // offset 1480, no MF
	} else {
		binary.BigEndian.PutUint16(ip[6:], 0x2000) // MF
	}
	ip.SetChecksum(ip.CalculateChecksum())
	return out
}

// hopByHop inserts an IPv6 hop-by-hop options header (PadN) in front of
// the UDP header of an IPv6 RoCE frame.
func hopByHop(t testing.TB, frame []byte) []byte {
	t.Helper()
	l3 := wire.EthernetSize
	l4 := l3 + wire.IPv6Size
	ext := []byte{wire.ProtocolUDP, 0, 1, 4, 0, 0, 0, 0}
	out := append(append(append([]byte(nil), frame[:l4]...), ext...), frame[l4:]...)
	out[l3+6] = 0 // next header: hop-by-hop
	binary.BigEndian.PutUint16(out[l3+4:], uint16(len(out)-l4))
	return out
}
