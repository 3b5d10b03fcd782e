package impair

import (
	"encoding/binary"
	"math/bits"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/softfabric/softfabric/internal/netnstest"
)

const (
	tcxNext = 0xffffffff // TC_ACT_UNSPEC as the uint32 Program.Run returns
	tcShot  = 2
)

// frame is a crafted test frame and where its UDP payload lies.
type frame struct {
	name      string
	b         []byte
	from, to  int  // UDP payload, when it is UDP
	match4791 bool // UDPPort 4791 applies; UDPPort 0 applies to every frame
}

func ethHdr(ethertype uint16, tags ...uint16) []byte {
	b := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}
	for _, tpid := range tags {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, 100)
	}
	return binary.BigEndian.AppendUint16(b, ethertype)
}

func udpHdr(dport uint16, payload int) []byte {
	b := binary.BigEndian.AppendUint16(nil, 49152)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint16(b, uint16(8+payload))
	return append(b, 0, 0)
}

func ipv4Hdr(proto byte, frag uint16, l4len int, options int) []byte {
	ihl := 5 + options/4
	b := []byte{byte(0x40 | ihl), 0}
	b = binary.BigEndian.AppendUint16(b, uint16(ihl*4+l4len))
	b = append(b, 0, 1)
	b = binary.BigEndian.AppendUint16(b, frag)
	b = append(b, 64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2)
	return append(b, make([]byte, options)...)
}

func ipv6Hdr(next byte, l4len int) []byte {
	b := []byte{0x60, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(l4len))
	b = append(b, next, 64)
	b = append(b, make([]byte, 32)...)
	return b
}

func udpFrame(name string, l2, l3 []byte, dport uint16, payload int) frame {
	b := append(append(append([]byte{}, l2...), l3...), udpHdr(dport, payload)...)
	from := len(b)
	for i := range payload {
		b = append(b, byte(i))
	}
	return frame{name: name, b: b, from: from, to: len(b), match4791: dport == 4791}
}

func testFrames() []frame {
	const n = 100
	hbh := []byte{17, 0, 1, 4, 0, 0, 0, 0} // hop-by-hop, next UDP, PadN
	return []frame{
		udpFrame("ipv4", ethHdr(0x0800), ipv4Hdr(17, 0x4000, 8+n, 0), 4791, n),
		udpFrame("ipv4 options", ethHdr(0x0800), ipv4Hdr(17, 0, 8+n, 8), 4791, n),
		udpFrame("ipv4 first fragment", ethHdr(0x0800), ipv4Hdr(17, 0x2000, 8+n, 0), 4791, n),
		udpFrame("ipv6", ethHdr(0x86dd), ipv6Hdr(17, 8+n), 4791, n),
		udpFrame("ipv6 hop-by-hop", ethHdr(0x86dd), append(ipv6Hdr(0, 16+n), hbh...), 4791, n),
		udpFrame("vlan ipv4", ethHdr(0x0800, 0x8100), ipv4Hdr(17, 0, 8+n, 0), 4791, n),
		udpFrame("qinq ipv6", ethHdr(0x86dd, 0x88a8, 0x8100), ipv6Hdr(17, 8+n), 4791, n),
		udpFrame("ipv4 port 53", ethHdr(0x0800), ipv4Hdr(17, 0, 8+n, 0), 53, n),
		udpFrame("ipv6 port 4792", ethHdr(0x86dd), ipv6Hdr(17, 8+n), 4792, n),
		{name: "ipv4 later fragment", b: append(append(ethHdr(0x0800), ipv4Hdr(17, 0x00b9, 8+n, 0)...), udpHdr(4791, n)...)},
		{name: "tcp to 4791", b: append(append(ethHdr(0x0800), ipv4Hdr(6, 0, 28, 0)...), udpHdr(4791, 12)...)},
		{name: "arp", b: append(ethHdr(0x0806), make([]byte, 28)...)},
	}
}

// TestRun drives the program through BPF_PROG_TEST_RUN with crafted frames:
// the match, the drop verdict and the position of the corrupted bit.
func TestRun(t *testing.T) {
	netnstest.Require(t)
	i, err := load(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer i.Close()
	var runs, matched uint64
	for _, f := range testFrames() {
		for _, port := range []uint16{RoCEv2Port, 0} {
			match := f.match4791 || port == 0
			runs += 21
			if match {
				matched += 21
			}
			// Drop.
			if err := i.Set(Config{DropPPM: PPM, UDPPort: port}); err != nil {
				t.Fatal(err)
			}
			ret, err := i.objs.ImpairEgress.Run(&ebpf.RunOptions{Data: f.b})
			if err != nil {
				t.Fatal(err)
			}
			want := uint32(tcxNext)
			if match {
				want = tcShot
			}
			if ret != want {
				t.Errorf("%s, port %d: drop verdict %#x, want %#x", f.name, port, ret, want)
			}
			// Corrupt: exactly one bit, inside the UDP payload.
			if err := i.Set(Config{CorruptPPM: PPM, UDPPort: port}); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				out := make([]byte, len(f.b))
				ret, err = i.objs.ImpairIngress.Run(&ebpf.RunOptions{Data: f.b, DataOut: out})
				if err != nil {
					t.Fatal(err)
				}
				if ret != tcxNext {
					t.Fatalf("%s: corrupt verdict %#x", f.name, ret)
				}
				flipped, at := 0, -1
				for k := range out {
					if d := bits.OnesCount8(out[k] ^ f.b[k]); d > 0 {
						flipped, at = flipped+d, k
					}
				}
				switch {
				case !match && flipped != 0:
					t.Fatalf("%s, port %d: unmatched frame changed at %d", f.name, port, at)
				case match && flipped != 1:
					t.Fatalf("%s, port %d: %d bits flipped, want 1", f.name, port, flipped)
				case match && f.from != 0 && (at < f.from || at >= f.to):
					t.Fatalf("%s, port %d: bit flipped at %d, outside the payload [%d,%d)", f.name, port, at, f.from, f.to)
				case match && at < 14:
					t.Fatalf("%s, port %d: bit flipped at %d, in the Ethernet header", f.name, port, at)
				}
			}
		}
	}
	// Unmarked frames are counted; a clone's mark lets it through untouched.
	if err := i.Set(Config{DropPPM: PPM}); err != nil {
		t.Fatal(err)
	}
	f := testFrames()[0]
	ctx := make([]byte, 192) // struct __sk_buff
	binary.LittleEndian.PutUint32(ctx[8:], cloneMark)
	ret, err := i.objs.ImpairEgress.Run(&ebpf.RunOptions{Data: f.b, Context: ctx, ContextOut: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if ret != tcxNext || binary.LittleEndian.Uint32(ctx[8:]) != 0 {
		t.Fatalf("marked clone: verdict %#x, mark %#x; want pass with the mark cleared", ret, binary.LittleEndian.Uint32(ctx[8:]))
	}
	c, err := i.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{Seen: runs, Matched: matched, Dropped: matched / 21, Corrupted: matched / 21 * 20}
	if c != want {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
}
