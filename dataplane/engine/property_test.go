package engine_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// The property: over a link that loses, reorders, duplicates and corrupts
// frames in both directions, every work request either completes
// successfully with its data delivered exactly once, in order and
// byte-exact, or fails with the error completion the IBTA prescribes
// (transport retry exceeded, then flushes) — never silently wrong.

const all = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic

var hostile = memlink.Faults{Loss: 0.10, Reorder: 0.10, Duplicate: 0.05, Corrupt: 0.05, ReorderDelay: 30 * time.Microsecond}

type class struct {
	window  int // outstanding requests per flow
	maxSize int // largest message
	share   int // requests per flow relative to a small flow, in 1/64
}

var (
	small = class{window: 32, maxSize: 16 << 10, share: 64}
	large = class{window: 2, maxSize: 1 << 20, share: 4}
)

func (c class) target(perFlow uint64) uint64 { return max(1, perFlow*uint64(c.share)/64) }

// flow is one connected QP pair carrying requests one way.
type flow struct {
	id            int
	c             class
	req, resp     *transporttest.Host
	qreq, qresp   *rc.QP
	local, remote *mr.Region // window slots of maxSize each, plus an atomic word
	recvBuf       *mr.Region // receive slots on the responder
	rng           *rand.Rand
	posted, done  uint64 // requests posted and completed (any status)
	recvd         uint64 // receives completed on the responder
	pending       []op   // posted, not completed, oldest first
	recvExpect    []op   // sends and write-imms in flight, in order
	counter       uint64 // expected value of the remote atomic word
	failed        bool
	generation    int
}

type op struct {
	seq  uint64
	kind verbs.Opcode
	size int
	slot int
	// expected original value of an atomic
	orig uint64
}

func slotOff(c class, slot int) int { return slot * c.maxSize }

func pattern(b []byte, flow int, gen int, seq uint64) {
	r := rand.New(rand.NewPCG(uint64(flow)<<32|uint64(gen), seq))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	if n := len(b) &^ 7; n < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], r.Uint64())
		copy(b[n:], t[:])
	}
}

type harness struct {
	t        *testing.T
	p        *transporttest.Pair
	flows    []*flow
	byQPN    [2]map[uint32]*flow // requester-side QPN per host index → flow; responder side likewise
	target   uint64              // requests per flow
	failed   int                 // requests failed with an error completion
	episodes int                 // queue pairs that failed
	ok       int
	sizes    [3]int // completed messages: <=4 KiB, <=64 KiB, larger
	scratch  []verbs.Completion
	queues   int // nodes per host: 0 for a plain pair, else a group pair
}

func hostIndex(p *transporttest.Pair, h *transporttest.Host) int {
	if h == p.A {
		return 0
	}
	return 1
}

func (h *harness) connect(f *flow) {
	t := h.t
	var o transporttest.RCOptions
	o.RdAtomic = 8
	if h.queues > 0 {
		// Place the two ends on different nodes, so that every frame of
		// the flow crosses a handoff ring at the receiving host.
		o.NodeA, o.NodeB = f.id%h.queues, (f.id+1)%h.queues
	}
	var qa, qb *rc.QP
	var err error
	if f.req == h.p.A {
		qa, qb, err = h.p.ConnectRC(o)
		f.qreq, f.qresp = qa, qb
	} else {
		qa, qb, err = h.p.ConnectRC(o)
		f.qreq, f.qresp = qb, qa
	}
	if err != nil {
		t.Fatal(err)
	}
	h.byQPN[hostIndex(h.p, f.req)][f.qreq.QPN()] = f
	h.byQPN[hostIndex(h.p, f.resp)][f.qresp.QPN()] = f
	for i := 0; i < f.c.window; i++ {
		h.postRecv(f, i)
	}
}

func (h *harness) postRecv(f *flow, slot int) {
	sge := transporttest.SGE(f.recvBuf, slotOff(f.c, slot), f.c.maxSize)
	if err := f.qresp.PostRecv(&verbs.RecvWR{ID: uint64(slot), SGL: []mr.SGE{sge}}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) newFlow(id int, c class, req, resp *transporttest.Host) *flow {
	f := &flow{id: id, c: c, req: req, resp: resp, rng: rand.New(rand.NewPCG(uint64(id), 42))}
	var err error
	if f.local, err = req.Buffer(c.window*c.maxSize+8, all); err != nil {
		h.t.Fatal(err)
	}
	if f.remote, err = resp.Buffer(c.window*c.maxSize+8, all); err != nil {
		h.t.Fatal(err)
	}
	if f.recvBuf, err = resp.Buffer(c.window*c.maxSize, all); err != nil {
		h.t.Fatal(err)
	}
	h.connect(f)
	return f
}

// size draws a message size: log-uniform from 0 to the class maximum.
func (f *flow) size() int {
	if f.rng.IntN(16) == 0 {
		return f.rng.IntN(2) // 0 and 1 byte
	}
	bits := f.rng.IntN(bitsOf(f.c.maxSize)) + 1
	return f.rng.IntN(1<<bits) + 1
}

func bitsOf(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

var kinds = []verbs.Opcode{verbs.OpSend, verbs.OpSendImm, verbs.OpWrite, verbs.OpWriteImm, verbs.OpRead, verbs.OpCmpSwap, verbs.OpFetchAdd}

func (h *harness) post(f *flow) {
	for !f.failed && len(f.pending) < f.c.window && f.posted < f.c.target(h.target) {
		seq := f.posted
		o := op{seq: seq, kind: kinds[f.rng.IntN(len(kinds))], slot: int(seq % uint64(f.c.window))}
		wr := verbs.SendWR{ID: seq, Op: o.kind, Flags: verbs.Signaled}
		atomicAddr := f.remote.Addr() + uint64(f.c.window*f.c.maxSize)
		off := slotOff(f.c, o.slot)
		switch o.kind {
		case verbs.OpCmpSwap, verbs.OpFetchAdd:
			o.size = 8
			o.orig = f.counter
			wr.SGL = []mr.SGE{transporttest.SGE(f.local, off, 8)}
			wr.RemoteAddr, wr.RKey = atomicAddr, f.remote.RKey()
			if o.kind == verbs.OpFetchAdd {
				wr.CompareAdd = seq + 1
				f.counter += seq + 1
			} else {
				wr.CompareAdd, wr.Swap = f.counter, f.counter^(seq<<20|0xabc)
				f.counter = wr.Swap
			}
		default:
			o.size = f.size()
			wr.SGL = []mr.SGE{transporttest.SGE(f.local, off, o.size)}
			wr.RemoteAddr, wr.RKey = f.remote.Addr()+uint64(off), f.remote.RKey()
			wr.Imm = uint32(seq)
			if o.kind == verbs.OpRead {
				pattern(f.remote.Bytes()[off:off+o.size], f.id, f.generation, seq)
				clear(f.local.Bytes()[off : off+o.size])
			} else {
				pattern(f.local.Bytes()[off:off+o.size], f.id, f.generation, seq)
			}
			if o.kind == verbs.OpSend || o.kind == verbs.OpSendImm || o.kind == verbs.OpWriteImm {
				f.recvExpect = append(f.recvExpect, o)
			}
		}
		if err := f.qreq.PostSend(&wr); err != nil {
			h.t.Fatalf("flow %d: post %d: %v", f.id, seq, err)
		}
		f.pending = append(f.pending, o)
		f.posted++
	}
}

func (h *harness) checkSend(f *flow, c *verbs.Completion) {
	t := h.t
	if len(f.pending) == 0 {
		t.Fatalf("flow %d: completion %+v with nothing pending", f.id, *c)
	}
	o := f.pending[0]
	f.pending = f.pending[1:]
	f.done++
	if c.WRID != o.seq {
		t.Fatalf("flow %d: completion for request %d, expected %d: out of order", f.id, c.WRID, o.seq)
	}
	if f.failed {
		if c.Status != verbs.WRFlushErr {
			t.Fatalf("flow %d: request %d after a failure completed %v, want a flush", f.id, o.seq, c.Status)
		}
		h.failed++
		return
	}
	if c.Status != verbs.Success {
		// The only error a lossy network may cause: the retry counter ran
		// out. The request may or may not have taken effect.
		if c.Status != verbs.RetryExcErr {
			t.Fatalf("flow %d: request %d (%v, %d B) failed with %v", f.id, o.seq, o.kind, o.size, c.Status)
		}
		f.failed = true
		h.failed++
		h.episodes++
		if testing.Verbose() {
			h.t.Logf("flow %d: request %d (%v, %d B) failed at t=%v: requester %+v responder %+v", f.id, o.seq, o.kind, o.size, time.Duration(h.p.Now), f.qreq.Stats(), f.qresp.Stats())
		}
		return
	}
	if c.Opcode != verbs.SendCompOpcode(o.kind) || (o.kind != verbs.OpCmpSwap && o.kind != verbs.OpFetchAdd && c.ByteLen != uint32(o.size)) {
		t.Fatalf("flow %d: request %d: completion %+v for %v of %d B", f.id, o.seq, *c, o.kind, o.size)
	}
	off := slotOff(f.c, o.slot)
	switch o.kind {
	case verbs.OpWrite, verbs.OpWriteImm:
		want := make([]byte, o.size)
		pattern(want, f.id, f.generation, o.seq)
		if !bytes.Equal(f.remote.Bytes()[off:off+o.size], want) {
			t.Fatalf("flow %d: write %d (%d B): remote memory differs", f.id, o.seq, o.size)
		}
	case verbs.OpRead:
		want := make([]byte, o.size)
		pattern(want, f.id, f.generation, o.seq)
		if !bytes.Equal(f.local.Bytes()[off:off+o.size], want) {
			t.Fatalf("flow %d: read %d (%d B): data differs", f.id, o.seq, o.size)
		}
	case verbs.OpCmpSwap, verbs.OpFetchAdd:
		if got := binary.NativeEndian.Uint64(f.local.Bytes()[off:]); got != o.orig {
			t.Fatalf("flow %d: atomic %d returned %#x, want %#x (executed twice or lost)", f.id, o.seq, got, o.orig)
		}
	}
	h.ok++
	switch {
	case o.size <= 4<<10:
		h.sizes[0]++
	case o.size <= 64<<10:
		h.sizes[1]++
	default:
		h.sizes[2]++
	}
}

func (h *harness) checkRecv(f *flow, c *verbs.Completion) {
	t := h.t
	if c.Status == verbs.WRFlushErr {
		return
	}
	if len(f.recvExpect) == 0 {
		t.Fatalf("flow %d: receive %+v with no send outstanding: duplicated delivery", f.id, *c)
	}
	o := f.recvExpect[0]
	f.recvExpect = f.recvExpect[1:]
	if c.Status != verbs.Success {
		t.Fatalf("flow %d: receive for %d failed: %v", f.id, o.seq, c.Status)
	}
	if c.Flags&verbs.WithImm != 0 || o.kind != verbs.OpSend {
		if c.Imm != uint32(o.seq) {
			t.Fatalf("flow %d: receive carries immediate %d, expected message %d: lost, duplicated or reordered", f.id, c.Imm, o.seq)
		}
	}
	want := make([]byte, o.size)
	pattern(want, f.id, f.generation, o.seq)
	if c.ByteLen != uint32(o.size) {
		t.Fatalf("flow %d: message %d received %d B, want %d", f.id, o.seq, c.ByteLen, o.size)
	}
	if o.kind == verbs.OpWriteImm {
		off := slotOff(f.c, o.slot)
		if c.Opcode != verbs.CompRecvWriteImm || !bytes.Equal(f.remote.Bytes()[off:off+o.size], want) {
			t.Fatalf("flow %d: write-with-immediate %d: %+v, data equal %v", f.id, o.seq, *c, bytes.Equal(f.remote.Bytes()[off:off+o.size], want))
		}
	} else {
		off := slotOff(f.c, int(c.WRID))
		if !bytes.Equal(f.recvBuf.Bytes()[off:off+o.size], want) {
			t.Fatalf("flow %d: send %d (%d B): received data differs", f.id, o.seq, o.size)
		}
	}
	f.recvd++
	h.postRecv(f, int(c.WRID))
}

// restart replaces a failed flow's QPs and goes on with a new generation.
func (h *harness) restart(f *flow) {
	if len(f.pending) > 0 {
		return // wait for the flushes
	}
	// Drain what the responder delivered, then retire both QPs.
	_ = f.qresp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	h.p.A.Node.Detach(f.qreq)
	h.p.B.Node.Detach(f.qreq)
	h.p.A.Node.Detach(f.qresp)
	h.p.B.Node.Detach(f.qresp)
	delete(h.byQPN[hostIndex(h.p, f.req)], f.qreq.QPN())
	f.failed = false
	f.recvExpect = nil
	f.generation++
	f.counter = binary.NativeEndian.Uint64(f.remote.Bytes()[f.c.window*f.c.maxSize:])
	h.connect(f)
}

func (h *harness) poll() {
	for hi, host := range []*transporttest.Host{h.p.A, h.p.B} {
		for {
			n := host.RecvCQ.Poll(h.scratch)
			for i := 0; i < n; i++ {
				c := &h.scratch[i]
				if f := h.byQPN[hi][c.QPN]; f != nil && f.resp == host {
					h.checkRecv(f, c)
				}
			}
			if n < len(h.scratch) {
				break
			}
		}
	}
	for hi, host := range []*transporttest.Host{h.p.A, h.p.B} {
		for {
			n := host.SendCQ.Poll(h.scratch)
			for i := 0; i < n; i++ {
				c := &h.scratch[i]
				f := h.byQPN[hi][c.QPN]
				if f == nil || f.req != host {
					h.t.Fatalf("send completion for unknown QP %d", c.QPN)
				}
				h.checkSend(f, c)
			}
			if n < len(h.scratch) {
				break
			}
		}
	}
}

// runProperty runs the property over a plain pair of nodes (queues 0), or
// over two groups of queues nodes each (see transporttest.NewGroupPair).
func runProperty(t *testing.T, seed uint64, nflows int, perFlow uint64, largeFlows, queues int) *harness {
	cfg := memlink.Config{Seed: seed, AtoB: hostile, BtoA: hostile, Capacity: 8192}
	p := transporttest.NewPair(cfg)
	if queues > 0 {
		p = transporttest.NewGroupPair(cfg, queues)
	}
	h := &harness{t: t, p: p, target: perFlow, scratch: make([]verbs.Completion, 256), queues: queues}
	h.byQPN[0] = map[uint32]*flow{}
	h.byQPN[1] = map[uint32]*flow{}
	for i := 0; i < nflows; i++ {
		c := small
		if i < largeFlows {
			c = large
		}
		req, resp := h.p.A, h.p.B
		if i%2 == 1 {
			req, resp = h.p.B, h.p.A
		}
		h.flows = append(h.flows, h.newFlow(i, c, req, resp))
	}
	start := time.Now()
	for steps := 0; ; steps++ {
		finished := true
		for _, f := range h.flows {
			if f.failed {
				h.restart(f)
			}
			h.post(f)
			if f.done < f.c.target(h.target) {
				finished = false
			}
		}
		if finished {
			break
		}
		if !h.p.Step() {
			t.Fatalf("stalled: nothing in flight and no timer running at t=%v", time.Duration(h.p.Now))
		}
		h.poll()
		if steps%1_000_000 == 0 && time.Since(start) > 15*time.Minute {
			t.Fatalf("not finished after %v", time.Since(start))
		}
	}
	// Let in-flight duplicates arrive, then check no receive is missing.
	for i := 0; i < 10000 && h.p.Step(); i++ {
		h.poll()
	}
	for _, f := range h.flows {
		if len(f.recvExpect) != 0 {
			t.Fatalf("flow %d: %d messages completed at the sender but never received", f.id, len(f.recvExpect))
		}
	}
	return h
}

func (h *harness) report(t *testing.T) {
	ab, ba := h.p.A.Link.Stats(), h.p.B.Link.Stats() // queue 0's, in a group pair
	t.Logf("%d requests: %d ok (≤4K %d, ≤64K %d, >64K %d), %d failed with retry-exceeded/flush; virtual time %v",
		h.ok+h.failed, h.ok, h.sizes[0], h.sizes[1], h.sizes[2], h.failed, time.Duration(h.p.Now))
	t.Logf("link A→B %+v", ab)
	t.Logf("link B→A %+v", ba)
	t.Logf("engine A %+v", h.p.A.Node.Stats())
	t.Logf("engine B %+v", h.p.B.Node.Stats())
	for _, s := range []memlink.Stats{ab, ba} {
		if s.Lost == 0 || s.Duplicated == 0 || s.Reordered == 0 || s.Corrupted == 0 {
			t.Fatalf("a fault was never injected: %+v", s)
		}
	}
	if badICRC(h.p.A) == 0 || badICRC(h.p.B) == 0 {
		t.Fatal("no corrupted frame was caught by the ICRC")
	}
	if h.failed*100 > h.ok {
		t.Fatalf("%d of %d requests failed: the transport gives up too easily", h.failed, h.ok+h.failed)
	}
}

// TestHostileNetwork runs ≥100k mixed requests (all operations, 0 B to
// 1 MiB, 16 QPs in both directions) over a link with 10 % loss, 10 %
// reordering, 5 % duplication and 5 % corruption each way.
func TestHostileNetwork(t *testing.T) {
	perFlow := uint64(7200) // 14 small flows and 2 large: 101,700 requests
	if testing.Short() {
		perFlow = 500
	}
	h := runProperty(t, 1, 16, perFlow, 2, 0)
	h.report(t)
}

// TestHostileNetworkGroups is TestHostileNetwork between two devices of
// three queues each, every flow's ends on different nodes: every frame is
// received by a node that does not own its queue pair and reaches the
// owner through a handoff ring. The property holds all the same.
func TestHostileNetworkGroups(t *testing.T) {
	perFlow := uint64(4000)
	if testing.Short() {
		perFlow = 300
	}
	h := runProperty(t, 3, 12, perFlow, 1, 3)
	h.report(t)
	for _, host := range []*transporttest.Host{h.p.A, h.p.B} {
		var off, in, drops uint64
		for i := range host.Group.Len() {
			st := host.Group.Node(i).Stats()
			t.Logf("node %d: %+v", i, st)
			off, in, drops = off+st.HandedOff, in+st.HandedIn, drops+st.HandoffDrops
		}
		if off == 0 || in != off {
			t.Fatalf("handed off %d, handed in %d: want equal and nonzero", off, in)
		}
		if drops != 0 {
			t.Fatalf("%d frames dropped on handoff rings in lock-step polling", drops)
		}
	}
}

// TestSoak is the long version: 10 M requests. Run with `make soak`.
func TestSoak(t *testing.T) {
	if os.Getenv("SOFTFABRIC_SOAK") == "" {
		t.Skip("soak test: set SOFTFABRIC_SOAK=1 (make soak)")
	}
	const flows = 16 // 14 small, 2 large: 10 seeds × 1.017 M ≥ 10 M requests
	for seed := uint64(0); seed < 10; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			h := runProperty(t, 100+seed, flows, 72_000, 2, 0) // 1.017 M requests
			h.report(t)
		})
	}
}

// badICRC counts the frames a host's node or nodes dropped for their ICRC.
func badICRC(h *transporttest.Host) uint64 {
	if h.Group == nil {
		return h.Node.Stats().BadICRC
	}
	var n uint64
	for i := range h.Group.Len() {
		n += h.Group.Node(i).Stats().BadICRC
	}
	return n
}
