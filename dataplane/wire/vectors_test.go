package wire

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			var p Packet
			if err := p.Parse(v.frame); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Opcode != Opcode(v.Opcode) {
				t.Errorf("opcode %v, want %#x", p.Opcode, v.Opcode)
			}
			if p.End != len(v.frame) {
				t.Errorf("End %d, frame %d bytes", p.End, len(v.frame))
			}
			want := binary.LittleEndian.Uint32(v.icrc)
			if got := p.ICRC(); got != want {
				t.Errorf("ICRC() %#08x, want %#08x", got, want)
			}
			if got := ComputeICRC(v.frame[p.L3 : p.End-ICRCSize]); got != want {
				t.Errorf("ComputeICRC %#08x, want %#08x (wire %s)", got, want, v.ICRCHex)
			}
			if !p.CheckICRC() {
				t.Error("CheckICRC false")
			}
			if got := rebuild(t, &p); !bytes.Equal(got, v.frame) {
				t.Errorf("rebuilt frame differs\n got %x\nwant %x", got, v.frame)
			}
		})
	}
}

// rebuild encodes a new frame from the fields of p, using only Fields
// structs and Encode methods.
func rebuild(t *testing.T, p *Packet) []byte {
	t.Helper()
	out := make([]byte, p.End)

	eth := p.Ethernet()
	Ethernet(out).Encode(&EthernetFields{
		Dst: eth.Dst(), Src: eth.Src(), VLAN: eth.HasVLAN(),
		VLANID: eth.VLANID(), PCP: eth.PCP(), EtherType: eth.EtherType(),
	})
	if p.IPv6 {
		ip := p.IPv6Header()
		IPv6(out[p.L3:]).Encode(&IPv6Fields{
			TrafficClass: ip.TrafficClass(), FlowLabel: ip.FlowLabel(),
			PayloadLength: ip.PayloadLength(), NextHeader: ip.NextHeader(),
			HopLimit: ip.HopLimit(), Src: ip.SourceAddress(), Dst: ip.DestinationAddress(),
		})
	} else {
		ip := p.IPv4Header()
		if !ip.IsValid() || !ip.IsChecksumValid() || ip.CalculateChecksum() != ip.Checksum() {
			t.Errorf("IPv4 header invalid or bad checksum %#04x (want %#04x)", ip.Checksum(), ip.CalculateChecksum())
		}
		IPv4(out[p.L3:]).Encode(&IPv4Fields{
			TOS: ip.TOS(), TotalLength: ip.TotalLength(), ID: ip.ID(), Flags: ip.Flags(),
			FragmentOffset: ip.FragmentOffset(), TTL: ip.TTL(), Protocol: ip.Protocol(),
			Checksum: ip.Checksum(), Src: ip.SourceAddress(), Dst: ip.DestinationAddress(),
			Options: ip.Options(),
		})
	}
	u := p.UDP()
	UDP(out[p.L4:]).Encode(&UDPFields{
		SrcPort: u.SourcePort(), DstPort: u.DestinationPort(), Length: u.Length(), Checksum: u.Checksum(),
	})
	m := decodeTransport(p)
	encodeTransport(out[p.BTHOff:], &m, m.BTH.PadCount)
	// Pad bytes are left zero, as IBTA asks senders to write them.
	PutICRC(out[p.L3:p.End])
	return out
}
