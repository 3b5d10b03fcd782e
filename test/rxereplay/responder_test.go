package rxereplay

// The *-rxe-client captures, where rxe was the requester: softfabric's
// queue pairs are rebuilt as they were (QPN, PSNs, peer, path), rxe's
// frames delivered in capture order, and softfabric must answer exactly as
// it did then, byte for byte (opcodes, PSNs, AckReq, AETH syndromes and
// MSNs, read response payloads, atomic results, ICRC). Memory after
// writes and atomics, and receive completions, are checked too.
//
// rxe's RETH and AtomicETH name softfabric's rkeys and addresses of the
// time. The replay registers memory at those addresses (RegisterAt) and
// rewrites only the rkey, recomputing the ICRC: mr.Table draws the random
// half of a key itself. Its content is what softfabric's read responses
// and atomic acknowledges show it held (all zeros in these captures).

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

func TestResponderAnswersRxeAsInTheCapture(t *testing.T) {
	for _, name := range []string{
		"write-rxe-client.pcapng",
		"send-rxe-client.pcapng",
		"read-rxe-client.pcapng",
		"atomic-fetch-and-add-rxe-client.pcapng",
		"atomic-cmp-and-swap-rxe-client.pcapng",
		"rc-pingpong-rxe-client.pcapng",
		"srq-pingpong-rxe-client.pcapng",
	} {
		t.Run(strings.TrimSuffix(name, ".pcapng"), func(t *testing.T) { replayRCResponder(t, load(t, name)) })
	}
}

// remote is the memory rxe's requests addressed: a region per rkey it
// named, at the addresses it named.
type remote struct {
	rkeys   map[uint32]uint32 // rxe's rkey → the replay region's
	regions map[uint32]*mr.Region
}

// at returns the bytes of n at va under rxe's rkey.
func (m *remote) at(t testing.TB, rkey uint32, va uint64, n uint32) []byte {
	t.Helper()
	r := m.regions[rkey]
	off := va - r.Addr()
	if va < r.Addr() || off+uint64(n) > uint64(r.Len()) {
		t.Fatalf("va %#x + %d outside the region at %#x", va, n, r.Addr())
	}
	return r.Bytes()[off : off+uint64(n)]
}

// newRemote registers the memory msgs address, filled with what
// softfabric's answers in the capture show it held: read response payloads
// and the first original value of each atomic target.
func newRemote(t testing.TB, h *host, c *capture, cn *conn, msgs []*message) *remote {
	t.Helper()
	lo, hi := map[uint32]uint64{}, map[uint32]uint64{}
	for _, m := range msgs {
		if m.op.IsSend() || m.length == 0 {
			continue
		}
		if l, ok := lo[m.rkey]; !ok || m.va < l {
			lo[m.rkey] = m.va
		}
		hi[m.rkey] = max(hi[m.rkey], m.va+uint64(m.length))
	}
	mem := &remote{rkeys: map[uint32]uint32{}, regions: map[uint32]*mr.Region{}}
	for k, l := range lo {
		r := h.region(t, int(hi[k]-l), l)
		mem.rkeys[k], mem.regions[k] = r.RKey(), r
	}
	answers := map[uint32]*frame{} // softfabric's response frames by PSN
	for _, f := range c.frames {
		if !f.fromRxe && cn.belongs(f) && f.mask()&wire.MaskResponse != 0 {
			answers[uint32(f.psn())] = f
		}
	}
	set := map[uint64]bool{}
	for _, m := range msgs {
		switch {
		case m.op == verbs.OpRead:
			for k := range m.npkts() {
				if f := answers[uint32(m.first.Add(k))]; f != nil {
					copy(mem.at(t, m.rkey, m.va+uint64(k*pathMTU), uint32(len(f.p.Payload))), f.p.Payload)
				}
			}
		case m.op.IsAtomic() && !set[m.va]:
			f := answers[uint32(m.first)]
			if f == nil || f.p.AtomicAckETH() == nil {
				t.Fatalf("%s: no atomic acknowledge for %v", c.name, m)
			}
			binary.NativeEndian.PutUint64(mem.at(t, m.rkey, m.va, 8), f.p.AtomicAckETH().OrigData())
			set[m.va] = true
		}
	}
	return mem
}

// receives posts n receives with IDs from firstID, each into a buffer of
// its own of size bytes, and returns the buffers by work request ID.
func receives(t testing.TB, h *host, post func(*verbs.RecvWR) error, n, size int, firstID uint64) map[uint64]*mr.Region {
	t.Helper()
	bufs := map[uint64]*mr.Region{}
	for i := range n {
		id := firstID + uint64(i)
		b := h.region(t, size, 0x7000_0000+id<<20)
		if err := post(&verbs.RecvWR{ID: id, SGL: []mr.SGE{{Addr: b.Addr(), Length: uint32(size), LKey: b.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		bufs[id] = b
	}
	return bufs
}

func replayRCResponder(t *testing.T, c *capture) {
	h := newHost()
	conns := c.conns(t)
	shared := strings.HasPrefix(c.name, "srq-")
	var srq *verbs.RecvQueue
	if shared {
		srq = verbs.NewSRQ(1024)
	}
	var (
		qps      []engine.QP
		befores  []func(*frame)
		incoming = map[uint32][]*message{} // rxe's messages by softfabric QPN
		outgoing int
		recvBufs = map[uint64]*mr.Region{}
		mems     = map[uint32]*remote{} // by softfabric QPN
		rkeys    = map[uint32]uint32{}
		// rxe's writes by the index of their last frame
		lastWrite = map[int]*message{}
	)
	for i, cn := range conns {
		in := c.messages(t, cn, true)
		out := c.messages(t, cn, false)
		incoming[cn.sfQPN] = in
		outgoing += len(out)
		rq := srq
		if !shared {
			rq = verbs.NewRecvQueue(1024)
		}
		sends, size := 0, 1
		for _, m := range in {
			if m.op.IsSend() {
				sends++
				size = max(size, len(m.payload))
			}
			if m.op.IsWrite() {
				lastWrite[m.frames[len(m.frames)-1].i] = m
			}
		}
		// The applications post their receives before they connect.
		for id, b := range receives(t, h, rq.Post, sends, size, uint64(i+1)<<16) {
			recvBufs[id] = b
		}
		mem := newRemote(t, h, c, cn, in)
		mems[cn.sfQPN] = mem
		for k, v := range mem.rkeys {
			rkeys[k] = v
		}
		q := h.newRC(t, c, cn, rq)
		qps = append(qps, q)
		befores = append(befores, postAtFirstPacket(t, h, c, cn, q, out))
	}

	r := newReplayer(t, c, qps...)
	r.rkeys = rkeys
	r.lockstep(func(f *frame) {
		for _, b := range befores {
			b(f)
		}
	}, func(f *frame) {
		// After the last packet of each write, memory holds what it wrote.
		if m := lastWrite[f.i]; m != nil {
			if got := mems[f.p.BTH().DestQP()].at(t, m.rkey, m.va, m.length); !bytes.Equal(got, m.payload) {
				t.Errorf("%s: after %v, memory at %#x does not hold the %d bytes %v wrote", c.name, f, m.va, m.length, m)
			}
		}
	})

	// Atomic targets hold what rxe's operations, in order, left there,
	// starting from the value the first one found.
	for qpn, in := range incoming {
		type target struct {
			rkey uint32
			v    uint64
		}
		want := map[uint64]target{}
		for _, m := range in {
			if !m.op.IsAtomic() {
				continue
			}
			tg, ok := want[m.va]
			if !ok {
				tg = target{m.rkey, firstAtomicOrig(t, c, m)}
			}
			tg.v = atomicResult(m, tg.v)
			want[m.va] = tg
		}
		for va, tg := range want {
			if got := binary.NativeEndian.Uint64(mems[qpn].at(t, tg.rkey, va, 8)); got != tg.v {
				t.Errorf("%s: after the atomics, %#x holds %#x, want %#x", c.name, va, got, tg.v)
			}
		}
	}

	// Every send rxe made completed a receive, in order per queue pair,
	// with its length and its bytes.
	next := map[uint32]int{}
	total := 0
	for _, comp := range poll(h.rcq) {
		in := incoming[comp.QPN]
		i := next[comp.QPN]
		for i < len(in) && !in[i].op.IsSend() {
			i++
		}
		if i == len(in) {
			t.Errorf("%s: receive completion %+v matches no send from rxe", c.name, comp)
			continue
		}
		m := in[i]
		next[comp.QPN] = i + 1
		total++
		var flags verbs.CompFlags
		var imm uint32
		switch m.op {
		case verbs.OpSendImm:
			flags, imm = verbs.WithImm, m.imm
		case verbs.OpSendInv:
			flags, imm = verbs.WithInv, m.imm
		}
		if comp.Status != verbs.Success || comp.Opcode != verbs.CompRecv || comp.ByteLen != m.length || comp.Flags != flags || comp.Imm != imm {
			t.Errorf("%s: receive of %v completed with %+v", c.name, m, comp)
			continue
		}
		if b := recvBufs[comp.WRID]; b == nil || !bytes.Equal(b.Bytes()[:m.length], m.payload) {
			t.Errorf("%s: receive %d does not hold the bytes of %v", c.name, comp.WRID, m)
		}
	}
	sends := 0
	for _, in := range incoming {
		for _, m := range in {
			if m.op.IsSend() {
				sends++
			}
		}
	}
	if total != sends {
		t.Errorf("%s: %d receive completions, want %d", c.name, total, sends)
	}
	// softfabric's own sends (the ping-pongs) completed.
	comps := poll(h.scq)
	for _, comp := range comps {
		if comp.Status != verbs.Success || comp.Opcode != verbs.CompSend {
			t.Errorf("%s: send completion %+v", c.name, comp)
		}
	}
	if len(comps) != outgoing {
		t.Errorf("%s: %d send completions, want %d", c.name, len(comps), outgoing)
	}
	for _, q := range qps {
		q := q.(*rc.QP)
		st := q.Stats()
		if q.State() != verbs.StateRTS || st.SeqNAKsSent+st.RNRNAKsSent+st.ErrNAKsSent+st.DupRequests+st.Dropped != 0 {
			t.Errorf("%s: queue pair %#x in %v, %+v", c.name, q.QPN(), q.State(), st)
		}
	}
}

// firstAtomicOrig returns the original value softfabric answered atomic m
// with in the capture.
func firstAtomicOrig(t testing.TB, c *capture, m *message) uint64 {
	t.Helper()
	for _, f := range c.frames {
		if !f.fromRxe && f.p.Opcode == wire.RCAtomicAcknowledge && f.psn() == m.first {
			return f.p.AtomicAckETH().OrigData()
		}
	}
	t.Fatalf("%s: no atomic acknowledge for %v", c.name, m)
	return 0
}

// atomicResult is what atomic m leaves in a word that held v.
func atomicResult(m *message, v uint64) uint64 {
	if m.op == verbs.OpFetchAdd {
		return v + m.swapAdd
	}
	if v == m.compare {
		return m.swapAdd
	}
	return v
}

func TestUDResponderAnswersRxeAsInTheCapture(t *testing.T) {
	// ibv_ud_pingpong: each of rxe's datagrams lands in a receive with the
	// GRH in front (for IPv4: 20 zero bytes, then rxe's IPv4 header as it
	// came), rxe's QPN and GID (its IPv4-mapped address) in the
	// completion; softfabric answers each with the datagram it sent then.
	c := load(t, "ud-pingpong-rxe-client.pcapng")
	conns := c.conns(t)
	if len(conns) != 1 || !conns[0].ud {
		t.Fatalf("want one UD connection, got %d", len(conns))
	}
	cn := conns[0]
	h := newHost()
	in, out := c.messages(t, cn, true), c.messages(t, cn, false)
	size := ud.GRHSize
	for _, m := range in {
		size = max(size, ud.GRHSize+len(m.payload))
	}
	rq := verbs.NewRecvQueue(1024)
	bufs := receives(t, h, rq.Post, len(in), size, 1)
	q := h.newUD(t, cn, rq)
	r := newReplayer(t, c, q)
	r.lockstep(postAtFirstPacket(t, h, c, cn, q, out), nil)

	comps := poll(h.rcq)
	if len(comps) != len(in) {
		t.Fatalf("%d receive completions, want %d", len(comps), len(in))
	}
	gid := rxeIP.As16() // IPv4-mapped, as verbs reports an IPv4 GID
	for i, comp := range comps {
		m := in[i]
		if comp.Status != verbs.Success || comp.Opcode != verbs.CompRecv || comp.Flags != verbs.GRH ||
			comp.QPN != cn.sfQPN || comp.SrcQP != cn.rxeQPN || comp.SrcGID != gid || comp.ByteLen != uint32(ud.GRHSize+len(m.payload)) {
			t.Errorf("receive of %v completed with %+v; want source QP %#x, GID %v", m, comp, cn.rxeQPN, rxeIP)
			continue
		}
		b := bufs[comp.WRID].Bytes()
		grh := m.frames[0].p.Frame[m.frames[0].p.L3 : m.frames[0].p.L3+wire.IPv4MinSize]
		if !bytes.Equal(b[:20], make([]byte, 20)) || !bytes.Equal(b[20:ud.GRHSize], grh) {
			t.Errorf("receive of %v: GRH % x, want 20 zero bytes and rxe's IPv4 header % x", m, b[:ud.GRHSize], grh)
		}
		if !bytes.Equal(b[ud.GRHSize:comp.ByteLen], m.payload) {
			t.Errorf("receive of %v does not hold its payload", m)
		}
	}
	sent := poll(h.scq)
	for _, comp := range sent {
		if comp.Status != verbs.Success || comp.ByteLen != uint32(len(out[0].payload)) {
			t.Errorf("send completion %+v", comp)
		}
	}
	if len(sent) != len(out) {
		t.Errorf("%d send completions, want %d", len(sent), len(out))
	}
	if st := q.Stats(); st.QKeyViolations+st.NoRecv+st.Dropped != 0 {
		t.Errorf("queue pair stats %+v", st)
	}
}
