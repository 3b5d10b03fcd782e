package rxereplay

// The *-sf-client captures, where softfabric was the requester. The work
// requests it posted are rebuilt from its own frames (opcode, length,
// remote address and rkey, atomic operands, payload) and posted on a fresh
// queue pair with the captured QPN and first PSN; rxe's responses are fed
// in order. Each rebuilt request gets a local buffer of its own, so that
// each read's data and each atomic's result can be checked (perftest
// points them all at one buffer).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// requesterSetup is softfabric's queue pair of a *-sf-client capture with
// its requests, rebuilt and posted as perftest posts them: all at once,
// the last one signalled (and, so that each result can be checked, every
// read and atomic; that changes nothing on the wire, where they always
// ask for an acknowledge).
type requesterSetup struct {
	h    *host
	cn   *conn
	q    *rc.QP
	msgs []*message
	bufs []*mr.Region // local buffer of each message
}

func newRequester(t testing.TB, c *capture) *requesterSetup {
	t.Helper()
	conns := c.conns(t)
	if len(conns) != 1 {
		t.Fatalf("%s: %d connections, want 1", c.name, len(conns))
	}
	s := &requesterSetup{h: newHost(), cn: conns[0]}
	s.msgs = c.messages(t, s.cn, false)
	if len(s.msgs) == 0 {
		t.Fatalf("%s: softfabric sent no requests", c.name)
	}
	s.q = s.h.newRC(t, c, s.cn, verbs.NewRecvQueue(1024))
	for i, m := range s.msgs {
		var flags verbs.SendFlags
		if i == len(s.msgs)-1 || m.op.NeedsResponse() {
			flags = verbs.Signaled
		}
		wr, buf := s.h.sendWR(t, c, s.cn, m, uint64(i), flags)
		if err := s.q.PostSend(&wr); err != nil {
			t.Fatalf("%s: posting %v: %v", c.name, m, err)
		}
		s.bufs = append(s.bufs, buf)
	}
	return s
}

// check verifies that every request completed successfully, in order,
// that each read placed what rxe's responses carried and each atomic
// returned the value rxe's acknowledge carried.
func (s *requesterSetup) check(t testing.TB, c *capture) {
	t.Helper()
	comps := poll(s.h.scq)
	i := 0
	for _, comp := range comps {
		for i < len(s.msgs)-1 && !s.msgs[i].op.NeedsResponse() && uint64(i) != comp.WRID {
			i++ // unsignalled, completed silently
		}
		m := s.msgs[i]
		if comp.WRID != uint64(i) || comp.Status != verbs.Success || comp.Opcode != verbs.SendCompOpcode(m.op) || comp.ByteLen != m.length {
			t.Errorf("%s: %v completed with %+v", c.name, m, comp)
		}
		i++
	}
	if i != len(s.msgs) {
		t.Fatalf("%s: %d of %d requests completed; the next is %v (queue pair %v, %+v)", c.name, i, len(s.msgs), s.msgs[i], s.q.State(), s.q.Stats())
	}
	for i, m := range s.msgs {
		got := s.bufs[i].Bytes()
		switch {
		case m.op == verbs.OpRead:
			if want := readData(t, c, s.cn, m); !bytes.Equal(got[:m.length], want) {
				t.Errorf("%s: %v placed %s, rxe's responses carried %s", c.name, m, brief(got[:m.length]), brief(want))
			}
		case m.op.IsAtomic():
			want := atomicAck(t, c, s.cn, m).p.AtomicAckETH().OrigData()
			if v := binary.NativeEndian.Uint64(got); v != want {
				t.Errorf("%s: %v returned %#x, rxe's acknowledge carried %#x", c.name, m, v, want)
			}
		}
	}
}

// brief shows the first bytes of b.
func brief(b []byte) string {
	if len(b) > 8 {
		return fmt.Sprintf("[% x …] (%d bytes)", b[:8], len(b))
	}
	return fmt.Sprintf("[% x]", b)
}

// readData returns what rxe's responses say read m returned: the payload
// at each of its PSNs, from any copy of that response, which must all
// agree (rxe's memory did not change).
func readData(t testing.TB, c *capture, cn *conn, m *message) []byte {
	t.Helper()
	parts := make([][]byte, m.npkts())
	for _, f := range c.frames {
		if !f.fromRxe || !cn.belongs(f) || f.mask()&wire.MaskReadResponse == 0 || !f.psn().InWindow(m.first, m.npkts()) {
			continue
		}
		k := f.psn().Diff(m.first)
		if parts[k] != nil && !bytes.Equal(parts[k], f.p.Payload) {
			t.Fatalf("%s: %v: payload differs from the earlier copy of this response", c.name, f)
		}
		parts[k] = f.p.Payload
	}
	var out []byte
	for k, p := range parts {
		if p == nil {
			t.Fatalf("%s: no response with PSN %d for %v in the capture", c.name, m.first.Add(uint32(k)), m)
		}
		out = append(out, p...)
	}
	return out
}

// atomicAck returns rxe's acknowledge of atomic m.
func atomicAck(t testing.TB, c *capture, cn *conn, m *message) *frame {
	t.Helper()
	for _, f := range c.frames {
		if f.fromRxe && cn.belongs(f) && f.p.Opcode == wire.RCAtomicAcknowledge && f.psn() == m.first {
			return f
		}
	}
	t.Fatalf("%s: no atomic acknowledge for %v", c.name, m)
	return nil
}

func TestRequesterCompletesAgainstRxeAsInTheCapture(t *testing.T) {
	// A clean capture is replayed in lock step: softfabric must send
	// exactly the frames it sent then (segmentation, PSNs, AckReq, RETH,
	// AtomicETH, payload), and every request completes with rxe's data.
	for _, name := range []string{
		"write-sf-client.pcapng",
		"send-sf-client.pcapng",
		"read-sf-client.pcapng",
		"atomic-fetch-and-add-sf-client.pcapng",
		"atomic-cmp-and-swap-sf-client.pcapng",
	} {
		t.Run(strings.TrimSuffix(name, ".pcapng"), func(t *testing.T) {
			c := load(t, name)
			s := newRequester(t, c)
			newReplayer(t, c, s.q).lockstep(nil, nil)
			s.check(t, c)
			if st := s.q.Stats(); st.Retransmits+st.Timeouts+st.Probes+st.DupResponses+st.Dropped != 0 {
				t.Errorf("%s: %+v", name, st)
			}
		})
	}
}

func TestRCPingPongClientAsInTheCapture(t *testing.T) {
	// softfabric's `pingpong` client against ibv_rc_pingpong: it sends
	// first, then answers each of rxe's messages with its next one; each
	// send is posted where the capture shows it starting, each of rxe's
	// lands in a receive posted up front.
	c := load(t, "rc-pingpong-sf-client.pcapng")
	cn := c.conns(t)[0]
	h := newHost()
	out, in := c.messages(t, cn, false), c.messages(t, cn, true)
	rq := verbs.NewRecvQueue(1024)
	bufs := receives(t, h, rq.Post, len(in), int(in[0].length), 1)
	q := h.newRC(t, c, cn, rq)
	newReplayer(t, c, q).lockstep(postAtFirstPacket(t, h, c, cn, q, out), nil)
	sent := poll(h.scq)
	if len(sent) != len(out) {
		t.Fatalf("%d send completions, want %d", len(sent), len(out))
	}
	for i, comp := range sent {
		if comp.Status != verbs.Success || comp.Opcode != verbs.CompSend || comp.ByteLen != out[i].length {
			t.Errorf("%v completed with %+v", out[i], comp)
		}
	}
	got := poll(h.rcq)
	if len(got) != len(in) {
		t.Fatalf("%d receive completions, want %d", len(got), len(in))
	}
	for i, comp := range got {
		if comp.Status != verbs.Success || comp.ByteLen != in[i].length || !bytes.Equal(bufs[comp.WRID].Bytes()[:comp.ByteLen], in[i].payload) {
			t.Errorf("receive of %v completed with %+v", in[i], comp)
		}
	}
	if st := q.Stats(); st.Retransmits+st.DupRequests+st.DupResponses+st.Dropped != 0 {
		t.Errorf("queue pair stats %+v", st)
	}
}

func TestRequesterRecoversFromLossCaptures(t *testing.T) {
	// The loss captures cannot be replayed in lock step: what softfabric
	// sends depends on timers, and the original run's timing is gone.
	// rxe's frames are delivered at their capture times in virtual time,
	// the queue pair transmitting whatever it wants whenever it wants
	// (its retransmissions go nowhere), timers firing as they fall due.
	// rxe's frames answer what the original run sent; softfabric must
	// reach the same end with them: every request complete, every read
	// holding rxe's data. What it sends on the way must keep the rules the
	// capture shows it keeping (see the tests below): a write packet sent
	// again is the packet sent before at that PSN; a repeated read asks
	// from the first packet missing, never from below an earlier repeat.
	for _, name := range []string{"write-sf-client-loss.pcapng", "read-sf-client-loss.pcapng"} {
		t.Run(strings.TrimSuffix(name, ".pcapng"), func(t *testing.T) {
			c := load(t, name)
			s := newRequester(t, c)
			events := replayInVirtualTime(t, c, s)
			s.check(t, c)
			sent := 0
			for _, f := range events {
				if !f.fromRxe {
					sent++
				}
			}
			t.Logf("%s: softfabric sent %d frames in the replay, %d in the capture; %+v", name, sent, len(c.frames)-countFromRxe(c), s.q.Stats())
			if s.msgs[0].op == verbs.OpRead {
				checkRepeatedReads(t, s.msgs, events)
				return
			}
			first := map[psn.PSN]*frame{}
			for _, f := range c.frames {
				if !f.fromRxe && first[f.psn()] == nil {
					first[f.psn()] = f
				}
			}
			for _, f := range events {
				if f.fromRxe {
					continue
				}
				// Headers after the BTH and payload; AckReq may differ.
				body := func(p *wire.Packet) []byte { return p.Frame[p.BTHOff+wire.BTHSize : p.End-wire.ICRCSize] }
				if g := first[f.psn()]; g == nil || f.p.Opcode != g.p.Opcode || !bytes.Equal(body(&f.p), body(&g.p)) {
					t.Errorf("%v: differs from %v", f, g)
				}
			}
		})
	}
}

// replayInVirtualTime delivers rxe's frames of c to s's queue pair at
// their capture times, letting it transmit after each and when its timers
// fall due. It returns what happened: rxe's frames and the frames
// softfabric sent, in order.
func replayInVirtualTime(t testing.TB, c *capture, s *requesterSetup) []*frame {
	t.Helper()
	r := newReplayer(t, c, s.q)
	var events []*frame
	n := 0
	collect := func() {
		for _, data := range r.out.frames {
			f := &frame{i: n, t: r.now, data: data, replayed: true}
			if err := f.p.Parse(data); err != nil {
				t.Fatalf("softfabric sends a frame that does not parse: %v", err)
			}
			events = append(events, f)
			n++
		}
		r.out.frames = nil
	}
	r.transmit() // perftest posts, then polls: the engine sends at once
	collect()
	for _, f := range c.frames {
		if !f.fromRxe {
			continue
		}
		r.runTimers(f.t)
		collect()
		r.deliver(f)
		events = append(events, f)
		r.transmit()
		collect()
	}
	return events
}

func countFromRxe(c *capture) int {
	n := 0
	for _, f := range c.frames {
		if f.fromRxe {
			n++
		}
	}
	return n
}

// rxeAck is an acknowledge rxe owes: its PSN, syndrome and MSN, and the
// frame of softfabric's that caused it.
type rxeAck struct {
	psn   psn.PSN
	syn   uint8
	msn   uint32
	cause *frame
}

func TestRxeAcknowledgesWritesAsAnInOrderResponder(t *testing.T) {
	// write-sf-client-loss: 20 % of what softfabric sent was dropped before
	// the capture, so the capture holds exactly what reached rxe, and
	// nothing rxe sent was lost. rxe's ACKs and NAKs must then be exactly
	// what an IBTA responder owes those frames, in order: it accepts only
	// the PSN it expects; ACKs an accepted packet that asks for one (with
	// that PSN); ACKs every duplicate, asked or not, with the last PSN it
	// accepted; and answers the first packet past a gap with one sequence
	// NAK naming the first PSN missing from what softfabric had sent, and
	// nothing more until the gap is filled. The MSN counts the writes
	// completed. Each answer comes after the frame that caused it.
	c := load(t, "write-sf-client-loss.pcapng")
	cn := c.conns(t)[0]
	msgs := c.messages(t, cn, false)
	ends := map[psn.PSN]bool{}
	for _, m := range msgs {
		ends[m.last] = true
	}
	var owed []rxeAck
	expected, msn, nakSent := cn.sfPSN, uint32(0), false
	var got []*frame
	for _, f := range c.frames {
		if f.fromRxe {
			got = append(got, f)
			continue
		}
		switch d := f.psn().Diff(expected); {
		case d < 0:
			owed = append(owed, rxeAck{expected.Sub(1), wire.AckSyndrome(wire.CreditsInvalid), msn, f})
		case d > 0:
			if !nakSent {
				owed = append(owed, rxeAck{expected, wire.NAKSyndrome(wire.NAKPSNSeqErr), msn, f})
				nakSent = true
			}
		default:
			expected, nakSent = expected.Next(), false
			if ends[f.psn()] {
				msn++
			}
			if f.p.BTH().AckReq() {
				owed = append(owed, rxeAck{f.psn(), wire.AckSyndrome(wire.CreditsInvalid), msn, f})
			}
		}
	}
	for i := range max(len(owed), len(got)) {
		switch {
		case i >= len(got):
			t.Fatalf("rxe owes %s for PSN %d (caused by %v) but sent nothing more", syndrome(owed[i].syn), owed[i].psn, owed[i].cause)
		case i >= len(owed):
			t.Fatalf("%v: not owed (%d acknowledges owed in all)", got[i], len(owed))
		}
		g, w := got[i], owed[i]
		if g.p.Opcode != wire.RCAcknowledge || g.psn() != w.psn || g.p.AETH().Syndrome() != w.syn || g.p.AETH().MSN() != w.msn || g.i < w.cause.i {
			t.Errorf("%v: want %s psn %d msn %d, owed for %v", g, syndrome(w.syn), w.psn, w.msn, w.cause)
		}
	}
	naks := 0
	for _, w := range owed {
		if wire.SyndromeKind(w.syn) == wire.AckKindNAK {
			naks++
		}
	}
	if naks == 0 {
		t.Fatal("no sequence NAKs in the capture")
	}
}

// readOf returns the index of the read in reads (sorted by PSN) that PSN
// p falls in, or -1.
func readOf(reads []*message, p psn.PSN) int {
	k := sort.Search(len(reads), func(i int) bool { return !reads[i].last.Before(p) })
	if k == len(reads) || !p.InWindow(reads[k].first, reads[k].npkts()) {
		return -1
	}
	return k
}

func TestRepeatedReadsAskFromTheFirstMissingPacket(t *testing.T) {
	// read-sf-client-loss: 20 % of rxe's frames were lost before
	// softfabric saw them. softfabric places each read's response in
	// order and asks again for the rest of a read whose response has a
	// hole; checkRepeatedReads holds its requests in the capture to the
	// rules. TestRequesterRecoversFromLossCaptures holds the replay's to
	// the same rules.
	c := load(t, "read-sf-client-loss.pcapng")
	if checkRepeatedReads(t, c.messages(t, c.conns(t)[0], false), c.frames) == 0 {
		t.Fatal("no repeated read requests in the capture")
	}
}

// checkRepeatedReads checks softfabric's read requests in events (its
// frames and rxe's, in the order softfabric sent and received them), and
// returns how many repeated a read. Each repeat must ask from the first
// packet of its read not yet received in order at that point (RETH address
// and length advanced to match), and never from below an earlier repeat
// of the same read: rxe takes a repeat's address as the lowest it will
// serve again (duplicate_request in rxe_resp.c sets va_org) and drops a
// later request from below it without a word. By the end every read's
// response must have been received whole.
func checkRepeatedReads(t testing.TB, reads []*message, events []*frame) int {
	t.Helper()
	placed := make([]uint32, len(reads))
	sent := make([]bool, len(reads))
	asked := make([]psn.PSN, len(reads)) // where the last repeat of each asked from
	repeated := make([]bool, len(reads))
	repeats := 0
	for _, f := range events {
		k := readOf(reads, f.psn())
		if k < 0 {
			t.Fatalf("%v: PSN in no read", f)
		}
		m := reads[k]
		if f.fromRxe {
			if f.psn() == m.first.Add(placed[k]) {
				placed[k]++
			}
			continue
		}
		if !sent[k] {
			sent[k] = true
			if f.psn() != m.first || f.p.RETH().DMALen() != m.length {
				t.Errorf("%v: read %d first asks for something else than %v", f, k, m)
			}
			continue
		}
		repeats++
		want := m.first.Add(placed[k])
		off := uint32(want.Diff(m.first)) * pathMTU
		reth := f.p.RETH()
		switch {
		case placed[k] == m.npkts():
			t.Errorf("%v: repeats read %d, whose response was already whole", f, k)
		case f.psn() != want:
			t.Errorf("%v: repeats read %d from PSN %d; the first packet not yet received is %d", f, k, f.psn(), want)
		case reth.VA() != m.va+uint64(off) || reth.DMALen() != m.length-off || reth.RKey() != m.rkey:
			t.Errorf("%v: asks for %d bytes at %#x; the rest of read %d is %d bytes at %#x", f, reth.DMALen(), reth.VA(), k, m.length-off, m.va+uint64(off))
		case repeated[k] && f.psn().Before(asked[k]):
			t.Errorf("%v: asks from below the earlier repeat of read %d, from PSN %d", f, k, asked[k])
		}
		asked[k], repeated[k] = f.psn(), true
	}
	for k, m := range reads {
		if placed[k] != m.npkts() {
			t.Errorf("read %d (%v): %d of %d response packets received in order by the end", k, m, placed[k], m.npkts())
		}
	}
	return repeats
}

func TestRxeServesRepeatedReadsFromWhereAsked(t *testing.T) {
	// rxe serves the read requests in the order they reach it (nothing
	// softfabric sent was lost in read-sf-client-loss), each from the PSN
	// it asks for to the end of its read; some of what it sends is lost.
	// So every response in the capture must belong to a request
	// softfabric had sent, never to one before the request rxe was last
	// seen serving, and never below the PSN that request asked for, nor
	// below what rxe had already sent for it. A replay that starts
	// mid-read starts with MIDDLE or LAST, never FIRST (rxe answers
	// psn != first_psn with rdatm_res_state_replay); it starts with FIRST
	// or ONLY only at a read's first PSN. Its AETHs carry rxe's MSN of the
	// time, not the original response's.
	c := load(t, "read-sf-client-loss.pcapng")
	cn := c.conns(t)[0]
	reads := c.messages(t, cn, false)
	type req struct {
		f       *frame
		read    int
		from    psn.PSN
		next    psn.PSN // the lowest PSN rxe may still send for it
		started bool
	}
	var queue []*req
	head, replays, midStarts := 0, 0, 0
	var maxMSN uint32
	for _, f := range c.frames {
		k := readOf(reads, f.psn())
		if !f.fromRxe {
			queue = append(queue, &req{f: f, read: k, from: f.psn(), next: f.psn()})
			continue
		}
		j := head
		for ; j < len(queue); j++ {
			q := queue[j]
			if q.read == k && !f.psn().Before(q.next) {
				break
			}
		}
		if j == len(queue) {
			t.Fatalf("%v: no request rxe was serving or had still to serve asked for it", f)
		}
		q := queue[j]
		head = j
		original := q.f == reads[k].frames[0]
		if !original {
			replays++
		}
		if !q.started && f.psn() == q.from {
			wantFirst := q.from == reads[k].first
			if got := f.mask()&wire.MaskFirst != 0; got != wantFirst {
				t.Errorf("%v: starts rxe's answer to %v; FIRST/ONLY %v, want %v", f, q.f, got, wantFirst)
			}
			if !wantFirst {
				midStarts++
			}
		}
		q.started, q.next = true, f.psn().Next()
		if a := f.p.AETH(); a != nil {
			switch {
			case original && a.MSN() != uint32(k+1):
				t.Errorf("%v: MSN %d in the original response to read %d", f, a.MSN(), k+1)
			case !original && a.MSN() < maxMSN:
				t.Errorf("%v: replayed with MSN %d, below the %d rxe had sent before", f, a.MSN(), maxMSN)
			}
			maxMSN = max(maxMSN, a.MSN())
		}
	}
	if replays == 0 || midStarts == 0 {
		t.Fatalf("%d replayed responses, %d replays seen starting mid-read: the capture should show both", replays, midStarts)
	}
}
