package rc_test

import (
	"bytes"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// readAsk is a read request as the requester sent it.
type readAsk struct {
	psn uint32
	va  uint64
	len uint32
}

// readRetryFixture posts n reads of size bytes each (MTU 1024) after a
// warm-up write, with dropResp deciding which response packets B sends are
// lost (k counts B's read response packets from 1), and returns the read
// requests A sent.
func readRetryFixture(t *testing.T, n, size int, dropResp func(k int, p *wire.Packet) bool) (*fixture, []readAsk) {
	t.Helper()
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024})
	var asks []readAsk
	f.p.A.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Opcode == wire.RCReadRequest {
			asks = append(asks, readAsk{p.BTH().PSN(), p.RETH().VA(), p.RETH().DMALen()})
		}
		return transporttest.Pass
	}
	// Warm the RTT estimate so that probes run.
	f.postSend(verbs.SendWR{ID: 1000, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	k := 0
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskReadResponse != 0 {
			k++
			if dropResp(k, p) {
				return transporttest.Drop
			}
		}
		return transporttest.Pass
	}
	fill(f.mb.Bytes()[:n*size], 77)
	clear(f.ma.Bytes()[:n*size])
	for i := range n {
		f.postSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRead, SGL: sge(f.ma, i*size, size), RemoteAddr: f.mb.Addr() + uint64(i*size), RKey: f.mb.RKey()})
	}
	cs := f.wait(f.p.A.SendCQ, n)
	for i, c := range cs {
		if c.Status != verbs.Success || c.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v (completions must be in order)", i, c)
		}
	}
	if !bytes.Equal(f.ma.Bytes()[:n*size], f.mb.Bytes()[:n*size]) {
		t.Fatal("read data differs")
	}
	return f, asks
}

// TestReadGapAsksForThatReadAlone: a response packet lost in the middle of
// the first of several outstanding reads costs one repeated request for
// the rest of that read; the later reads' responses, which arrive
// meanwhile, are placed, not thrown away and asked for again.
func TestReadGapAsksForThatReadAlone(t *testing.T) {
	const n, size = 8, 8192 // 8 packets each
	f, asks := readRetryFixture(t, n, size, func(k int, _ *wire.Packet) bool { return k == 3 })
	if len(asks) != n+1 {
		t.Fatalf("%d read requests, want %d (one repeat): %+v", len(asks), n+1, asks)
	}
	again := asks[n]
	first := asks[0]
	if again.psn != uint32(psn.PSN(first.psn).Add(2)) || again.va != f.mb.Addr()+2*1024 || again.len != size-2*1024 {
		t.Fatalf("repeat %+v, want PSN %#x VA %#x len %d (from the lost packet of read 0)", again, psn.PSN(first.psn).Add(2), f.mb.Addr()+2*1024, size-2*1024)
	}
	if st := f.qa.Stats(); st.AskedAgain != 1 || st.Timeouts != 0 {
		t.Fatalf("stats %+v: want one repeated request, no timeout", st)
	}
}

// TestReadWholeResponseLost: the whole response of a middle read is lost;
// the next read's response shows it, and that read alone is asked again,
// from its first packet.
func TestReadWholeResponseLost(t *testing.T) {
	const n, size = 4, 4096 // 4 packets each
	f, asks := readRetryFixture(t, n, size, func(k int, _ *wire.Packet) bool { return k >= 5 && k <= 8 })
	if len(asks) != n+1 {
		t.Fatalf("%d read requests, want %d: %+v", len(asks), n+1, asks)
	}
	if asks[n].psn != asks[1].psn || asks[n].va != asks[1].va || asks[n].len != size {
		t.Fatalf("repeat %+v, want read 1 again whole (%+v)", asks[n], asks[1])
	}
	if st := f.qa.Stats(); st.AskedAgain != 1 || st.Timeouts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestReadRepeatLostToo: the first packet of the repeated response is lost
// as well; the requester asks again (after a probe timeout, not for every
// stale packet of the first response), never from before its last request.
func TestReadRepeatLostToo(t *testing.T) {
	const n, size = 4, 8192
	seen := map[uint32]int{}
	f, asks := readRetryFixture(t, n, size, func(k int, p *wire.Packet) bool {
		ps := p.BTH().PSN()
		seen[ps]++
		// The third packet of read 0, the first two times it is sent.
		return k == 3 || (seen[ps] == 2 && k > 8 && ps == seenFirst(seen, 3))
	})
	for i := n + 1; i < len(asks); i++ {
		if asks[i].va < asks[i-1].va && asks[i].psn == asks[i-1].psn {
			t.Fatalf("request %d asks from %#x, below the previous repeat's %#x", i, asks[i].va, asks[i-1].va)
		}
	}
	if st := f.qa.Stats(); st.AskedAgain+st.Probes < 2 || st.Timeouts != 0 || len(asks) > n+4 {
		t.Fatalf("stats %+v, %d requests: want two repeats, no timeout", st, len(asks))
	}
}

// seenFirst returns the PSN that was the k-th distinct one in seen; it
// relies on PSNs being handed out in order from the first read.
func seenFirst(seen map[uint32]int, k int) uint32 {
	min := ^uint32(0)
	for p := range seen {
		min = minU(min, p)
	}
	return (min + uint32(k-1)) & psn.Mask
}

func minU(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}

// TestWriteAckAfterLostRead: a write after a read is acknowledged while
// the read's response was lost; the read alone is asked again and the
// write completes after it, in order.
func TestWriteAckAfterLostRead(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024})
	f.postSend(verbs.SendWR{ID: 1000, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	dropped := false
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskReadResponse != 0 && !dropped {
			dropped = true
			return transporttest.Drop
		}
		return transporttest.Pass
	}
	fill(f.mb.Bytes()[:4096], 9)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpRead, SGL: sge(f.ma, 0, 2048), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: sge(f.ma, 8192, 3000), RemoteAddr: f.mb.Addr() + 65536, RKey: f.mb.RKey()})
	cs := f.wait(f.p.A.SendCQ, 2)
	if cs[0].WRID != 1 || cs[1].WRID != 2 || cs[0].Status != verbs.Success || cs[1].Status != verbs.Success {
		t.Fatalf("completions %+v", cs)
	}
	if !bytes.Equal(f.ma.Bytes()[:2048], f.mb.Bytes()[:2048]) {
		t.Fatal("read data differs")
	}
	if st := f.qa.Stats(); st.AskedAgain != 1 || st.Timeouts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestErrorNAKBehindLostRead: a request after a read fails at the
// responder (bad rkey) while the read's response is lost: the failed
// request completes with the NAK's status, the read before it with a
// flush error, in order.
func TestErrorNAKBehindLostRead(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024})
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskReadResponse != 0 {
			return transporttest.Drop
		}
		return transporttest.Pass
	}
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpRead, SGL: sge(f.ma, 0, 2048), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: sge(f.ma, 8192, 100), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey() ^ 0x100})
	cs := f.wait(f.p.A.SendCQ, 2)
	if cs[0].WRID != 1 || cs[0].Status != verbs.WRFlushErr || cs[1].WRID != 2 || cs[1].Status != verbs.RemAccessErr {
		t.Fatalf("completions %+v: want the read flushed, then the write with a remote access error", cs)
	}
}

// TestAtomicResultLostBehindReads: an atomic's acknowledge is lost while
// later reads are answered; the atomic is asked again and its result
// replayed by the responder, never executed twice.
func TestAtomicResultLostBehindReads(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024})
	f.postSend(verbs.SendWR{ID: 1000, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	clear(f.mb.Bytes()[:8])
	dropped := false
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Opcode == wire.RCAtomicAcknowledge && !dropped {
			dropped = true
			return transporttest.Drop
		}
		return transporttest.Pass
	}
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpFetchAdd, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey(), CompareAdd: 5})
	for i := 2; i <= 4; i++ {
		f.postSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRead, SGL: sge(f.ma, 4096*i, 4096), RemoteAddr: f.mb.Addr() + 4096, RKey: f.mb.RKey()})
	}
	cs := f.wait(f.p.A.SendCQ, 4)
	for i, c := range cs {
		if c.WRID != uint64(i+1) || c.Status != verbs.Success {
			t.Fatalf("completions %+v", cs)
		}
	}
	if got := f.mb.Bytes()[0]; got != 5 {
		t.Fatalf("counter %d, want 5 (executed once)", got)
	}
	if st := f.qa.Stats(); st.AskedAgain != 1 || st.Timeouts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLostRepeatShownByLaterRequests: the repeated request for a read is
// lost too; responses to requests posted after it show that the responder
// got past where the repeat should have been, and the read is asked again
// at once, without waiting for a probe or the retransmit timer.
func TestLostRepeatShownByLaterRequests(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024})
	f.postSend(verbs.SendWR{ID: 1000, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	var asks []readAsk
	lostRepeat := false
	f.p.A.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Opcode != wire.RCReadRequest {
			return transporttest.Pass
		}
		a := readAsk{p.BTH().PSN(), p.RETH().VA(), p.RETH().DMALen()}
		for _, b := range asks {
			if b.psn <= a.psn && a.psn < b.psn+8 && !lostRepeat {
				lostRepeat = true
				asks = append(asks, a)
				return transporttest.Drop
			}
		}
		asks = append(asks, a)
		return transporttest.Pass
	}
	k := 0
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskReadResponse != 0 {
			if k++; k == 3 {
				return transporttest.Drop
			}
		}
		return transporttest.Pass
	}
	const size = 8192
	fill(f.mb.Bytes()[:8*size], 78)
	for i := range 4 {
		f.postSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRead, SGL: sge(f.ma, i*size, size), RemoteAddr: f.mb.Addr() + uint64(i*size), RKey: f.mb.RKey()})
	}
	if err := f.p.RunUntil(func() bool { return lostRepeat }, 1_000_000); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 8; i++ {
		f.postSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRead, SGL: sge(f.ma, i*size, size), RemoteAddr: f.mb.Addr() + uint64(i*size), RKey: f.mb.RKey()})
	}
	cs := f.wait(f.p.A.SendCQ, 8)
	for i, c := range cs {
		if c.Status != verbs.Success || c.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
	if !bytes.Equal(f.ma.Bytes()[:8*size], f.mb.Bytes()[:8*size]) {
		t.Fatal("read data differs")
	}
	if st := f.qa.Stats(); st.AskedAgain != 2 || st.Timeouts != 0 || st.Probes != 0 {
		t.Fatalf("stats %+v, requests %+v: want two repeats, no probe, no timeout", st, asks)
	}
}

// TestLargeReadSlowResponder: a 256-packet read behind a slow line (the
// response takes ~14 ms to arrive), with a packet lost from the response
// and then the first packet of the repeat: the requester asks again only
// when the stream of stale packets has ended, not once per probe timeout
// while the responder is still sending, and never times out.
func TestLargeReadSlowResponder(t *testing.T) {
	f := newFixture(t, memlink.Config{BtoARate: 20e6}, transporttest.RCOptions{MTU: 1024, Timeout: 14})
	f.postSend(verbs.SendWR{ID: 1000, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	const size = 256 << 10
	seen := map[uint32]int{}
	var first uint32
	k := 0
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskReadResponse == 0 {
			return transporttest.Pass
		}
		ps := p.BTH().PSN()
		if k++; k == 1 {
			first = ps
		}
		seen[ps]++
		// Packet 10 of the response, and again the first time it is repeated.
		if ps == (first+10)&psn.Mask && seen[ps] <= 2 {
			return transporttest.Drop
		}
		return transporttest.Pass
	}
	fill(f.mb.Bytes()[:size], 79)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpRead, SGL: sge(f.ma, 0, size), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("read: %+v (stats %+v)", c, f.qa.Stats())
	}
	if !bytes.Equal(f.ma.Bytes()[:size], f.mb.Bytes()[:size]) {
		t.Fatal("read data differs")
	}
	st := f.qa.Stats()
	if st.Timeouts != 0 || st.AskedAgain+st.Probes > 2 || f.qb.Stats().DupRequests > 2 {
		t.Fatalf("requester %+v, responder %+v: want two repeats in all, no timeout", st, f.qb.Stats())
	}
}

// TestLostGoBackHeadProbed: a packet is lost, the responder NAKs the gap
// (once: it stays silent about it until the packet arrives), and the
// go-back's resend of that packet is lost too. A probe of the tail would
// meet that silence; the requester's second probe resends the oldest
// unacknowledged packet and recovers without the retransmit timeout.
func TestLostGoBackHeadProbed(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024, Timeout: 14})
	f.postSend(verbs.SendWR{ID: 1000, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	var target uint32
	sent, hits := 0, 0
	f.p.A.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskWrite == 0 {
			return transporttest.Pass
		}
		ps := p.BTH().PSN()
		if sent++; sent == 1 {
			target = (ps + 3) & psn.Mask
		}
		if ps == target {
			if hits++; hits <= 2 { // the original and the go-back's resend
				return transporttest.Drop
			}
		}
		return transporttest.Pass
	}
	const size = 8 * 1024
	fill(f.ma.Bytes()[:size], 80)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: sge(f.ma, 0, size), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("write: %+v", c)
	}
	if !bytes.Equal(f.ma.Bytes()[:size], f.mb.Bytes()[:size]) {
		t.Fatal("data differs")
	}
	if st := f.qa.Stats(); st.Timeouts != 0 || st.SeqNAKsRcvd == 0 {
		t.Fatalf("requester %+v responder %+v: want recovery by probe after the NAK, no timeout", st, f.qb.Stats())
	}
}

// TestReadRestartsOnRepeat: a long read over a lossy link that holds 64
// frames a way, as a NIC's ring does. The responder, asked again for the
// rest of a read it is still answering, answers from there at once
// instead of finishing the old answer (whose rest the requester throws
// away) and answering again after it: a 2 MiB read losing 1 % of its
// responses costs about 3600 response packets, not 26000 (as before,
// growing with the square of the read's length).
func TestReadRestartsOnRepeat(t *testing.T) {
	f := newFixture(t, memlink.Config{Capacity: 64, BtoA: link.Faults{Loss: 0.01}, Seed: 7}, transporttest.RCOptions{MTU: 1024})
	const size = 2 << 20 // 2048 packets
	fill(f.mb.Bytes()[:size], 77)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpRead, SGL: sge(f.ma, 0, size), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1); c[0].Status != verbs.Success || !bytes.Equal(f.ma.Bytes()[:size], f.mb.Bytes()[:size]) {
		t.Fatalf("read: %v, or its data differs", c[0].Status)
	}
	sent := f.qb.Stats().TxPackets
	t.Logf("%d response packets for 2048, %d asked again", sent, f.qa.Stats().AskedAgain)
	if sent > 2*2048 {
		t.Fatalf("%d response packets for a 2048-packet read losing 1 %%", sent)
	}
}
