package rxereplay

// The *-rxe-client-loss captures: rxe is the requester and frames were
// lost on the way. The replays below check softfabric's responder; the
// TestRxe* tests at the end pin what rxe's requester did. In write-rxe-client-loss netem dropped 10 % of what rxe
// sent, before softfabric could record it: the capture holds every frame
// of softfabric's and those of rxe's that reached it. In
// read-rxe-client-loss SOFTFABRIC_DEBUG_LINK_FAULTS dropped 10 % of what
// softfabric sent, above pcaplink: the capture holds every frame of rxe's
// and those of softfabric's that were not dropped.
//
// The replay builds softfabric's queue pair as replayRCResponder does and
// feeds it rxe's frames in capture order, calling Transmit where the
// capture shows softfabric sending. What is exact and what is a rule:
//
//   - Exact: the frames softfabric sent in the capture, byte for byte, in
//     order, each by the time the capture shows it. For the write capture
//     that is all the replay sends (lock step, as for the clean captures).
//     For the read capture the replay also sends the frames the fault
//     injector dropped: every frame the capture lacks must be a read
//     response packet that rxe later asks for again (a request whose range
//     holds its PSN), as it must for a packet it lost; which ones they are
//     is pinned.
//   - Rules (responderModel), checked on every frame the replay sends,
//     dropped or not, and again with each of rxe's frames delivered a
//     second time, late (a duplicating link), and memory holding a pattern
//     rather than the captures' zeros: one sequence NAK per gap, naming the first PSN
//     missing; an ACK with PSN expected − 1 for each duplicate write
//     packet; every read request, new or repeated, answered from exactly
//     the PSN it asks for, FIRST … LAST or ONLY, with the bytes at the
//     address it names; the MSN of the time in every AETH.
//   - Effects: only a packet softfabric takes in sequence changes memory,
//     each at its place (memory is poisoned before each delivery); memory
//     ends holding what rxe wrote; every PSN is taken once; no receive is
//     consumed; softfabric's counters agree with the rules' count.

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// rxeClientLoss lists the loss captures with rxe as the requester and
// what is pinned of each.
var rxeClientLoss = []struct {
	name string
	// sfFaults: softfabric's own frames were dropped above the capture
	// (capture.sh's SFFAULTS), so the capture may lack frames it sent.
	sfFaults bool
	// naks and repeats are the sequence NAKs softfabric sent and the
	// duplicate requests it saw; dropped are the PSNs (from rxe's first) of
	// the frames the capture lacks, in the order the replay sends them.
	naks, repeats int
	dropped       []uint32
}{
	// NAKs in frames 9, 17, 25; every packet rxe sent again had been
	// dropped as out of sequence before, so no duplicates.
	{name: "write-rxe-client-loss.pcapng", naks: 3},
	// Repeated read requests in frames 14, 15, 29, 33, 34, 41, 46, 50. The
	// fault injector dropped: read 2's LAST (+7) after frame 8; read 3's
	// two MIDDLEs (+9, +10) between frames 17 and 18; read 4's FIRST (+12)
	// before frame 35; read 5's LAST (+19) after frame 40; read 5's FIRST
	// (+16) before frame 47.
	{name: "read-rxe-client-loss.pcapng", sfFaults: true, repeats: 8, dropped: []uint32{7, 9, 10, 12, 19, 16}},
}

func TestResponderRecoversFromRxeLossAsInTheCapture(t *testing.T) {
	for _, lc := range rxeClientLoss {
		t.Run(strings.TrimSuffix(lc.name, ".pcapng"), func(t *testing.T) {
			c := load(t, lc.name)
			lr := newLossReplay(t, c, lc.sfFaults, false)
			for _, f := range c.frames {
				if f.fromRxe {
					lr.deliver(f)
					continue
				}
				lr.r.expectAmong(f, lr.skip(f))
			}
			lr.r.finish()
			lr.check()
			if lr.model.naks != lc.naks || lr.model.dups != lc.repeats {
				t.Errorf("%s: %d sequence NAKs and %d duplicate requests, want %d and %d", c.name, lr.model.naks, lr.model.dups, lc.naks, lc.repeats)
			}
			var got []uint32
			for _, g := range lr.dropped {
				got = append(got, uint32(g.psn().Diff(lr.cn.rxePSN)))
			}
			if fmt.Sprint(got) != fmt.Sprint(lc.dropped) {
				t.Errorf("%s: the capture lacks the frames with PSNs %v (from rxe's first) of those the replay sends, want %v", c.name, got, lc.dropped)
			}
		})
	}
}

func TestResponderKeepsTheRulesWithEveryRxeRequestTwice(t *testing.T) {
	// The same captures with each of rxe's frames delivered a second time
	// right after the next one (a late duplicate), and memory holding a
	// pattern: nothing is compared with the capture, every frame
	// softfabric sends is held to the rules. A second copy is a duplicate
	// (a write packet: ACKed with PSN expected − 1, not placed again; a
	// read request: answered again, not counted again in the MSN), or past
	// a gap, which gets no second NAK. In the write capture duplicates
	// also arrive while a gap is NAKed (the copy of frame 7 after frame 8),
	// which must not make softfabric NAK the gap again.
	for _, lc := range rxeClientLoss {
		t.Run(strings.TrimSuffix(lc.name, ".pcapng"), func(t *testing.T) {
			c := load(t, lc.name)
			lr := newLossReplay(t, c, lc.sfFaults, true)
			var prev *frame
			for _, f := range c.frames {
				if !f.fromRxe {
					lr.r.transmit()
					continue
				}
				lr.deliver(f)
				if prev != nil {
					lr.deliver(prev)
				}
				prev = f
			}
			lr.deliver(prev)
			lr.r.transmit()
			lr.r.out.frames = nil
			lr.check()
			if lr.model.dups == 0 || lc.naks > 0 && lr.model.dupsNAKed == 0 {
				t.Errorf("%s: %d duplicates, %d of them while a gap was NAKed: the replay does not try the rules", c.name, lr.model.dups, lr.model.dupsNAKed)
			}
		})
	}
}

// lossReplay is a responder replay of a *-rxe-client-loss capture, each of
// rxe's frames checked by responderModel as it is delivered and each frame
// of softfabric's as it is sent.
type lossReplay struct {
	t        testing.TB
	c        *capture
	cn       *conn
	msgs     []*message // rxe's requests
	h        *host
	rq       *verbs.RecvQueue
	q        *rc.QP
	r        *replayer
	mem      *remote
	initial  map[uint32][]byte // memory before the replay, by rxe's rkey
	model    *responderModel
	sfFaults bool     // the capture may lack frames softfabric sent
	sent     []*frame // what softfabric sent in the replay, in order
	dropped  []*frame // of those, the ones the capture lacks
}

// lossRecvs receives are posted: perftest's write and read servers post
// none, so any consumed is one too many.
const lossRecvs = 4

// poison fills memory before each delivery, so that any byte placed shows.
const poison = 0xa5

func newLossReplay(t testing.TB, c *capture, sfFaults, pattern bool) *lossReplay {
	t.Helper()
	conns := c.conns(t)
	if len(conns) != 1 {
		t.Fatalf("%s: %d connections, want 1", c.name, len(conns))
	}
	lr := &lossReplay{t: t, c: c, cn: conns[0], h: newHost(), sfFaults: sfFaults, initial: map[uint32][]byte{}}
	lr.msgs = c.messages(t, lr.cn, true)
	if len(lr.msgs) == 0 || len(c.messages(t, lr.cn, false)) != 0 {
		t.Fatalf("%s: want requests from rxe only", c.name)
	}
	lr.mem = newRemote(t, lr.h, c, lr.cn, lr.msgs)
	for k, r := range lr.mem.regions {
		if pattern {
			fillPattern(r.Bytes())
		}
		lr.initial[k] = bytes.Clone(r.Bytes())
	}
	lr.rq = verbs.NewRecvQueue(16)
	receives(t, lr.h, lr.rq.Post, lossRecvs, 64, 1)
	lr.q = lr.h.newRC(t, c, lr.cn, lr.rq)
	lr.model = newResponderModel(t, c, lr.cn, func(rkey uint32, va uint64, n uint32) []byte { return lr.mem.at(t, rkey, va, n) })
	lr.r = newReplayer(t, c, lr.q)
	lr.r.rkeys = lr.mem.rkeys
	lr.r.onSend = func(data []byte) {
		g := &frame{i: len(lr.sent), t: lr.r.now, data: data, replayed: true}
		if err := g.p.Parse(data); err != nil {
			t.Fatalf("%s: softfabric sends a frame that does not parse: %v", c.name, err)
		}
		lr.sent = append(lr.sent, g)
		lr.model.sent(g)
	}
	return lr
}

// deliver hands f to softfabric with every region poisoned, checks that
// exactly what the model says f places (nothing, unless softfabric takes
// it in sequence) changed, and puts memory back with that placed.
func (lr *lossReplay) deliver(f *frame) {
	t := lr.t
	t.Helper()
	saved := map[uint32][]byte{}
	for k, r := range lr.mem.regions {
		saved[k] = bytes.Clone(r.Bytes())
		for i := range r.Bytes() {
			r.Bytes()[i] = poison
		}
	}
	lr.r.deliver(f)
	pl := lr.model.receive(f)
	for k, r := range lr.mem.regions {
		want := bytes.Repeat([]byte{poison}, r.Len())
		if pl != nil && pl.rkey == k {
			copy(want[pl.va-r.Addr():], pl.data)
			copy(saved[k][pl.va-r.Addr():], pl.data)
		}
		if i := mismatch(r.Bytes(), want); i >= 0 {
			if pl == nil || pl.rkey != k {
				t.Fatalf("%s: %v changes memory at %#x: softfabric does not take it, so it must place nothing", lr.c.name, f, r.Addr()+uint64(i))
			}
			t.Fatalf("%s: %v: memory at %#x holds %#02x after it, want %#02x (its %d bytes belong at %#x, nothing else may change)",
				lr.c.name, f, r.Addr()+uint64(i), r.Bytes()[i], want[i], len(pl.data), pl.va)
		}
		copy(r.Bytes(), saved[k])
	}
}

// skip returns expectAmong's judge of a frame the replay sends before one
// equal to want: the capture may lack it only if softfabric's frames were
// dropped above the capture, and only if it is a read response packet rxe
// asks for again after want, as it must had the packet been lost.
func (lr *lossReplay) skip(want *frame) func([]byte) {
	return func(data []byte) {
		t := lr.t
		t.Helper()
		g := lr.sent[lr.r.taken-1]
		if !bytes.Equal(g.data, data) {
			t.Fatalf("%s: the replay's frames and what expect takes are out of step at %v", lr.c.name, g)
		}
		if !lr.sfFaults {
			t.Fatalf("%s: %v: softfabric sends %v instead%s", lr.c.name, want, g, firstDifference(data, want.data))
		}
		if g.mask()&wire.MaskReadResponse == 0 {
			t.Fatalf("%s: softfabric sends %v before %v; the capture lacks it, and only read responses can be lacking here", lr.c.name, g, want)
		}
		for _, f := range lr.c.frames[want.i:] {
			if f.fromRxe && f.mask()&wire.MaskRead != 0 && g.psn().InWindow(f.psn(), packets(f.p.RETH().DMALen())) {
				lr.dropped = append(lr.dropped, g)
				return
			}
		}
		t.Fatalf("%s: softfabric sends %v before %v; the capture lacks it, yet rxe never asks for it again, so it cannot have been dropped", lr.c.name, g, want)
	}
}

// check checks the end of a replay: everything owed sent, counters,
// each PSN taken once, no receive consumed, memory holding what rxe wrote.
func (lr *lossReplay) check() {
	t, c, m := lr.t, lr.c, lr.model
	t.Helper()
	m.finish()
	st := lr.q.Stats()
	if lr.q.State() != verbs.StateRTS || st.SeqNAKsSent != uint64(m.naks) || st.DupRequests != uint64(m.dups) || st.RNRNAKsSent+st.ErrNAKsSent+st.Dropped != 0 {
		t.Errorf("%s: queue pair in %v, %+v; want RTS, %d sequence NAKs, %d duplicate requests, nothing else", c.name, lr.q.State(), st, m.naks, m.dups)
	}
	for _, msg := range lr.msgs {
		n := msg.npkts()
		if msg.op == verbs.OpRead {
			n = 1 // a read takes its PSNs at once
		}
		for k := range n {
			if got := m.accepted[msg.first.Add(k)]; got != 1 {
				t.Errorf("%s: PSN %d of %v taken %d times, want once", c.name, msg.first.Add(k), msg, got)
			}
		}
	}
	if lr.rq.Len() != lossRecvs || len(poll(lr.h.rcq)) != 0 || len(poll(lr.h.scq)) != 0 {
		t.Errorf("%s: %d of %d receives left, or completions where none are due", c.name, lr.rq.Len(), lossRecvs)
	}
	for k, r := range lr.mem.regions {
		want := bytes.Clone(lr.initial[k])
		for _, msg := range lr.msgs {
			if msg.op.IsWrite() && msg.rkey == k {
				copy(want[msg.va-r.Addr():], msg.payload)
			}
		}
		if i := mismatch(r.Bytes(), want); i >= 0 {
			t.Errorf("%s: after the replay memory at %#x holds %#02x, want %#02x: rxe's writes, in order", c.name, r.Addr()+uint64(i), r.Bytes()[i], want[i])
		}
	}
}

// owed is an answer softfabric's responder owes: an acknowledge, or a read
// response of which k packets have been sent.
type owed struct {
	cause *frame // the request it answers (the last one, for coalesced ACKs)
	read  bool
	syn   uint8   // acknowledge: the AETH syndrome
	psn   psn.PSN // acknowledge: its PSN; read: the PSN the response starts at
	msn   uint32
	// read response: what it returns
	va           uint64
	rkey, length uint32
	n, k         uint32
}

func (o *owed) String() string {
	if o.read {
		return fmt.Sprintf("%v psn %d (packet %d of %d of the response from PSN %d, MSN %d, %d bytes at %#x) for %v",
			readResponseOp(o.k, o.n), o.psn.Add(o.k), o.k+1, o.n, o.psn, o.msn, o.length, o.va, o.cause)
	}
	return fmt.Sprintf("%s psn %d msn %d for %v", syndrome(o.syn), o.psn, o.msn, o.cause)
}

// placement is what a write packet taken in sequence puts in memory.
type placement struct {
	rkey uint32
	va   uint64
	data []byte
}

// span is a read the responder remembers: the PSNs it took.
type span struct {
	first psn.PSN
	n     uint32
}

// responderModel is the IBTA responder softfabric's queue pair must be, fed
// the same requests in the same order and shown every frame it sends as it
// sends it. It takes only the PSN it expects, ePSN, and owes:
//   - for the first request past a gap, one sequence NAK naming ePSN, the
//     first PSN missing from what reached it, and nothing more for that
//     gap until ePSN moves (rxe's responder does the same);
//   - for a duplicate write packet, an ACK with PSN ePSN − 1;
//   - for a packet taken that asks for one, an ACK with its PSN;
//   - for every read request, new or a repeat from any PSN inside a read it
//     remembers (the last 16, max_dest_rd_atomic), a response from exactly
//     that PSN, FIRST … LAST or ONLY, with the bytes at the address its RETH
//     names. That is softfabric's choice: rxe starts a repeat from the
//     middle of a read with MIDDLE (docs/interop.md). A repeat of a read
//     whose response is still owed, sent in part or not at all, takes its
//     place: the response starts again from the repeat's PSN.
//
// Every AETH carries the MSN of the time, the writes completed and reads
// taken so far: a request executed twice would show in it. ACKs owed one
// after the other and not yet sent may go out as the last of them
// (coalesced, as the IBTA allows); everything else goes out in order.
type responderModel struct {
	t        testing.TB
	c        *capture
	mem      func(rkey uint32, va uint64, n uint32) []byte
	ePSN     psn.PSN
	nakSent  bool
	msn      uint32
	write    placement // the write in progress: where its next packet goes
	reads    []span
	owed     []*owed
	accepted map[psn.PSN]int // times each PSN was taken (a read's at its first)
	// naks, dups and dupsNAKed count the NAKs owed, the duplicate
	// requests, and those that came while a gap was NAKed.
	naks, dups, dupsNAKed int
}

func newResponderModel(t testing.TB, c *capture, cn *conn, mem func(rkey uint32, va uint64, n uint32) []byte) *responderModel {
	return &responderModel{t: t, c: c, mem: mem, ePSN: cn.rxePSN, accepted: map[psn.PSN]int{}}
}

// receive takes one of rxe's requests and returns what it places, if
// anything.
func (m *responderModel) receive(f *frame) *placement {
	m.t.Helper()
	ps, mk := f.psn(), f.mask()
	if mk&(wire.MaskWrite|wire.MaskRead) == 0 || mk&wire.MaskImmDt != 0 {
		m.t.Fatalf("%s: %v: the model knows writes without immediate data and reads only", m.c.name, f)
	}
	ack := wire.AckSyndrome(wire.CreditsInvalid)
	switch d := ps.Diff(m.ePSN); {
	case d > 0:
		if !m.nakSent {
			m.nakSent = true
			m.naks++
			m.owe(&owed{cause: f, syn: wire.NAKSyndrome(wire.NAKPSNSeqErr), psn: m.ePSN, msn: m.msn})
		}
		return nil
	case d < 0:
		m.dups++
		if m.nakSent {
			m.dupsNAKed++
		}
		if mk&wire.MaskWrite != 0 {
			m.owe(&owed{cause: f, syn: ack, psn: m.ePSN.Sub(1), msn: m.msn})
			return nil
		}
		r := f.p.RETH()
		n := packets(r.DMALen())
		sp, ok := m.remembers(ps, n)
		if !ok {
			m.t.Fatalf("%s: %v asks again for PSNs %d to %d, which lie in no read softfabric took and remembers", m.c.name, f, ps, ps.Add(n-1))
		}
		o := &owed{cause: f, read: true, psn: ps, msn: m.msn, va: r.VA(), rkey: r.RKey(), length: r.DMALen(), n: n}
		// A repeat of a read whose answer is still owed restarts that
		// answer from the repeat's PSN (rxe's repeat takes over the
		// read too), rather than owing a second answer behind it.
		for _, w := range m.owed {
			if w.read && w.psn.Add(w.k).InWindow(sp.first, sp.n) {
				*w = *o
				return nil
			}
		}
		m.owe(o)
		return nil
	}
	m.accepted[ps]++
	m.nakSent = false
	if mk&wire.MaskRead != 0 {
		r := f.p.RETH()
		n := packets(r.DMALen())
		m.msn++
		m.reads = append(m.reads, span{ps, n})
		if len(m.reads) > 16 {
			m.reads = m.reads[1:]
		}
		m.ePSN = ps.Add(n)
		m.owe(&owed{cause: f, read: true, psn: ps, msn: m.msn, va: r.VA(), rkey: r.RKey(), length: r.DMALen(), n: n})
		return nil
	}
	m.ePSN = ps.Next()
	if r := f.p.RETH(); r != nil {
		m.write = placement{rkey: r.RKey(), va: r.VA()}
	}
	pl := &placement{rkey: m.write.rkey, va: m.write.va, data: f.p.Payload}
	m.write.va += uint64(len(f.p.Payload))
	if mk&wire.MaskLast != 0 {
		m.msn++
	}
	if f.p.BTH().AckReq() {
		m.owe(&owed{cause: f, syn: ack, psn: ps, msn: m.msn})
	}
	return pl
}

// remembers returns the read taken in which PSNs ps to ps+n-1 lie, if
// any.
func (m *responderModel) remembers(ps psn.PSN, n uint32) (span, bool) {
	for _, r := range m.reads {
		if ps.InWindow(r.first, r.n) && ps.Add(n-1).InWindow(r.first, r.n) {
			return r, true
		}
	}
	return span{}, false
}

// owe queues o, coalescing an ACK into an ACK not yet sent before it.
func (m *responderModel) owe(o *owed) {
	isACK := func(o *owed) bool { return !o.read && wire.SyndromeKind(o.syn) == wire.AckKindACK }
	if n := len(m.owed); n > 0 && isACK(o) && isACK(m.owed[n-1]) {
		*m.owed[n-1] = *o
		return
	}
	m.owed = append(m.owed, o)
}

// sent checks a frame softfabric sends against the first thing it owes.
func (m *responderModel) sent(g *frame) {
	m.t.Helper()
	if len(m.owed) == 0 {
		m.t.Fatalf("%s: %v: softfabric owes nothing at this point", m.c.name, g)
	}
	o := m.owed[0]
	if !o.read {
		if a := g.p.AETH(); g.p.Opcode != wire.RCAcknowledge || g.psn() != o.psn || a.Syndrome() != o.syn || a.MSN() != o.msn {
			m.t.Fatalf("%s: %v: softfabric owes %v", m.c.name, g, o)
		}
		m.owed = m.owed[1:]
		return
	}
	off := o.k * pathMTU
	want := m.mem(o.rkey, o.va+uint64(off), min(pathMTU, o.length-off))
	a := g.p.AETH()
	switch {
	case g.p.Opcode != readResponseOp(o.k, o.n) || g.psn() != o.psn.Add(o.k) || g.p.BTH().AckReq():
		m.t.Fatalf("%s: %v: softfabric owes %v", m.c.name, g, o)
	case a != nil && (a.Syndrome() != wire.AckSyndrome(wire.CreditsInvalid) || a.MSN() != o.msn):
		m.t.Fatalf("%s: %v: AETH %s msn %d; softfabric owes %v", m.c.name, g, syndrome(a.Syndrome()), a.MSN(), o)
	case !bytes.Equal(g.p.Payload, want):
		m.t.Fatalf("%s: %v: the payload is not the %d bytes at %#x: softfabric owes %v", m.c.name, g, len(want), o.va+uint64(off), o)
	}
	if o.k++; o.k == o.n {
		m.owed = m.owed[1:]
	}
}

// finish reports what softfabric owes and never sent.
func (m *responderModel) finish() {
	m.t.Helper()
	for _, o := range m.owed {
		m.t.Errorf("%s: softfabric never sends %v", m.c.name, o)
	}
}

// What rxe's requester does under loss, as the *-rxe-client-loss captures
// show it (kernel 6.1 rdma_rxe, perftest). PSNs in the comments count from
// rxe's first (+0).

func TestRxeGoesBackToTheNAKedPSN(t *testing.T) {
	// write-rxe-client-loss: netem dropped some of rxe's write packets, so
	// softfabric NAKed +7 (frame 9), +10 (frame 17) and +15 (frame 25).
	// rxe's requester goes back N on a sequence NAK: the packets it had
	// sent before the NAK reached it still arrive and continue upward
	// (frames 10 and 11, +9 and +10, after frame 9); the first packet that
	// does not continue carries exactly the NAKed PSN (frames 12, 18, 26),
	// and the next one the PSN after it (frames 14, 19, 28: +8, +11, +16),
	// a packet softfabric had received before and dropped as out of
	// sequence: rxe sends everything from the NAKed PSN again, not only
	// what was missing. It
	// never goes back unasked (no timeout here) and never below the NAKed
	// PSN. A packet sent again is the packet sent before, from the BTH
	// (AckReq included) to the ICRC: frames 14 and 8, 15 and 10, 18 and
	// 11, 19 and 16, 28 and 24 (the IP ID, and so the ICRC, differ).
	c := load(t, "write-rxe-client-loss.pcapng")
	first := map[psn.PSN]*frame{}
	var prev, nak, back *frame // rxe's last frame; a NAK rxe has not gone back for; where it went back
	wentBack := 0
	for _, f := range c.frames {
		if !f.fromRxe {
			if a := f.p.AETH(); a != nil && a.Syndrome() == wire.NAKSyndrome(wire.NAKPSNSeqErr) {
				if nak != nil {
					t.Errorf("%v: a second NAK before rxe went back for %v", f, nak)
				}
				nak = f
			}
			continue
		}
		whole := func(g *frame) []byte { return g.p.Frame[g.p.BTHOff : g.p.End-wire.ICRCSize] }
		if g := first[f.psn()]; g == nil {
			first[f.psn()] = f
		} else if !bytes.Equal(whole(f), whole(g)) {
			t.Errorf("%v: differs from the earlier copy, %v", f, g)
		}
		switch {
		case back != nil && f.psn() != back.psn().Next():
			t.Errorf("%v: after going back to PSN %d in frame %d, rxe sends PSN %d, want %d", f, back.psn(), back.i, f.psn(), back.psn().Next())
		case prev == nil || prev.psn().Before(f.psn()):
		case nak == nil:
			t.Errorf("%v: rxe goes back from PSN %d without a NAK", f, prev.psn())
		case f.psn() != nak.psn():
			t.Errorf("%v: rxe goes back to PSN %d after %v, not to the NAKed PSN", f, f.psn(), nak)
		default:
			wentBack++
			nak, back, prev = nil, f, f
			continue
		}
		back, prev = nil, f
	}
	if nak != nil {
		t.Errorf("rxe never goes back for %v", nak)
	}
	if wentBack != 3 {
		t.Errorf("rxe goes back %d times, want 3 (frames 12, 18, 26)", wentBack)
	}
}

func TestRxeAsksAgainFromTheFirstMissingPacketOfTheOldestRead(t *testing.T) {
	// read-rxe-client-loss: the fault injector dropped some of
	// softfabric's read response packets (TestResponderRecoversFromRxeLoss
	// names them). rxe's completer takes a read's response packets in
	// order, and only for the oldest read not yet complete: a packet past
	// a hole inside that read is ignored, and a packet of a later read
	// makes it go back N (check_psn() in rxe_comp.c; the later read's
	// packets are thrown away). Going back, it asks for the oldest
	// incomplete read from its first missing packet, RETH address and
	// length advanced, and then for every later read it had asked for,
	// whole, since it threw away their responses:
	//   - frame 14 asks for read 2 from +7, 1024 bytes at +0xc00 (frames
	//     6-8 brought +4 to +6; +7 was dropped), after frame 10, read 3's
	//     FIRST; frame 15 asks for read 3 whole (frames 10-13 came whole,
	//     but behind read 2's hole);
	//   - frame 29 asks for read 3 from +9, 3072 bytes at +0x400 (frame 17
	//     brought +8; +9 and +10 were dropped, frame 18's +11 was
	//     ignored), after frame 20, read 4's FIRST; frames 33 and 34 ask
	//     for reads 4 and 5 whole (frames 20-23 and 25-28 were thrown away);
	//   - frame 41 asks for read 4 whole (its FIRST, +12, was dropped, and
	//     frames 35-37 ignored), after frame 38, read 5's FIRST; frame 46
	//     for read 5 whole (frames 38-40 thrown away);
	//   - frame 50 asks for read 5 whole (its FIRST, +16, was dropped and
	//     frames 47-49 ignored). Nothing of a later read came to make rxe go
	//     back, so it waited for its retransmit timer: 67.4 ms after its
	//     last request (frame 46), ib_read_bw's timeout 14 being
	//     4.096 µs × 2^14 = 67.1 ms. The other go-backs follow the packet
	//     that caused them within 1.4 ms.
	// A new read is asked for only when no go-back is under way.
	c := load(t, "read-rxe-client-loss.pcapng")
	cn := c.conns(t)[0]
	reads := c.messages(t, cn, true)
	got := make([]uint32, len(reads)) // packets of each read rxe took, in order
	oldest := func() int {
		k := 0
		for k < len(reads) && got[k] == reads[k].npkts() {
			k++
		}
		return k
	}
	const timer = 4096 * (1 << 14) // ns: timeout 14
	// asked is the last read rxe asked for, goBack the read a go-back
	// under way asks for next (-1: none); lastReq is rxe's last request,
	// cause the first packet of a later read since the last go-back.
	asked, goBack := -1, -1
	var lastReq, cause *frame
	var starts, rests, timeouts int
	for _, f := range c.frames {
		k := readOf(reads, f.psn())
		if k < 0 {
			t.Fatalf("%v: PSN in no read", f)
		}
		m := reads[k]
		if !f.fromRxe {
			switch o := oldest(); {
			case k == o && f.psn() == m.first.Add(got[k]):
				got[k]++
			case k > o && cause == nil:
				cause = f
			}
			continue
		}
		off := got[k] * pathMTU
		if r := f.p.RETH(); f.psn() != m.first.Add(got[k]) || r.VA() != m.va+uint64(off) || r.DMALen() != m.length-off {
			t.Errorf("%v: asks for read %d (%v) from PSN %d, %d bytes at %#x; rxe had taken %d of its packets, so the rest is from PSN %d, %d bytes at %#x",
				f, k+1, m, f.psn(), r.DMALen(), r.VA(), got[k], m.first.Add(got[k]), m.length-off, m.va+uint64(off))
		}
		switch {
		case k > asked:
			if k != asked+1 || goBack >= 0 {
				t.Errorf("%v: asks for read %d after read %d, with a go-back to read %d under way (0: none)", f, k+1, asked+1, goBack+1)
			}
			asked = k
		case k == goBack:
			goBack = k + 1
		default:
			starts++
			if got[k] > 0 {
				rests++
			}
			if o := oldest(); goBack >= 0 || k != o {
				t.Errorf("%v: goes back to read %d; the oldest read not complete is %d, and a go-back to read %d is under way (0: none)", f, k+1, o+1, goBack+1)
			}
			if cause != nil {
				if d := f.t - cause.t; d > 10_000_000 {
					t.Errorf("%v: goes back %v after %v", f, durationSince(t0+d), cause)
				}
			} else {
				timeouts++
				if d := f.t - lastReq.t; d < timer || d > timer+10_000_000 {
					t.Errorf("%v: goes back %v after rxe's last request with nothing to cause it; want its timer, %v", f, durationSince(t0+d), durationSince(t0+timer))
				}
			}
			cause, goBack = nil, k+1
		}
		if goBack > asked {
			goBack = -1
		}
		lastReq = f
	}
	if starts != 4 || rests != 2 || timeouts != 1 {
		t.Errorf("%d go-backs, %d of them from the middle of a read and %d on a timeout; want 4, 2 (frames 14, 29) and 1 (frame 50)", starts, rests, timeouts)
	}
	for k, m := range reads {
		if got[k] != m.npkts() {
			t.Errorf("read %d (%v): rxe took %d of its %d packets by the end", k+1, m, got[k], m.npkts())
		}
	}
}
