package rxereplay

// What the replay tests share: loading and describing the captured frames,
// rebuilding the connections and messages of a capture, rewriting rkeys,
// building softfabric queue pairs as the device builds them, and the
// replayer, which delivers frames to them as engine.Node does and collects
// what they transmit.

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/internal/pcapfix"
)

const (
	fixtureDir = "../fixtures/rxe"
	// pathMTU is the path MTU of every capture.
	pathMTU = 1024
	// t0 is the virtual time of a capture's first frame, in ns: not 0,
	// which the transport reads as "no time" in places.
	t0 = int64(1_000_000_000)
	// udQKey is the Q_Key of ibv_ud_pingpong, and of softfabric's.
	udQKey = 0x11111111
	// allAccess is what the perftest and pingpong ends grant.
	allAccess = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
)

var (
	sfIP  = netip.MustParseAddr("198.18.1.1")
	rxeIP = netip.MustParseAddr("198.18.1.2")
)

// frame is one captured frame, parsed.
type frame struct {
	i       int  // index in the file from 0 (Wireshark's frame number is i+1)
	fromRxe bool // rxe sent it: softfabric received it on rxetap0-rx
	t       int64
	data    []byte
	p       wire.Packet
	// replayed marks a frame softfabric sent in a replay rather than in
	// the capture; i counts those frames.
	replayed bool
}

func (f *frame) String() string {
	who := "softfabric→rxe"
	if f.fromRxe {
		who = "rxe→softfabric"
	}
	what := "frame"
	if f.replayed {
		what = "replay's frame"
	}
	return fmt.Sprintf("%s %d (%s %s)", what, f.i, who, describe(&f.p))
}

func (f *frame) psn() psn.PSN    { return psn.PSN(f.p.BTH().PSN()) }
func (f *frame) mask() wire.Mask { return f.p.Info.Mask }
func (f *frame) isRequest() bool { return f.mask()&wire.MaskRequest != 0 }

// describe summarises a parsed packet: opcode, destination QP, PSN and
// every extension header.
func describe(p *wire.Packet) string {
	if p.Info == nil {
		return "(not parsed)"
	}
	b := p.BTH()
	var s strings.Builder
	fmt.Fprintf(&s, "%v qp %#x psn %d", p.Opcode, b.DestQP(), b.PSN())
	if b.AckReq() {
		s.WriteString(" ackreq")
	}
	if a := p.AETH(); a != nil {
		fmt.Fprintf(&s, " %s msn %d", syndrome(a.Syndrome()), a.MSN())
	}
	if r := p.RETH(); r != nil {
		fmt.Fprintf(&s, " va %#x rkey %#x len %d", r.VA(), r.RKey(), r.DMALen())
	}
	if a := p.AtomicETH(); a != nil {
		fmt.Fprintf(&s, " va %#x rkey %#x swap/add %#x compare %#x", a.VA(), a.RKey(), a.SwapAdd(), a.Compare())
	}
	if a := p.AtomicAckETH(); a != nil {
		fmt.Fprintf(&s, " orig %#x", a.OrigData())
	}
	if d := p.DETH(); d != nil {
		fmt.Fprintf(&s, " qkey %#x srcqp %#x", d.QKey(), d.SrcQP())
	}
	if i := p.ImmDt(); i != nil {
		fmt.Fprintf(&s, " imm %#x", i.Imm())
	}
	if i := p.IETH(); i != nil {
		fmt.Fprintf(&s, " inv %#x", i.RKey())
	}
	if len(p.Payload) > 0 {
		fmt.Fprintf(&s, " %d bytes", len(p.Payload))
	}
	return s.String()
}

// describeFrame parses a frame and describes it.
func describeFrame(data []byte) string {
	var p wire.Packet
	if err := p.Parse(data); err != nil {
		return fmt.Sprintf("unparsable frame of %d bytes (%v)", len(data), err)
	}
	return describe(&p)
}

// syndrome names an AETH syndrome.
func syndrome(s uint8) string {
	v := wire.SyndromeValue(s)
	switch wire.SyndromeKind(s) {
	case wire.AckKindACK:
		return fmt.Sprintf("ACK(credits %#x)", v)
	case wire.AckKindRNR:
		return fmt.Sprintf("RNR-NAK(timer %d)", v)
	case wire.AckKindNAK:
		names := [...]string{"PSN sequence error", "invalid request", "remote access error", "remote operational error", "invalid RD request"}
		if int(v) < len(names) {
			return "NAK(" + names[v] + ")"
		}
		return fmt.Sprintf("NAK(%#x)", v)
	}
	return fmt.Sprintf("reserved-syndrome(%#x)", s)
}

// capture is one fixture file.
type capture struct {
	name   string
	frames []*frame
	// sfMAC and rxeMAC are the two stations' MAC addresses.
	sfMAC, rxeMAC [6]byte
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*capture{}
)

// fixtures lists the fixture files.
func fixtures(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(fixtureDir, "*.pcapng"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s (%v)", fixtureDir, err)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	sort.Strings(names)
	return names
}

// load reads and parses a fixture; any frame that does not parse, lacks a
// direction or has a bad ICRC fails the test. The result is shared and must
// not be modified.
func load(t testing.TB, name string) *capture {
	t.Helper()
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if c, ok := cache[name]; ok {
		return c
	}
	raw, err := pcapfix.ReadFrames(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) == 0 {
		t.Fatalf("%s: no frames", name)
	}
	c := &capture{name: name}
	for i, r := range raw {
		f := &frame{i: i, data: r.Data, t: t0 + r.Time.Sub(raw[0].Time).Nanoseconds()}
		switch r.Dir {
		case pcaplink.In:
			f.fromRxe = true
		case pcaplink.Out:
		default:
			t.Fatalf("%s: frame %d: no direction (not recorded by pcaplink?)", name, i)
		}
		if r.Truncated() {
			t.Fatalf("%s: frame %d: truncated to %d of %d bytes", name, i, len(r.Data), r.Length)
		}
		if err := f.p.Parse(f.data); err != nil {
			t.Fatalf("%s: frame %d (%d bytes): wire.Packet.Parse: %v", name, i, len(f.data), err)
		}
		if !f.p.CheckICRC() {
			t.Fatalf("%s: %v: ICRC %#08x, computed %#08x", name, f, f.p.ICRC(), f.p.ComputeICRC())
		}
		eth := f.p.Ethernet()
		if f.fromRxe {
			c.rxeMAC, c.sfMAC = eth.Src(), eth.Dst()
		} else {
			c.sfMAC, c.rxeMAC = eth.Src(), eth.Dst()
		}
		c.frames = append(c.frames, f)
	}
	cache[name] = c
	return c
}

// conn is a pair of queue pairs, softfabric's and rxe's, that talk in a
// capture, with the first PSN each side sent requests with.
type conn struct {
	ud              bool
	sfQPN, rxeQPN   uint32
	sfPSN, rxePSN   psn.PSN // first request PSN: the SQ PSN of each side
	sfReq, rxeReq   bool    // whether that side sent requests
	sfSeen, rxeSeen bool    // whether each QPN was seen (RC)
}

// conns finds the connections of a capture, in order of first appearance.
// RC frames carry no source QPN: each direction is tied to its connection
// by the UDP source port, which both rxe and softfabric derive from the
// pair of QPNs (TestRCSourcePortIsTheQPPairsFlowLabelPort pins it). UD
// frames name their source in the DETH.
func (c *capture) conns(t testing.TB) []*conn {
	t.Helper()
	var out []*conn
	byKey := map[uint64]*conn{}
	for _, f := range c.frames {
		b := f.p.BTH()
		var key uint64
		var cn *conn
		if d := f.p.DETH(); d != nil {
			sf, rx := b.DestQP(), d.SrcQP()
			if !f.fromRxe {
				sf, rx = rx, b.DestQP()
			}
			key = 1<<63 | uint64(sf)<<24 | uint64(rx)
			if cn = byKey[key]; cn == nil {
				cn = &conn{ud: true, sfQPN: sf, rxeQPN: rx}
			}
		} else {
			key = uint64(f.p.SrcPort())
			if cn = byKey[key]; cn == nil {
				cn = &conn{}
			}
			qpn := &cn.rxeQPN
			seen := &cn.rxeSeen
			if f.fromRxe {
				qpn, seen = &cn.sfQPN, &cn.sfSeen
			}
			if *seen && *qpn != b.DestQP() {
				t.Fatalf("%s: %v: UDP source port %d already seen with destination QP %#x", c.name, f, key, *qpn)
			}
			*qpn, *seen = b.DestQP(), true
		}
		if byKey[key] == nil {
			byKey[key] = cn
			out = append(out, cn)
		}
		if !f.isRequest() {
			continue
		}
		// The first PSN is the lowest one sent: with loss on the way,
		// the first packet need not be the first recorded.
		switch {
		case f.fromRxe && (!cn.rxeReq || f.psn().Before(cn.rxePSN)):
			cn.rxePSN, cn.rxeReq = f.psn(), true
		case !f.fromRxe && (!cn.sfReq || f.psn().Before(cn.sfPSN)):
			cn.sfPSN, cn.sfReq = f.psn(), true
		}
	}
	for _, cn := range out {
		if !cn.ud && (!cn.sfSeen || !cn.rxeSeen) {
			t.Fatalf("%s: a connection is seen in one direction only (%+v)", c.name, *cn)
		}
	}
	return out
}

// belongs reports whether f travels on cn.
func (cn *conn) belongs(f *frame) bool {
	b := f.p.BTH()
	if d := f.p.DETH(); d != nil {
		if f.fromRxe {
			return cn.ud && b.DestQP() == cn.sfQPN && d.SrcQP() == cn.rxeQPN
		}
		return cn.ud && b.DestQP() == cn.rxeQPN && d.SrcQP() == cn.sfQPN
	}
	if f.fromRxe {
		return !cn.ud && b.DestQP() == cn.sfQPN
	}
	return !cn.ud && b.DestQP() == cn.rxeQPN
}

// path is the address vector softfabric used towards rxe on cn, as
// device.Path builds it.
func (c *capture) path(cn *conn) wire.PathFields {
	return wire.PathFields{SrcMAC: c.sfMAC, DstMAC: c.rxeMAC, Src: sfIP, Dst: rxeIP, SrcPort: wire.SourcePort(cn.sfQPN, cn.rxeQPN)}
}

// message is one request a side sent (a send, write, read or atomic),
// rebuilt from the first copy of each of its packets in the capture.
type message struct {
	op          verbs.Opcode
	first, last psn.PSN
	length      uint32
	payload     []byte // sends and writes
	va          uint64 // RETH or AtomicETH
	rkey        uint32
	swapAdd     uint64 // AtomicETH
	compare     uint64
	imm         uint32   // immediate data or invalidated rkey
	frames      []*frame // the first copy of each packet, in PSN order
}

func (m *message) String() string {
	return fmt.Sprintf("%v of %d bytes at PSN %d (first sent in frame %d)", m.op, m.length, m.first, m.frames[0].i)
}

func (m *message) npkts() uint32 { return uint32(m.last.Diff(m.first)) + 1 }

// messages rebuilds the requests one side sent on cn, in PSN order. Each
// PSN is taken from its first copy in the capture; retransmissions, and
// repeated read requests that ask for the rest of a read, are not messages
// of their own. Every request packet of that side must be accounted for.
func (c *capture) messages(t testing.TB, cn *conn, fromRxe bool) []*message {
	t.Helper()
	start, ok := cn.sfPSN, cn.sfReq
	if fromRxe {
		start, ok = cn.rxePSN, cn.rxeReq
	}
	if !ok {
		return nil
	}
	byPSN := map[psn.PSN]*frame{}
	var reqs []*frame
	for _, f := range c.frames {
		if f.fromRxe == fromRxe && f.isRequest() && cn.belongs(f) {
			reqs = append(reqs, f)
			if byPSN[f.psn()] == nil {
				byPSN[f.psn()] = f
			}
		}
	}
	var out []*message
	p := start
	for byPSN[p] != nil {
		f := byPSN[p]
		m := &message{first: p, frames: []*frame{f}}
		switch mk := f.mask(); {
		case mk&wire.MaskRead != 0:
			r := f.p.RETH()
			m.op, m.length, m.va, m.rkey = verbs.OpRead, r.DMALen(), r.VA(), r.RKey()
			m.last = p.Add(packets(m.length) - 1)
		case mk&wire.MaskAtomic != 0:
			a := f.p.AtomicETH()
			m.op, m.length, m.last = verbs.OpFetchAdd, 8, p
			if f.p.Opcode == wire.RCCompareSwap {
				m.op = verbs.OpCmpSwap
			}
			m.va, m.rkey, m.swapAdd, m.compare = a.VA(), a.RKey(), a.SwapAdd(), a.Compare()
		case mk&wire.MaskFirst != 0:
			if r := f.p.RETH(); r != nil {
				m.va, m.rkey, m.length = r.VA(), r.RKey(), r.DMALen()
			}
			for q := p; ; q = q.Next() {
				g := byPSN[q]
				switch {
				case g == nil:
					t.Fatalf("%s: the message starting in %v has no packet with PSN %d", c.name, f, q)
				case q != p && g.mask()&(wire.MaskMiddle|wire.MaskLast) == 0:
					t.Fatalf("%s: %v does not continue the message starting in %v", c.name, g, f)
				case q != p:
					m.frames = append(m.frames, g)
				}
				m.payload = append(m.payload, g.p.Payload...)
				if g.mask()&wire.MaskLast != 0 {
					m.last = q
					m.op = requestOp(g)
					if i := g.p.ImmDt(); i != nil {
						m.imm = i.Imm()
					}
					if i := g.p.IETH(); i != nil {
						m.imm = i.RKey()
					}
					break
				}
			}
			if f.p.RETH() == nil {
				m.length = uint32(len(m.payload))
			} else if m.length != uint32(len(m.payload)) {
				t.Fatalf("%s: the write starting in %v carries %d bytes, its RETH says %d", c.name, f, len(m.payload), m.length)
			}
		default:
			t.Fatalf("%s: %v does not start a message, yet PSN %d is where the next one should start", c.name, f, p)
		}
		out = append(out, m)
		p = m.last.Next()
	}
	for _, f := range reqs {
		if !f.psn().InWindow(start, uint32(p.Diff(start))) {
			t.Fatalf("%s: %v lies outside the messages rebuilt (PSNs %d to %d)", c.name, f, start, p.Sub(1))
		}
	}
	return out
}

// packets is the number of packets a message or read response of length
// bytes takes at the path MTU: one at least.
func packets(length uint32) uint32 { return max(1, (length+pathMTU-1)/pathMTU) }

// readResponseOp is the opcode of packet k (from 0) of a read response of
// n packets.
func readResponseOp(k, n uint32) wire.Opcode {
	switch {
	case n == 1:
		return wire.RCReadResponseOnly
	case k == 0:
		return wire.RCReadResponseFirst
	case k == n-1:
		return wire.RCReadResponseLast
	}
	return wire.RCReadResponseMiddle
}

// fillPattern fills b with a pseudo-random pattern (xorshift32) that does
// not repeat at any MTU multiple, so that bytes read from the wrong
// address show.
func fillPattern(b []byte) {
	x := uint32(0x9e3779b9)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// requestOp is the work request opcode of the last packet of a send or write.
func requestOp(f *frame) verbs.Opcode {
	m := f.mask()
	switch {
	case m&wire.MaskWrite != 0 && m&wire.MaskImmDt != 0:
		return verbs.OpWriteImm
	case m&wire.MaskWrite != 0:
		return verbs.OpWrite
	case m&wire.MaskImmDt != 0:
		return verbs.OpSendImm
	case m&wire.MaskIETH != 0:
		return verbs.OpSendInv
	}
	return verbs.OpSend
}

// rewriteRKeys returns a copy of frame whose RETH or AtomicETH rkey, when
// keys names it, is replaced, with its ICRC recomputed. The replays use it
// because mr.Table draws the random half of every key itself: memory can be
// registered at the IOVA rxe named (mr.Table.RegisterAt), never under the
// rkey it named.
func rewriteRKeys(data []byte, keys map[uint32]uint32) []byte {
	out := bytes.Clone(data)
	var p wire.Packet
	if p.Parse(out) != nil {
		return out
	}
	changed := false
	if r := p.RETH(); r != nil {
		if k, ok := keys[r.RKey()]; ok {
			r.Encode(r.VA(), k, r.DMALen())
			changed = true
		}
	}
	if a := p.AtomicETH(); a != nil {
		if k, ok := keys[a.RKey()]; ok {
			a.Encode(a.VA(), k, a.SwapAdd(), a.Compare())
			changed = true
		}
	}
	if changed {
		wire.PutICRC(out[p.L3:p.End])
	}
	return out
}

// host is softfabric's side of a replay: its memory regions and
// completion queues.
type host struct {
	mrs      *mr.Table
	scq, rcq *verbs.CQ
}

func newHost() *host {
	return &host{mrs: mr.NewTable(256), scq: verbs.NewCQ(4096), rcq: verbs.NewCQ(4096)}
}

// region registers a fresh zeroed buffer of n bytes at the given IOVA.
func (h *host) region(t testing.TB, n int, iova uint64) *mr.Region {
	t.Helper()
	r, err := h.mrs.RegisterAt(make([]byte, n), iova, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newRC builds softfabric's queue pair of cn in RTS, as device.NewRC and
// device.ConnectRC with the perftest and pingpong options set it up:
// remote write, read and atomic access, path MTU 1024, timeout 14,
// retry count 7, RNR retry 7, min RNR timer 12, 16 reads and atomics each
// way, and the first PSNs each side used in the capture.
func (h *host) newRC(t testing.TB, c *capture, cn *conn, rq *verbs.RecvQueue) *rc.QP {
	t.Helper()
	q, err := rc.New(rc.Config{QPN: cn.sfQPN, MRs: h.mrs, SendCQ: h.scq, RecvCQ: h.rcq, RQ: rq, SQDepth: 1024})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, Access: allAccess &^ mr.LocalWrite, PKey: wire.DefaultPKey},
			verbs.AttrState | verbs.AttrAccess | verbs.AttrPKey},
		{verbs.QPAttr{State: verbs.StateRTR, Path: c.path(cn), PathMTU: pathMTU, DestQPN: cn.rxeQPN,
			RQPSN: uint32(cn.rxePSN), MinRNRTimer: 12, MaxDestRdAtomic: 16},
			verbs.AttrState | verbs.AttrPath | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMinRNRTimer | verbs.AttrMaxDestRdAtomic},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: uint32(cn.sfPSN), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatalf("queue pair %#x to %v: %v", cn.sfQPN, s.a.State, err)
		}
	}
	return q
}

// newUD builds softfabric's datagram queue pair of cn in RTS, as
// device.NewUD does, sending from the first PSN it used in the capture.
func (h *host) newUD(t testing.TB, cn *conn, rq *verbs.RecvQueue) *ud.QP {
	t.Helper()
	q, err := ud.New(ud.Config{QPN: cn.sfQPN, MRs: h.mrs, SendCQ: h.scq, RecvCQ: h.rcq, RQ: rq})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, QKey: udQKey, PKey: wire.DefaultPKey}, verbs.AttrState | verbs.AttrQKey | verbs.AttrPKey},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: pathMTU}, verbs.AttrState | verbs.AttrPathMTU},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: uint32(cn.sfPSN)}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// sendWR builds the work request that sends m again: its local buffer is
// a fresh region holding m's payload (sends, writes) or waiting for its
// result (reads, atomics), returned with it.
func (h *host) sendWR(t testing.TB, c *capture, cn *conn, m *message, id uint64, flags verbs.SendFlags) (verbs.SendWR, *mr.Region) {
	t.Helper()
	buf := h.region(t, max(int(m.length), 8), uint64(0x1000_0000)*(id+1))
	copy(buf.Bytes(), m.payload)
	wr := verbs.SendWR{
		ID: id, Op: m.op, Flags: flags,
		SGL:        []mr.SGE{{Addr: buf.Addr(), Length: m.length, LKey: buf.LKey()}},
		Imm:        m.imm,
		RemoteAddr: m.va, RKey: m.rkey,
	}
	switch m.op {
	case verbs.OpFetchAdd:
		wr.CompareAdd = m.swapAdd
	case verbs.OpCmpSwap:
		wr.CompareAdd, wr.Swap = m.compare, m.swapAdd
	}
	if cn.ud {
		ah, err := verbs.NewAddressHandle(c.path(cn), cn.rxeQPN, udQKey)
		if err != nil {
			t.Fatal(err)
		}
		wr.Dest = ah
	}
	return wr, buf
}

// poll takes every completion waiting on cq.
func poll(cq *verbs.CQ) []verbs.Completion {
	out := make([]verbs.Completion, cq.Len())
	return out[:cq.Poll(out)]
}

// sink is a link that keeps what is sent to it.
type sink struct{ frames [][]byte }

func (s *sink) Send(frames [][]byte) (int, error) {
	for _, f := range frames {
		s.frames = append(s.frames, bytes.Clone(f))
	}
	return len(frames), nil
}

func (s *sink) Recv([][]byte, []int) (int, error) { return 0, nil }
func (s *sink) MaxFrame() int                     { return 9018 }

// replayer drives softfabric queue pairs with captured frames in virtual
// time. It delivers a frame as engine.Node does (parse, ICRC check, demux
// by destination QPN, Receive), but calls Transmit only when asked: the
// tests ask where the capture shows softfabric transmitting, so that what
// the transport coalesces (ACKs) it coalesces over the same frames as it
// did then, whatever batches the engine received them in.
type replayer struct {
	t     testing.TB
	c     *capture
	qps   []engine.QP
	byQPN map[uint32]engine.QP
	batch *link.Batch
	out   sink
	now   int64
	// rkeys maps the rkeys rxe named to the replay's (rewriteRKeys).
	rkeys map[uint32]uint32
	// sent counts the frames softfabric transmitted, taken those expect
	// took from out.
	sent, taken int
	// onSend, when set, sees each frame softfabric transmits as it
	// transmits it, before expect compares it.
	onSend func(data []byte)
	pkt    wire.Packet
}

func newReplayer(t testing.TB, c *capture, qps ...engine.QP) *replayer {
	r := &replayer{t: t, c: c, qps: qps, byQPN: map[uint32]engine.QP{}, batch: link.NewBatch(link.IdealBatch, 9018), now: t0}
	for _, q := range qps {
		r.byQPN[q.QPN()] = q
	}
	return r
}

// at moves the virtual clock to ts, never backwards.
func (r *replayer) at(ts int64) { r.now = max(r.now, ts) }

// deliver hands one of rxe's frames to softfabric.
func (r *replayer) deliver(f *frame) {
	r.t.Helper()
	r.at(f.t)
	data := f.data
	if len(r.rkeys) > 0 {
		data = rewriteRKeys(data, r.rkeys)
	}
	p := &r.pkt
	if err := p.Parse(data); err != nil {
		r.t.Fatalf("%s: %v: %v", r.c.name, f, err)
	}
	if !p.CheckICRC() {
		r.t.Fatalf("%s: %v: bad ICRC after rewriting", r.c.name, f)
	}
	q := r.byQPN[p.BTH().DestQP()]
	if q == nil {
		r.t.Fatalf("%s: %v: no queue pair %#x", r.c.name, f, p.BTH().DestQP())
	}
	q.Receive(p, r.now)
}

// transmit lets every queue pair send what it has now, as engine.Node's
// transmit pass does, into r.out.
func (r *replayer) transmit() {
	before := len(r.out.frames)
	for _, q := range r.qps {
		for first := true; first || q.HasWork(); first = false {
			q.Transmit(r.now, r.batch)
			full := r.batch.Room() == 0
			n, _ := r.batch.Flush(&r.out)
			r.sent += n
			if !full {
				break
			}
		}
	}
	if r.onSend != nil {
		for _, data := range r.out.frames[before:] {
			r.onSend(data)
		}
	}
}

// deadline is the earliest timer of the queue pairs, 0 when none runs.
func (r *replayer) deadline() int64 {
	var d int64
	for _, q := range r.qps {
		if qd := q.Deadline(); qd != 0 && (d == 0 || qd < d) {
			d = qd
		}
	}
	return d
}

// runTimers fires the timers due up to ts, transmitting at each.
func (r *replayer) runTimers(ts int64) {
	for d := r.deadline(); d != 0 && d <= ts; d = r.deadline() {
		r.at(d)
		before := r.sent
		r.transmit()
		if r.sent == before && r.deadline() == d {
			break // a timer that does nothing when it fires
		}
	}
	r.at(ts)
}

// expect checks that the next frame softfabric sends is want, a frame it
// sent in the capture, byte for byte. When nothing waits to be compared it
// transmits at want's time; when that sends nothing either, the timers fire
// (at most a few): a retransmission need not fall due at the same instant
// in virtual time as it did in real time.
func (r *replayer) expect(want *frame) {
	r.t.Helper()
	r.expectAmong(want, nil)
}

// expectAmong is expect for a capture that lacks some of the frames
// softfabric sent (SOFTFABRIC_DEBUG_LINK_FAULTS drops them above pcaplink):
// the frames it sends before one equal to want are handed to skip, which
// decides whether the capture may lack them. With skip nil, none may be
// skipped.
func (r *replayer) expectAmong(want *frame, skip func(got []byte)) {
	r.t.Helper()
	r.at(want.t)
	for {
		if len(r.out.frames) == 0 {
			r.transmit()
		}
		for i := 0; i < 4 && len(r.out.frames) == 0; i++ {
			d := r.deadline()
			if d == 0 {
				break
			}
			r.at(d)
			r.transmit()
		}
		if len(r.out.frames) == 0 {
			r.t.Fatalf("%s: %v: softfabric sends nothing (virtual time %v after the first frame, no timer left)",
				r.c.name, want, durationSince(r.now))
		}
		got := r.out.frames[0]
		r.out.frames = r.out.frames[1:]
		r.taken++
		if bytes.Equal(got, want.data) {
			return
		}
		if skip == nil {
			r.t.Fatalf("%s: %v: softfabric sends %s instead%s", r.c.name, want, describeFrame(got), firstDifference(got, want.data))
		}
		skip(got)
	}
}

// finish checks that softfabric has nothing more to send at the time of the
// capture's last frame. Timers are not run: what they would send after the
// capture ends is not in it.
func (r *replayer) finish() {
	r.t.Helper()
	r.transmit()
	for i, f := range r.out.frames {
		r.t.Errorf("%s: softfabric sends a frame the capture does not have (%d after its last one): %s", r.c.name, i+1, describeFrame(f))
	}
	r.out.frames = nil
}

// lockstep replays the whole capture: rxe's frames are delivered at their
// times, and every frame softfabric sent must be the next one it sends
// (expect). before runs before each of softfabric's frames (to post the
// work request it starts), after after each of rxe's (to check its
// effect); either may be nil.
func (r *replayer) lockstep(before, after func(f *frame)) {
	r.t.Helper()
	for _, f := range r.c.frames {
		if f.fromRxe {
			r.deliver(f)
			if after != nil {
				after(f)
			}
			continue
		}
		if before != nil {
			before(f)
		}
		r.expect(f)
	}
	r.finish()
}

// sender is a queue pair work can be posted to.
type sender interface {
	PostSend(*verbs.SendWR) error
}

// postAtFirstPacket returns a lockstep hook that posts each of msgs, sent
// on cn by q, right before the capture shows its first packet, as an
// application that sends in answer to what it receives (a ping-pong) did.
// Each work request is signalled, as the ping-pongs' are.
func postAtFirstPacket(t testing.TB, h *host, c *capture, cn *conn, q sender, msgs []*message) func(f *frame) {
	byFirst := map[psn.PSN]*message{}
	for _, m := range msgs {
		byFirst[m.first] = m
	}
	id := uint64(1000)
	return func(f *frame) {
		m := byFirst[f.psn()]
		if !f.isRequest() || !cn.belongs(f) || m == nil {
			return
		}
		delete(byFirst, f.psn())
		id++
		wr, _ := h.sendWR(t, c, cn, m, id, verbs.Signaled)
		if err := q.PostSend(&wr); err != nil {
			t.Fatalf("%s: posting %v: %v", c.name, m, err)
		}
	}
}

func durationSince(now int64) string { return fmt.Sprintf("%.3fms", float64(now-t0)/1e6) }

// mismatch is the index of the first byte where a and b differ, or -1
// when they are equal.
func mismatch(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// firstDifference names the first byte where two frames differ, and the
// header field it falls in.
func firstDifference(got, want []byte) string {
	n := min(len(got), len(want))
	i := 0
	for i < n && got[i] == want[i] {
		i++
	}
	if i == n && len(got) == len(want) {
		return ""
	}
	if i == n {
		return fmt.Sprintf(" (%d bytes long, the capture's %d)", len(got), len(want))
	}
	var p wire.Packet
	field := "payload"
	if p.Parse(want) == nil {
		field = fieldAt(&p, i)
	}
	return fmt.Sprintf(" (first difference at byte %d, %s: %#02x, the capture has %#02x)", i, field, got[i], want[i])
}

// fieldAt names the header field that holds byte off of p's frame.
func fieldAt(p *wire.Packet, off int) string {
	switch {
	case off < p.L3:
		return "Ethernet header"
	case off < p.L4:
		names := map[int]string{1: "TOS", 2: "total length", 3: "total length", 4: "ID", 5: "ID", 6: "flags", 7: "fragment offset",
			8: "TTL", 9: "protocol", 10: "header checksum", 11: "header checksum"}
		if s, ok := names[off-p.L3]; ok && !p.IPv6 {
			return "IPv4 " + s
		}
		return "IP header"
	case off < p.BTHOff:
		return "UDP header"
	case off < p.BTHOff+wire.BTHSize:
		return [...]string{"BTH opcode", "BTH flags", "BTH P_Key", "BTH P_Key", "BTH FECN/BECN", "BTH dest QP", "BTH dest QP", "BTH dest QP",
			"BTH AckReq", "BTH PSN", "BTH PSN", "BTH PSN"}[off-p.BTHOff]
	case off < p.BTHOff+p.Info.HeaderLen:
		return "extension headers"
	case off >= p.End-wire.ICRCSize:
		return "ICRC"
	}
	return "payload or pad"
}
