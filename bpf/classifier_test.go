package bpf

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// XDP verdicts, from include/uapi/linux/bpf.h.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
)

func verdictName(v uint32) string {
	switch v {
	case xdpAborted:
		return "XDP_ABORTED"
	case xdpDrop:
		return "XDP_DROP"
	case xdpPass:
		return "XDP_PASS"
	case 3:
		return "XDP_TX"
	case xdpRedirect:
		return "XDP_REDIRECT"
	}
	return fmt.Sprint(v)
}

var variants = []struct {
	name string
	o    Options
}{{"xdp", Options{}}, {"xdp.frags", Options{Frags: true}}}

// load loads a classifier with P_Key 0xffff allowed and QP 0x11 routed to
// context 1, and closes it when the test ends. Loading BPF needs root.
func load(t *testing.T, o Options) *Classifier {
	t.Helper()
	netnstest.Require(t)
	c, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.AllowPKey(wire.DefaultPKey); err != nil {
		t.Fatal(err)
	}
	if err := c.SetQP(0x11, 1); err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs the program once over frame with zeroed counters and returns
// the verdict and the counters it left.
func run(t *testing.T, c *Classifier, frame []byte) (uint32, Counters) {
	t.Helper()
	if err := c.ResetCounters(); err != nil {
		t.Fatal(err)
	}
	v, err := c.Program().Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatalf("run (%d bytes): %v", len(frame), err)
	}
	n, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return v, n
}

// expect runs frame and checks the verdict and that want is exactly the
// set of counters that moved.
func expect(t *testing.T, c *Classifier, name string, frame []byte, verdict uint32, want Counters) {
	t.Helper()
	v, got := run(t, c, frame)
	if v != verdict {
		t.Errorf("%s: verdict %s, want %s", name, verdictName(v), verdictName(verdict))
	}
	if got != want {
		t.Errorf("%s: counters\n got %+v\nwant %+v", name, got, want)
	}
}

func TestVerdicts(t *testing.T) {
	known := roce{opcode: wire.RCSendOnly, qpn: 0x11, payload: 64}
	for _, vr := range variants {
		t.Run(vr.name, func(t *testing.T) {
			c := load(t, vr.o)
			for _, tc := range []struct {
				name    string
				frame   []byte
				verdict uint32
				want    Counters
			}{
				{"arp", arpFrame(t), xdpPass, Counters{Passed: 1}},
				{"ipv4 tcp to 4791", tcpFrame(t), xdpPass, Counters{Passed: 1}},
				{"ipv4 icmp", pingFrame(t), xdpPass, Counters{Passed: 1}},
				{"udp to 4792", udpFrame(t, 40000, 4792), xdpPass, Counters{Passed: 1}},
				{"udp from 4791", udpFrame(t, 4791, 53), xdpPass, Counters{Passed: 1}},
				{"ipv6 nd", ndFrame(t), xdpPass, Counters{Passed: 1}},
				{"ipv4 first fragment", fragment(t, known.frame(t), false), xdpPass, Counters{Passed: 1}},
				{"ipv4 later fragment", fragment(t, known.frame(t), true), xdpPass, Counters{Passed: 1}},
				{"ipv6 hop-by-hop", hopByHop(t, roce{v6: true, qpn: 0x11}.frame(t)), xdpPass, Counters{Passed: 1}},
				{"udp 4791 ipv4", known.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"udp 4791 ipv6", roce{v6: true, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"udp 4791 vlan ipv4", roce{vlan: true, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"udp 4791 vlan ipv6", roce{vlan: true, v6: true, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"udp 4791 ipv4 options", roce{ipOpts: []byte{0x94, 4, 0, 0}, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"udp 4791 ipv4 40 bytes of options", roce{ipOpts: make([]byte, 40), qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"bad version", roce{tver: 1, qpn: 0x11}.frame(t), xdpDrop, Counters{BadVersion: 1}},
				{"bad version 15", roce{v6: true, tver: 15, qpn: 0x11}.frame(t), xdpDrop, Counters{BadVersion: 1}},
				{"bad p_key", roce{pkey: 0x8001, qpn: 0x11}.frame(t), xdpDrop, Counters{BadPKey: 1}},
				{"limited member of 0xffff", roce{pkey: 0x7fff, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
				{"unknown qpn", roce{qpn: 0x12}.frame(t), xdpDrop, Counters{UnknownQPN: 1}},
				{"unknown qpn ipv6 vlan", roce{v6: true, vlan: true, qpn: 0x110000}.frame(t), xdpDrop, Counters{UnknownQPN: 1}},
				{"ack", roce{opcode: wire.RCAcknowledge, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
			} {
				expect(t, c, tc.name, tc.frame, tc.verdict, tc.want)
			}
		})
	}
}

// TestTruncated runs every prefix of RoCE frames: too short for the UDP
// header it is not (yet) RoCE and goes to the kernel, which drops it; with
// UDP 4791 but no whole BTH it is dropped as short; with a BTH it takes the
// QPN path. Nothing truncated is ever redirected.
func TestTruncated(t *testing.T) {
	for _, vr := range variants {
		t.Run(vr.name, func(t *testing.T) {
			c := load(t, vr.o)
			for _, r := range []roce{
				{qpn: 0x11},
				{v6: true, qpn: 0x11},
				{vlan: true, qpn: 0x11},
				{vlan: true, v6: true, qpn: 0x11},
				{ipOpts: make([]byte, 12), qpn: 0x11},
				{qpn: 0x99},
			} {
				full := r.frame(t)
				hl := r.headerLen()
				// BPF_PROG_TEST_RUN wants at least an Ethernet header.
				for n := wire.EthernetSize; n <= len(full); n++ {
					var want Counters
					verdict := uint32(xdpDrop)
					switch {
					case n < hl:
						verdict, want.Passed = xdpPass, 1
					case n < hl+wire.BTHSize:
						want.Short = 1
					case r.qpn == 0x11:
						want.NoSocket = 1
					default:
						want.UnknownQPN = 1
					}
					expect(t, c, fmt.Sprintf("%+v cut to %d", r, n), full[:n], verdict, want)
				}
			}
		})
	}
}

func TestPKeys(t *testing.T) {
	c := load(t, Options{})
	if err := c.RemovePKey(0xffff); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePKey(0xffff); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("second remove: %v", err)
	}
	// An empty table admits nothing.
	expect(t, c, "empty table", roce{qpn: 0x11}.frame(t), xdpDrop, Counters{BadPKey: 1})

	// Limited membership (0x1234) admits the full member too: only the low
	// 15 bits are compared.
	for _, p := range []uint16{0x1234, 0x8002} {
		if err := c.AllowPKey(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		pkey uint16
		ok   bool
	}{
		{0x1234, true}, {0x9234, true}, {0x0002, true}, {0x8002, true},
		{0xffff, false}, {0x7fff, false}, {0x1235, false}, {0x0000, false},
	} {
		want := Counters{BadPKey: 1}
		if tc.ok {
			want = Counters{NoSocket: 1}
		}
		expect(t, c, fmt.Sprintf("p_key %#04x", tc.pkey), roce{pkey: tc.pkey, qpn: 0x11}.frame(t), xdpDrop, want)
	}
	got, err := c.PKeys()
	if err != nil || !slices.Equal(got, []uint16{0x1234, 0x8002}) {
		t.Fatalf("PKeys = %#04x, %v", got, err)
	}
	// Re-allowing with the other membership replaces the entry.
	if err := c.AllowPKey(0x9234); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.PKeys(); !slices.Equal(got, []uint16{0x8002, 0x9234}) {
		t.Fatalf("PKeys = %#04x", got)
	}
	if err := c.AllowPKey(0x8000); !errors.Is(err, ErrInvalid) {
		t.Fatalf("AllowPKey(0x8000): %v", err)
	}
	// The table holds MaxPKeys entries.
	for i := range MaxPKeys {
		if err := c.AllowPKey(uint16(0x100 + i)); err != nil && i+2 < MaxPKeys {
			t.Fatalf("p_key %d: %v", i, err)
		}
	}
	if err := c.AllowPKey(0x7000); err == nil {
		t.Fatal("a full P_Key table took one more")
	}
}

// Word offsets into an untagged IPv4 RoCE frame for the rule tests.
const (
	offUDPPorts  = wire.EthernetSize + wire.IPv4MinSize                // source port << 16 | dest port
	offBTH       = wire.EthernetSize + wire.IPv4MinSize + wire.UDPSize // opcode << 24 | flags << 16 | P_Key
	offBTHDestQP = offBTH + 4                                          // FECN/BECN << 24 | dest QP
)

func TestRules(t *testing.T) {
	opcodeIs := func(op wire.Opcode) MatchUnit {
		return MatchUnit{Offset: offBTH, Mask: 0xff000000, Value: uint32(op) << 24}
	}
	qpIs := func(qpn uint32) MatchUnit {
		return MatchUnit{Offset: offBTHDestQP, Mask: 0x00ffffff, Value: qpn}
	}
	// The 0xc000-0xc0ff source port range.
	sportIn := MatchUnit{Offset: offUDPPorts, Mask: 0xff000000, Value: 0xc0000000}

	for _, vr := range variants {
		t.Run(vr.name, func(t *testing.T) {
			c := load(t, vr.o)
			set := func(i int, r Rule) {
				t.Helper()
				if err := c.SetRule(i, r); err != nil {
					t.Fatal(err)
				}
			}
			hits := func(c Counters, rule int) Counters {
				c.RuleHits[rule] = 1
				return c
			}

			// Acknowledges to any QP are dropped; sends only from ports
			// 0xc000-0xc0ff to QP 0x500 go to context 3; QP 0x600 goes to
			// the kernel.
			set(2, Rule{Units: []MatchUnit{opcodeIs(wire.RCAcknowledge)}, Action: ActionDrop})
			set(5, Rule{Units: []MatchUnit{opcodeIs(wire.RCSendOnly), qpIs(0x500), sportIn}, Action: ActionRedirect, Context: 3})
			set(9, Rule{Units: []MatchUnit{qpIs(0x600)}, Action: ActionPass})

			expect(t, c, "ack to known qp", roce{opcode: wire.RCAcknowledge, qpn: 0x11}.frame(t), xdpDrop, hits(Counters{RuleDrop: 1}, 2))
			expect(t, c, "ack to qp 0x600: first rule wins", roce{opcode: wire.RCAcknowledge, qpn: 0x600}.frame(t), xdpDrop, hits(Counters{RuleDrop: 1}, 2))
			expect(t, c, "send to 0x500", roce{opcode: wire.RCSendOnly, qpn: 0x500, sport: 0xc012}.frame(t), xdpDrop, hits(Counters{NoSocket: 1}, 5))
			expect(t, c, "send to 0x500 ipv6: offsets move", roce{v6: true, opcode: wire.RCSendOnly, qpn: 0x500, sport: 0xc012}.frame(t), xdpDrop, Counters{UnknownQPN: 1})
			expect(t, c, "send to 0x500 wrong port", roce{opcode: wire.RCSendOnly, qpn: 0x500, sport: 0xc112}.frame(t), xdpDrop, Counters{UnknownQPN: 1})
			expect(t, c, "write to 0x500", roce{opcode: wire.RCWriteFirst, qpn: 0x500, sport: 0xc012, payload: 16}.frame(t), xdpDrop, Counters{UnknownQPN: 1})
			expect(t, c, "send to 0x600", roce{opcode: wire.RCSendOnly, qpn: 0x600}.frame(t), xdpPass, hits(Counters{Passed: 1}, 9))
			expect(t, c, "send to 0x11: no rule", roce{opcode: wire.RCSendOnly, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1})
			// Rules come after the version and P_Key checks.
			expect(t, c, "ack with bad p_key", roce{opcode: wire.RCAcknowledge, pkey: 0x8001, qpn: 0x11}.frame(t), xdpDrop, Counters{BadPKey: 1})
			expect(t, c, "ack with bad version", roce{opcode: wire.RCAcknowledge, tver: 2, qpn: 0x11}.frame(t), xdpDrop, Counters{BadVersion: 1})

			// Precedence goes by index, not by insertion order.
			set(1, Rule{Units: []MatchUnit{qpIs(0x600)}, Action: ActionDrop})
			expect(t, c, "send to 0x600 behind rule 1", roce{opcode: wire.RCSendOnly, qpn: 0x600}.frame(t), xdpDrop, hits(Counters{RuleDrop: 1}, 1))
			if err := c.DeleteRule(1); err != nil {
				t.Fatal(err)
			}
			expect(t, c, "send to 0x600 again", roce{opcode: wire.RCSendOnly, qpn: 0x600}.frame(t), xdpPass, hits(Counters{Passed: 1}, 9))

			// A unit beyond the end of the frame does not match, even with
			// a zero mask; inside the frame the zero mask matches anything.
			set(31, Rule{Units: []MatchUnit{{Offset: MaxMatchOffset - 4}}, Action: ActionPass})
			short := roce{qpn: 0x11}.frame(t)             // 62 bytes
			long := roce{qpn: 0x11, payload: 80}.frame(t) // 142 bytes
			exact := roce{qpn: 0x11, payload: 74}.frame(t)[:MaxMatchOffset]
			expect(t, c, "unit beyond the frame", short, xdpDrop, Counters{NoSocket: 1})
			expect(t, c, "unit inside the frame", long, xdpPass, hits(Counters{Passed: 1}, 31))
			expect(t, c, "unit ending at the frame's end", exact, xdpPass, hits(Counters{Passed: 1}, 31))
			expect(t, c, "unit one byte past the end", exact[:MaxMatchOffset-1], xdpDrop, Counters{NoSocket: 1})

			got, err := c.Rules()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 4 || !reflect.DeepEqual(got[5], Rule{Units: []MatchUnit{opcodeIs(wire.RCSendOnly), qpIs(0x500), sportIn}, Action: ActionRedirect, Context: 3}) {
				t.Fatalf("Rules = %+v", got)
			}
			for _, i := range []int{2, 5, 9, 31} {
				if err := c.DeleteRule(i); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := c.Rules(); err != nil || len(got) != 0 {
				t.Fatalf("Rules after delete = %+v, %v", got, err)
			}
			expect(t, c, "ack after delete", roce{opcode: wire.RCAcknowledge, qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1})
		})
	}
}

// TestAllRules fills the table: each rule matches one destination QP, and
// each frame is counted against its own rule only.
func TestAllRules(t *testing.T) {
	c := load(t, Options{})
	for i := range MaxRules {
		act := ActionDrop
		if i%2 == 1 {
			act = ActionPass
		}
		err := c.SetRule(i, Rule{Units: []MatchUnit{
			{Offset: offBTHDestQP, Mask: 0x00ffffff, Value: uint32(0x1000 + i)},
			{Offset: offBTH, Mask: 0x0000ffff, Value: 0xffff},
			{Offset: offBTH, Mask: 0x000f0000},
			{Offset: offUDPPorts, Mask: 0xffff, Value: wire.UDPPort},
		}, Action: act})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range MaxRules {
		want := Counters{RuleDrop: 1}
		verdict := uint32(xdpDrop)
		if i%2 == 1 {
			want, verdict = Counters{Passed: 1}, xdpPass
		}
		want.RuleHits[i] = 1
		expect(t, c, fmt.Sprintf("rule %d", i), roce{qpn: uint32(0x1000 + i)}.frame(t), verdict, want)
	}
	expect(t, c, "no rule", roce{qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1})
}

func TestRuleValidation(t *testing.T) {
	c := load(t, Options{})
	u := MatchUnit{Offset: 10, Mask: 0xff, Value: 1}
	for _, tc := range []struct {
		i int
		r Rule
	}{
		{-1, Rule{Units: []MatchUnit{u}}},
		{MaxRules, Rule{Units: []MatchUnit{u}}},
		{0, Rule{}},
		{0, Rule{Units: []MatchUnit{u, u, u, u, u}}},
		{0, Rule{Units: []MatchUnit{{Offset: MaxMatchOffset - 3}}}},
		{0, Rule{Units: []MatchUnit{{Offset: 0, Mask: 0xf0, Value: 0x01}}}},
		{0, Rule{Units: []MatchUnit{u}, Context: MaxContexts}},
		{0, Rule{Units: []MatchUnit{u}, Action: 3}},
	} {
		if err := c.SetRule(tc.i, tc.r); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetRule(%d, %+v): %v", tc.i, tc.r, err)
		}
	}
	if err := c.SetRule(0, Rule{Units: []MatchUnit{{Offset: MaxMatchOffset - 4}}, Action: ActionDrop, Context: MaxContexts}); err != nil {
		t.Errorf("drop rule with a context: %v", err)
	}
	if err := c.DeleteRule(MaxRules); !errors.Is(err, ErrInvalid) {
		t.Errorf("DeleteRule(MaxRules): %v", err)
	}
	if err := c.DeleteRule(7); err != nil {
		t.Errorf("DeleteRule of an empty slot: %v", err)
	}
	for _, err := range []error{
		c.SetQP(1, MaxContexts),
		c.SetQP(1<<24, 0),
		c.SetSocket(MaxContexts, 0, 1),
		c.SetSocket(0, MaxQueues, 1),
		c.SetSocket(-1, 0, 1),
		c.SetSocket(0, 0, -1),
		c.DeleteSocket(0, MaxQueues),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	}
	// Not an AF_XDP socket.
	if err := c.SetSocket(0, 0, 0); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("SetSocket(stdin): %v", err)
	}
	if err := c.DeleteSocket(3, 5); err != nil {
		t.Errorf("DeleteSocket of an empty slot: %v", err)
	}
}

func TestQPs(t *testing.T) {
	c := load(t, Options{})
	for qpn, ctx := range map[uint32]uint32{0x12: 0, 0xffffff: 15, 0x11: 2} {
		if err := c.SetQP(qpn, ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.QPs()
	if err != nil || !reflect.DeepEqual(got, map[uint32]uint32{0x11: 2, 0x12: 0, 0xffffff: 15}) {
		t.Fatalf("QPs = %v, %v", got, err)
	}
	expect(t, c, "qp 0xffffff", roce{qpn: 0xffffff}.frame(t), xdpDrop, Counters{NoSocket: 1})
	if err := c.DeleteQP(0x12); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteQP(0x12); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("second DeleteQP: %v", err)
	}
	expect(t, c, "deleted qp", roce{qpn: 0x12}.frame(t), xdpDrop, Counters{UnknownQPN: 1})
}

// TestJumbo runs 9000-byte frames through the xdp.frags variant, which
// BPF_PROG_TEST_RUN hands them as multi-buffer frames.
func TestJumbo(t *testing.T) {
	frame := roce{qpn: 0x11, payload: 8900}.frame(t)
	c := load(t, Options{Frags: true})
	expect(t, c, "jumbo", frame, xdpDrop, Counters{NoSocket: 1})
	expect(t, c, "jumbo unknown qpn", roce{v6: true, qpn: 0x12, payload: 8900}.frame(t), xdpDrop, Counters{UnknownQPN: 1})
}
