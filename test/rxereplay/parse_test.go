package rxereplay

// The parser against every captured frame, and pins of rxe's wire behaviour
// as the captures show it (kernel 6.1 rdma_rxe). A failure here means
// either that our parser reads these frames differently than it did, or
// that a fixture recorded against another rxe changed what rxe does.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/summary.golden from the fixtures")

const goldenPath = "testdata/summary.golden"

// forEachFrame runs fn on every frame of every fixture.
func forEachFrame(t *testing.T, fn func(c *capture, f *frame)) {
	t.Helper()
	for _, name := range fixtures(t) {
		c := load(t, name)
		for _, f := range c.frames {
			fn(c, f)
		}
	}
}

func who(fromRxe bool) string {
	if fromRxe {
		return "rxe"
	}
	return "softfabric"
}

func TestEveryFrameParsesWithValidICRC(t *testing.T) {
	// load fails on a frame that does not parse or whose ICRC is wrong;
	// here each file must also hold frames both ways, and every frame
	// must be a RoCEv2 packet the parser takes whole.
	for _, name := range fixtures(t) {
		c := load(t, name)
		n := map[bool]int{}
		for _, f := range c.frames {
			n[f.fromRxe]++
			var p wire.Packet
			if err := p.Parse(bytes.Clone(f.data)); err != nil || p.Opcode != f.p.Opcode {
				t.Errorf("%s: %v: parses differently a second time (%v)", name, f, err)
			}
		}
		if n[true] == 0 || n[false] == 0 {
			t.Errorf("%s: %d frames from rxe, %d from softfabric: want both", name, n[true], n[false])
		}
	}
}

// summary is the golden description of one capture: frames per direction
// and opcode, and AETH syndromes per direction and opcode.
func summary(c *capture) string {
	type key struct {
		dir string
		op  wire.Opcode
		syn string
	}
	count := map[key]int{}
	dirs := map[string]int{}
	for _, f := range c.frames {
		d := who(f.fromRxe)
		dirs[d]++
		count[key{d, f.p.Opcode, ""}]++
		if a := f.p.AETH(); a != nil {
			count[key{d, f.p.Opcode, syndrome(a.Syndrome())}]++
		}
	}
	keys := make([]key, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.dir != b.dir {
			return a.dir < b.dir
		}
		if a.op != b.op {
			return a.op < b.op
		}
		return a.syn < b.syn
	})
	var s strings.Builder
	fmt.Fprintf(&s, "%s: %d frames, %d from rxe, %d from softfabric\n", c.name, len(c.frames), dirs["rxe"], dirs["softfabric"])
	for _, k := range keys {
		fmt.Fprintf(&s, "  %-10s %4d %s", k.dir, count[k], k.op)
		if k.syn != "" {
			s.WriteString(" " + k.syn)
		}
		s.WriteString("\n")
	}
	return s.String()
}

func TestSummaryMatchesGolden(t *testing.T) {
	var got strings.Builder
	for _, name := range fixtures(t) {
		got.WriteString(summary(load(t, name)))
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(goldenPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenPath, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run go test ./test/rxereplay -run TestSummaryMatchesGolden -update to write it)", err)
	}
	if got.String() == string(want) {
		return
	}
	g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("what the fixtures parse to changed at line %d of %s:\n got: %q\nwant: %q\n(if the change is meant, rerun with -update)", i+1, goldenPath, gl, wl)
		}
	}
}

// hash32 is the kernel's hash_32 (include/linux/hash.h): the golden-ratio
// multiplicative hash, keeping the top bits.
func hash32(v uint32, bits uint) uint32 { return v * 0x61c88647 >> (32 - bits) }

func TestRCSourcePortIsTheQPPairsFlowLabelPort(t *testing.T) {
	// rxe sets an RC QP's UDP source port on modify_qp with an address
	// vector to rdma_get_udp_sport(flow label 0, qpn, dest qpn), the
	// flow-label hash of the QPN pair; it is symmetric, so both ends of a
	// connection send from the same port, and softfabric (device.Path)
	// computes the same one. A connection rdma_cm made has a flow label,
	// the REQ's (from the ports, ibcm.RDMACMFlowLabel): both ends send from
	// its port instead.
	for _, name := range fixtures(t) {
		c := load(t, name)
		fl, cm := reqFlowLabel(c)
		for _, cn := range c.conns(t) {
			if cn.ud {
				continue
			}
			want, why := wire.SourcePort(cn.sfQPN, cn.rxeQPN), fmt.Sprintf("flow label of QPs %#x and %#x", cn.sfQPN, cn.rxeQPN)
			if want != wire.SourcePort(cn.rxeQPN, cn.sfQPN) {
				t.Fatalf("%s: SourcePort is not symmetric for QPs %#x and %#x", name, cn.sfQPN, cn.rxeQPN)
			}
			if cm {
				want, why = wire.FlowLabelSourcePort(fl), fmt.Sprintf("the REQ's flow label %#x", fl)
			}
			for _, f := range c.frames {
				if cn.belongs(f) && f.p.SrcPort() != want {
					t.Errorf("%s: %v: UDP source port %d, want %d (%s)", name, f, f.p.SrcPort(), want, why)
				}
			}
		}
	}
}

// reqFlowLabel is the primary path's flow label of the capture's first
// RDMA-CM REQ, and whether it has one.
func reqFlowLabel(c *capture) (uint32, bool) {
	for _, f := range c.frames {
		if f.p.BTH().DestQP() != 1 || len(f.p.Payload) < mad.Size {
			continue
		}
		if m := mad.MAD(f.p.Payload); m.AttributeID() == mad.AttrREQ {
			return mad.REQ(m.Data()).Primary().FlowLabel(), true
		}
	}
	return 0, false
}

func TestUDSourcePorts(t *testing.T) {
	// A UD QP is modified without an address vector, so rxe keeps the
	// port rxe_qp_init_req chose: 0xc000 + hash_32(qpn, 14), a function
	// of its own QPN alone. softfabric's UD address handles take the
	// flow-label port of the QPN pair (device.Path), as for RC. Both are
	// in the RoCEv2 range; neither side cares what the other uses.
	c := load(t, "ud-pingpong-rxe-client.pcapng")
	n := 0
	for _, cn := range c.conns(t) {
		if !cn.ud {
			continue
		}
		n++
		rxePort := uint16(0xc000 + hash32(cn.rxeQPN, 14)&0x3fff)
		sfPort := wire.SourcePort(cn.sfQPN, cn.rxeQPN)
		for _, f := range c.frames {
			want := sfPort
			if f.fromRxe {
				want = rxePort
			}
			if cn.belongs(f) && f.p.SrcPort() != want {
				t.Errorf("%v: UDP source port %d, want %d", f, f.p.SrcPort(), want)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d UD connections, want 1", n)
	}
}

func TestBTHFieldsAsSent(t *testing.T) {
	// Both sides: default P_Key, MigReq clear (rxe's bth_init gets
	// migreq 0), header version 0, no solicited event (neither perftest
	// nor the ping-pongs ask for one), FECN, BECN and every reserved bit
	// zero, and a pad count that pads the payload to 4 bytes with zeros.
	forEachFrame(t, func(c *capture, f *frame) {
		b := f.p.BTH()
		pad := f.p.Frame[f.p.End-wire.ICRCSize-b.PadCount() : f.p.End-wire.ICRCSize]
		switch {
		case b.PKey() != 0xffff:
			t.Errorf("%s: %v: P_Key %#x", c.name, f, b.PKey())
		case b.MigReq():
			t.Errorf("%s: %v: MigReq set", c.name, f)
		case b.TVer() != 0:
			t.Errorf("%s: %v: header version %d", c.name, f, b.TVer())
		case b.Solicited():
			t.Errorf("%s: %v: solicited event set", c.name, f)
		case b[4] != 0:
			t.Errorf("%s: %v: FECN/BECN/reserved byte %#02x", c.name, f, b[4])
		case b[8]&0x7f != 0:
			t.Errorf("%s: %v: reserved bits after AckReq %#02x", c.name, f, b[8]&0x7f)
		case b.PadCount() != -len(f.p.Payload)&3:
			t.Errorf("%s: %v: pad count %d for %d bytes", c.name, f, b.PadCount(), len(f.p.Payload))
		case !bytes.Equal(pad, make([]byte, len(pad))):
			t.Errorf("%s: %v: pad bytes % x", c.name, f, pad)
		}
	})
}

func TestRxeRequestsAskForAckOnTheLastPacketOfEachMessage(t *testing.T) {
	// rxe's requester sets AckReq on the last packet of every RC message
	// (reads and atomics are single packets) and on no other (it would
	// also every RXE_MAX_PKT_PER_ACK = 64 packets; no message here is that
	// long); never on UD, but for the MADs of its GSI (QP1), which it
	// sends with AckReq set. softfabric asks only where it needs an ACK
	// (docs/transport.md); the replays compare its bits byte for byte.
	n := 0
	forEachFrame(t, func(c *capture, f *frame) {
		if !f.fromRxe || !f.isRequest() || f.p.BTH().DestQP() == 1 {
			return
		}
		n++
		want := f.mask()&wire.MaskLast != 0 && f.mask()&wire.MaskUD == 0
		if f.p.BTH().AckReq() != want {
			t.Errorf("%s: %v: AckReq %v, want %v", c.name, f, f.p.BTH().AckReq(), want)
		}
	})
	if n == 0 {
		t.Fatal("no requests from rxe")
	}
}

func TestRxeReadResponsesCarryAETHOnFirstLastAndOnlyOnly(t *testing.T) {
	// The layout the parser derives from the opcode, checked against the
	// lengths rxe gives its frames: FIRST, LAST and ONLY carry a 4-byte
	// AETH before the payload, MIDDLE none, every packet but the last of
	// a response is full. The AETH is an ACK with credits 0x1f (rxe's
	// AETH_ACK_UNLIMITED). In a clean capture, both AETHs of the k-th
	// read's response carry MSN k.
	for _, name := range []string{"read-sf-client.pcapng", "read-sf-client-loss.pcapng"} {
		c := load(t, name)
		cn := c.conns(t)[0]
		reads := c.messages(t, cn, false)
		for _, f := range c.frames {
			if !f.fromRxe || f.mask()&wire.MaskReadResponse == 0 {
				continue
			}
			wantAETH := f.mask()&(wire.MaskFirst|wire.MaskLast) != 0
			udpLen := int(f.p.UDP().Length())
			n := len(f.p.Payload)
			if hdr := udpLen - n - f.p.BTH().PadCount() - wire.UDPSize - wire.BTHSize - wire.ICRCSize; hdr != map[bool]int{true: 4, false: 0}[wantAETH] {
				t.Errorf("%s: %v: %d bytes between BTH and payload", name, f, hdr)
			}
			if f.mask()&wire.MaskLast == 0 && n != pathMTU {
				t.Errorf("%s: %v: %d bytes in a packet that does not end the response", name, f, n)
			}
			if a := f.p.AETH(); a != nil && a.Syndrome() != wire.AckSyndrome(wire.CreditsInvalid) {
				t.Errorf("%s: %v: syndrome %s", name, f, syndrome(a.Syndrome()))
			}
			if name != "read-sf-client.pcapng" || !wantAETH {
				continue
			}
			k := sort.Search(len(reads), func(i int) bool { return !reads[i].last.Before(f.psn()) })
			if k == len(reads) || !f.psn().InWindow(reads[k].first, reads[k].npkts()) {
				t.Fatalf("%s: %v answers no read", name, f)
			}
			if msn := f.p.AETH().MSN(); msn != uint32(k+1) {
				t.Errorf("%s: %v: MSN %d, want %d (read %d)", name, f, msn, k+1, k+1)
			}
		}
	}
}

func TestRxeAcknowledgeLayout(t *testing.T) {
	// RC_ACKNOWLEDGE is BTH and AETH (UDP length 28) and
	// RC_ATOMIC_ACKNOWLEDGE adds the 8-byte AtomicAckETH (UDP length 36),
	// the value before the operation, big-endian: both with the PSN of
	// the request they answer and no payload. An ACK carries credits 0x1f;
	// a sequence NAK is syndrome 0x60. The MSN of every ACK and NAK counts
	// softfabric's messages rxe completed: those ending before the NAKed
	// PSN, or at or before the ACKed one.
	for _, name := range fixtures(t) {
		c := load(t, name)
		for _, cn := range c.conns(t) {
			msgs := c.messages(t, cn, false)
			mem := map[uint64]uint64{} // rxe's atomic targets as the AtomicAckETHs show them
			for _, f := range c.frames {
				if !f.fromRxe || !cn.belongs(f) || f.mask()&wire.MaskAck == 0 {
					continue
				}
				want := map[wire.Opcode]int{wire.RCAcknowledge: 28, wire.RCAtomicAcknowledge: 36}[f.p.Opcode]
				if got := int(f.p.UDP().Length()); got != want || len(f.p.Payload) != 0 {
					t.Errorf("%s: %v: UDP length %d, want %d", name, f, got, want)
				}
				syn := f.p.AETH().Syndrome()
				ack := wire.SyndromeKind(syn) == wire.AckKindACK
				if syn != wire.AckSyndrome(wire.CreditsInvalid) && syn != wire.NAKSyndrome(wire.NAKPSNSeqErr) {
					t.Errorf("%s: %v: syndrome %#02x", name, f, syn)
				}
				done := 0
				for _, m := range msgs {
					if m.last.Before(f.psn()) || ack && m.last == f.psn() {
						done++
					}
				}
				if f.p.AETH().MSN() != uint32(done) {
					t.Errorf("%s: %v: MSN %d, want %d messages completed", name, f, f.p.AETH().MSN(), done)
				}
				if f.p.Opcode != wire.RCAtomicAcknowledge {
					continue
				}
				k := sort.Search(len(msgs), func(i int) bool { return !msgs[i].first.Before(f.psn()) })
				if k == len(msgs) || msgs[k].first != f.psn() || !msgs[k].op.IsAtomic() {
					t.Fatalf("%s: %v answers no atomic", name, f)
				}
				m := msgs[k]
				orig := f.p.AtomicAckETH().OrigData()
				if v, ok := mem[m.va]; ok && v != orig {
					t.Errorf("%s: %v: original value %#x, but the previous operation left %#x", name, f, orig, v)
				}
				mem[m.va] = orig + m.swapAdd
				if m.op == verbs.OpCmpSwap {
					mem[m.va] = orig
					if orig == m.compare {
						mem[m.va] = m.swapAdd
					}
				}
			}
		}
	}
}

func TestUDDatagramsCarryQKeyAndSourceQP(t *testing.T) {
	// Every datagram carries Q_Key 0x11111111 (ibv_ud_pingpong's) and its
	// sender's QPN in the DETH; rxe's PSNs go up by one per datagram from
	// a random start; no AckReq.
	c := load(t, "ud-pingpong-rxe-client.pcapng")
	cn := c.conns(t)[0]
	var next psn.PSN
	n := 0
	for _, f := range c.frames {
		d := f.p.DETH()
		if d == nil {
			t.Fatalf("%v: not a datagram", f)
		}
		src, dest := cn.sfQPN, cn.rxeQPN
		if f.fromRxe {
			src, dest = cn.rxeQPN, cn.sfQPN
		}
		switch {
		case d.QKey() != udQKey:
			t.Errorf("%v: Q_Key %#x", f, d.QKey())
		case d.SrcQP() != src || f.p.BTH().DestQP() != dest:
			t.Errorf("%v: from QP %#x to %#x, want %#x to %#x", f, d.SrcQP(), f.p.BTH().DestQP(), src, dest)
		case f.p.BTH().AckReq():
			t.Errorf("%v: AckReq set", f)
		case f.fromRxe && n > 0 && f.psn() != next:
			t.Errorf("%v: PSN %d, want %d", f, f.psn(), next)
		}
		if f.fromRxe {
			next = f.psn().Next()
			n++
		}
	}
}

func TestIPv4AndEthernetHeaders(t *testing.T) {
	// Both sides: untagged Ethernet II, IPv4 without options, DSCP 0 and
	// ECN Not-ECT, TTL 64, DF set and no fragmentation, a valid header
	// checksum, UDP to 4791 with checksum 0, and nothing after the ICRC
	// (no Ethernet padding: the shortest frame, an ACK, is 62 bytes).
	// rxe numbers its packets with the IP ID (ip_select_ident: non-zero,
	// distinct within a capture, though not in capture order when two of
	// its QPs send at once); softfabric sends ID 0, as DF allows.
	forEachFrame(t, func(c *capture, f *frame) {
		eth, ip, udp := f.p.Ethernet(), f.p.IPv4Header(), f.p.UDP()
		src, dst := sfIP, rxeIP
		smac, dmac := c.sfMAC, c.rxeMAC
		if f.fromRxe {
			src, dst, smac, dmac = rxeIP, sfIP, c.rxeMAC, c.sfMAC
		}
		switch {
		case ip == nil || eth.HasVLAN():
			t.Errorf("%s: %v: not untagged IPv4", c.name, f)
		case eth.Src() != smac || eth.Dst() != dmac:
			t.Errorf("%s: %v: MAC %x to %x, want %x to %x", c.name, f, eth.Src(), eth.Dst(), smac, dmac)
		case ip.SourceAddress() != src || ip.DestinationAddress() != dst:
			t.Errorf("%s: %v: %v to %v", c.name, f, ip.SourceAddress(), ip.DestinationAddress())
		case ip.HeaderLength() != 20 || ip.TOS() != 0 || ip.TTL() != 64:
			t.Errorf("%s: %v: header length %d, TOS %#02x, TTL %d", c.name, f, ip.HeaderLength(), ip.TOS(), ip.TTL())
		case ip.Flags() != wire.IPv4FlagDontFragment || ip.FragmentOffset() != 0:
			t.Errorf("%s: %v: flags %#x, fragment offset %d", c.name, f, ip.Flags(), ip.FragmentOffset())
		case !ip.IsChecksumValid():
			t.Errorf("%s: %v: bad IPv4 header checksum %#04x", c.name, f, ip.Checksum())
		case udp.DestinationPort() != wire.UDPPort || udp.Checksum() != 0:
			t.Errorf("%s: %v: UDP port %d, checksum %#04x", c.name, f, udp.DestinationPort(), udp.Checksum())
		case f.p.End != len(f.data):
			t.Errorf("%s: %v: %d bytes after the ICRC", c.name, f, len(f.data)-f.p.End)
		case !f.fromRxe && ip.ID() != 0:
			t.Errorf("%s: %v: softfabric sent IP ID %#04x", c.name, f, ip.ID())
		}
	})
	for _, name := range fixtures(t) {
		seen := map[uint16]int{}
		for _, f := range load(t, name).frames {
			if !f.fromRxe {
				continue
			}
			id := f.p.IPv4Header().ID()
			if j, dup := seen[id]; dup || id == 0 {
				t.Errorf("%s: %v: IP ID %#04x (also frame %d)", name, f, id, j)
			}
			seen[id] = f.i
		}
	}
}
