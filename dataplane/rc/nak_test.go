package rc_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// TestErrorNAKs covers each responder check that answers with a fatal NAK:
// the request fails with the IBTA status, nothing is written, and the
// requests behind it are flushed.
func TestErrorNAKs(t *testing.T) {
	type setup struct {
		f      *fixture
		region *mr.Region // a target with restricted access
	}
	tests := []struct {
		name   string
		access mr.Access // target region access on B
		qpAcc  mr.Access // B's QP access (0: all)
		wr     func(s setup) verbs.SendWR
		want   verbs.Status
	}{
		{"write bad rkey", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.f.ma, 0, 64), RemoteAddr: s.region.Addr(), RKey: s.region.RKey() ^ 0x10000}
		}, verbs.RemAccessErr},
		{"write out of bounds", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.f.ma, 0, 64), RemoteAddr: s.region.Addr() + 4050, RKey: s.region.RKey()}
		}, verbs.RemAccessErr},
		{"write without permission", mr.LocalWrite | mr.RemoteRead, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.f.ma, 0, 64), RemoteAddr: s.region.Addr(), RKey: s.region.RKey()}
		}, verbs.RemAccessErr},
		{"multi-packet write out of bounds", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.f.ma, 0, 5000), RemoteAddr: s.region.Addr(), RKey: s.region.RKey()}
		}, verbs.RemAccessErr},
		{"read bad rkey", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: sge(s.f.ma, 0, 64), RemoteAddr: s.region.Addr(), RKey: 12345}
		}, verbs.RemAccessErr},
		{"read without permission", mr.LocalWrite | mr.RemoteWrite, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: sge(s.f.ma, 0, 64), RemoteAddr: s.region.Addr(), RKey: s.region.RKey()}
		}, verbs.RemAccessErr},
		{"read out of bounds", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: sge(s.f.ma, 0, 4097), RemoteAddr: s.region.Addr(), RKey: s.region.RKey()}
		}, verbs.RemAccessErr},
		{"atomic without permission", mr.LocalWrite | mr.RemoteWrite, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpFetchAdd, SGL: sge(s.f.ma, 0, 8), RemoteAddr: s.region.Addr(), RKey: s.region.RKey()}
		}, verbs.RemAccessErr},
		{"atomic misaligned", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpFetchAdd, SGL: sge(s.f.ma, 0, 8), RemoteAddr: s.region.Addr() + 4, RKey: s.region.RKey()}
		}, verbs.RemInvReqErr},
		{"QP without remote write", all, mr.RemoteRead, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.f.ma, 0, 64), RemoteAddr: s.region.Addr(), RKey: s.region.RKey()}
		}, verbs.RemInvReqErr},
		{"send longer than the receive", all, 0, func(s setup) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpSend, SGL: sge(s.f.ma, 0, 3000)}
		}, verbs.RemInvReqErr},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, memlink.Config{}, transporttest.RCOptions{Access: tc.qpAcc})
			region, err := f.p.B.Buffer(4096, tc.access)
			if err != nil {
				t.Fatal(err)
			}
			fill(f.ma.Bytes()[:8192], 1)
			f.postRecv(77, 0, 2048)
			wr := tc.wr(setup{f, region})
			wr.ID = 1
			f.postSend(wr)
			f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
			cs := f.wait(f.p.A.SendCQ, 2)
			if cs[0].WRID != 1 || cs[0].Status != tc.want {
				t.Fatalf("first completion %+v, want status %v", cs[0], tc.want)
			}
			if cs[1].WRID != 2 || cs[1].Status != verbs.WRFlushErr {
				t.Fatalf("second completion %+v, want a flush", cs[1])
			}
			if !bytes.Equal(region.Bytes(), make([]byte, 4096)) {
				t.Fatal("target memory written despite the error")
			}
			if f.qa.State() != verbs.StateErr || f.qb.State() != verbs.StateErr {
				t.Fatalf("states %v/%v, want both ERR", f.qa.State(), f.qb.State())
			}
			if f.qb.Stats().ErrNAKsSent != 1 || f.qa.Stats().ErrNAKsRcvd != 1 {
				t.Fatalf("NAK counters: responder %+v requester %+v", f.qb.Stats(), f.qa.Stats())
			}
			if wr.Op == verbs.OpSend {
				if c := f.wait(f.p.B.RecvCQ, 1)[0]; c.Status != verbs.LocLenErr || c.WRID != 77 {
					t.Fatalf("receive completion %+v, want a local length error", c)
				}
			}
		})
	}
}

func sge(r *mr.Region, off, n int) []mr.SGE { return []mr.SGE{transporttest.SGE(r, off, n)} }

func TestRNR(t *testing.T) {
	t.Run("retry exhausted", func(t *testing.T) {
		f := newFixture(t, memlink.Config{}, transporttest.RCOptions{RNRRetry: 0})
		// ConnectRC maps 0 to its default; set it explicitly.
		setRNRRetry(t, f, 0)
		f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpSend, SGL: sge(f.ma, 0, 10)})
		if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.RNRRetryExcErr {
			t.Fatalf("completion %+v, want RNR retry exceeded", c)
		}
		if f.qb.Stats().RNRNAKsSent != 1 {
			t.Fatalf("responder sent %d RNR NAKs, want 1", f.qb.Stats().RNRNAKsSent)
		}
	})
	t.Run("receive posted later", func(t *testing.T) {
		f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MinRNRTimer: 14}) // 1.28 ms
		setRNRRetry(t, f, 3)
		fill(f.ma.Bytes()[:3000], 5)
		f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpSend, SGL: sge(f.ma, 0, 3000)})
		if err := f.p.RunUntil(func() bool { return f.qb.Stats().RNRNAKsSent >= 2 }, 100000); err != nil {
			t.Fatal(err)
		}
		f.postRecv(5, 0, 4000)
		if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
			t.Fatalf("completion %+v", c)
		}
		if c := f.wait(f.p.B.RecvCQ, 1)[0]; c.Status != verbs.Success || c.ByteLen != 3000 {
			t.Fatalf("receive %+v", c)
		}
		if !bytes.Equal(f.mb.Bytes()[:3000], f.ma.Bytes()[:3000]) {
			t.Fatal("data differs")
		}
		if f.p.Now < 2*1280_000 {
			t.Fatalf("finished at %d ns: the requester did not wait the RNR timer", f.p.Now)
		}
	})
	t.Run("write with immediate", func(t *testing.T) {
		f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
		fill(f.ma.Bytes()[:100], 5)
		f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWriteImm, SGL: sge(f.ma, 0, 100), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
		if err := f.p.RunUntil(func() bool { return f.qb.Stats().RNRNAKsSent >= 1 }, 100000); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.mb.Bytes()[:100], make([]byte, 100)) {
			t.Fatal("write placed before a receive was available")
		}
		f.postRecv(5, 0, 0)
		f.wait(f.p.A.SendCQ, 1)
		if c := f.wait(f.p.B.RecvCQ, 1)[0]; c.Status != verbs.Success || c.Opcode != verbs.CompRecvWriteImm {
			t.Fatalf("receive %+v", c)
		}
	})
}

func setRNRRetry(t *testing.T, f *fixture, n uint8) {
	t.Helper()
	if err := f.qa.Modify(&verbs.QPAttr{RNRRetry: n}, verbs.AttrRNRRetry); err != nil {
		t.Fatal(err)
	}
}

// nth returns a filter function that applies v to the n-th (from 1) frame
// matching match, and passes everything else.
func nth(n int, match func(p *wire.Packet) bool, v transporttest.Verdict) func(p *wire.Packet) transporttest.Verdict {
	seen := 0
	return func(p *wire.Packet) transporttest.Verdict {
		if match(p) {
			seen++
			if seen == n {
				return v
			}
		}
		return transporttest.Pass
	}
}

func opIs(op wire.Opcode) func(p *wire.Packet) bool {
	return func(p *wire.Packet) bool { return p.Opcode == op }
}

func TestSequenceGap(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 256})
	f.p.A.Filter.Func = nth(2, opIs(wire.RCSendMiddle), transporttest.Drop)
	fill(f.ma.Bytes()[:5000], 9)
	f.postRecv(1, 0, 8192)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpSend, SGL: sge(f.ma, 0, 5000)})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("completion %+v", c)
	}
	if c := f.wait(f.p.B.RecvCQ, 1)[0]; c.Status != verbs.Success || c.ByteLen != 5000 {
		t.Fatalf("receive %+v", c)
	}
	if !bytes.Equal(f.mb.Bytes()[:5000], f.ma.Bytes()[:5000]) {
		t.Fatal("data differs")
	}
	if n := f.qb.Stats().SeqNAKsSent; n != 1 {
		t.Fatalf("responder sent %d sequence NAKs for one gap, want 1", n)
	}
	if f.qa.Stats().SeqNAKsRcvd != 1 || f.qa.Stats().Retransmits == 0 {
		t.Fatalf("requester %+v", f.qa.Stats())
	}
	if f.qa.Stats().Timeouts != 0 {
		t.Fatalf("a NAKed gap waited for the timer: %+v", f.qa.Stats())
	}
}

func TestDuplicateRead(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	// Lose the second response packet once: the requester asks again from
	// there, and the responder re-executes the read from that PSN.
	f.p.B.Filter.Func = nth(2, func(p *wire.Packet) bool { return p.Info.Mask&wire.MaskReadResponse != 0 }, transporttest.Drop)
	fill(f.mb.Bytes()[:10000], 4)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpRead, SGL: sge(f.ma, 0, 10000), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("completion %+v", c)
	}
	if !bytes.Equal(f.ma.Bytes()[:10000], f.mb.Bytes()[:10000]) {
		t.Fatal("data differs")
	}
	if f.qb.Stats().DupRequests == 0 {
		t.Fatalf("responder saw no duplicate read: %+v", f.qb.Stats())
	}
}

func TestDuplicateAtomic(t *testing.T) {
	for _, tc := range []struct {
		name string
		hook func(f *fixture)
	}{
		{"request duplicated", func(f *fixture) {
			f.p.A.Filter.Func = nth(1, opIs(wire.RCFetchAdd), transporttest.Duplicate)
		}},
		{"acknowledge lost", func(f *fixture) {
			f.p.B.Filter.Func = nth(1, opIs(wire.RCAtomicAcknowledge), transporttest.Drop)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
			tc.hook(f)
			binary.NativeEndian.PutUint64(f.mb.Bytes()[:8], 100)
			f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpFetchAdd, CompareAdd: 5, SGL: sge(f.ma, 8, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
			if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
				t.Fatalf("completion %+v", c)
			}
			// Let any duplicate arrive and be answered.
			for i := 0; i < 100 && f.p.Step(); i++ {
			}
			if v := binary.NativeEndian.Uint64(f.mb.Bytes()[:8]); v != 105 {
				t.Fatalf("remote value %d: the atomic ran %d times", v, (v-100)/5)
			}
			if v := binary.NativeEndian.Uint64(f.ma.Bytes()[8:16]); v != 100 {
				t.Fatalf("returned original %d, want 100", v)
			}
			if f.qb.Stats().DupRequests != 1 {
				t.Fatalf("responder duplicates %d, want 1", f.qb.Stats().DupRequests)
			}
		})
	}
}

func TestRetryExhausted(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{RetryCnt: 3})
	f.p.A.Filter.Func = func(*wire.Packet) transporttest.Verdict { return transporttest.Drop }
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 64), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpRead, SGL: sge(f.ma, 0, 64), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	cs := f.wait(f.p.A.SendCQ, 2)
	if cs[0].WRID != 1 || cs[0].Status != verbs.RetryExcErr || cs[1].Status != verbs.WRFlushErr {
		t.Fatalf("completions %+v", cs)
	}
	if n := f.qa.Stats().Timeouts; n != 4 {
		t.Fatalf("%d timeouts, want retry count + 1 = 4", n)
	}
	// 4.096 µs × 2^10 per timeout.
	if f.p.Now < 4*4096<<10 {
		t.Fatalf("gave up at %d ns, before four timeouts", f.p.Now)
	}
}

func TestCorruptionCaughtByICRC(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	n := 0
	f.p.A.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if n++; n == 2 {
			p.Payload[0] ^= 0x40 // ICRC now wrong
		}
		return transporttest.Pass
	}
	fill(f.ma.Bytes()[:4000], 8)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 4000), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("completion %+v", c)
	}
	if !bytes.Equal(f.mb.Bytes()[:4000], f.ma.Bytes()[:4000]) {
		t.Fatal("corrupted data placed")
	}
	if f.p.B.Node.Stats().BadICRC != 1 {
		t.Fatalf("engine stats %+v, want one ICRC failure", f.p.B.Node.Stats())
	}
}

func TestFlushOnError(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	f.postRecv(1, 0, 10)
	f.postRecv(2, 0, 10)
	for i := 0; i < 3; i++ {
		f.postSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	}
	if err := f.qa.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.wait(f.p.A.SendCQ, 3) {
		if c.Status != verbs.WRFlushErr {
			t.Fatalf("send %+v not flushed", c)
		}
	}
	if err := f.qb.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.wait(f.p.B.RecvCQ, 2) {
		if c.Status != verbs.WRFlushErr {
			t.Fatalf("receive %+v not flushed", c)
		}
	}
	// Posting in ERR completes at once, flushed.
	f.postSend(verbs.SendWR{ID: 9, Op: verbs.OpSend, SGL: sge(f.ma, 0, 8)})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.WRID != 9 || c.Status != verbs.WRFlushErr {
		t.Fatalf("post in ERR: %+v", c)
	}
}

// TestReadProbeAsksFromFirstMissing: when the tail of a read response is
// lost, the tail-loss probe re-requests the read from the first missing
// packet (RETH advanced by what was placed), never just the last packet:
// Linux rxe keeps the address of a repeated read request as the lowest it
// will serve again, so a last-packet probe would make it refuse the
// go-back that follows.
func TestReadProbeAsksFromFirstMissing(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: 1024})
	// Lose read responses 3..8 of 8 once (the tail).
	responses := 0
	f.p.B.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Info.Mask&wire.MaskReadResponse != 0 {
			responses++
			if responses >= 3 && responses <= 8 {
				return transporttest.Drop
			}
		}
		return transporttest.Pass
	}
	var requests []uint64
	f.p.A.Filter.Func = func(p *wire.Packet) transporttest.Verdict {
		if p.Opcode == wire.RCReadRequest {
			requests = append(requests, p.RETH().VA())
		}
		return transporttest.Pass
	}
	// Warm the RTT estimate so the probe runs.
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 8), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	fill(f.mb.Bytes()[:8192], 6)
	f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpRead, SGL: sge(f.ma, 0, 8192), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("read: %+v", c)
	}
	if !bytes.Equal(f.ma.Bytes()[:8192], f.mb.Bytes()[:8192]) {
		t.Fatal("data differs")
	}
	if len(requests) < 2 {
		t.Fatalf("read requests %v: no retry", requests)
	}
	for i, va := range requests[1:] {
		if want := f.mb.Addr() + 2*1024; va != want {
			t.Fatalf("retry %d asked from %#x, want the first missing packet at %#x (all: %#x)", i+1, va, want, requests)
		}
	}
	if f.qa.Stats().Probes == 0 {
		t.Fatalf("no probe: %+v", f.qa.Stats())
	}
}

// A requester whose worker runs late (a starved core) notices its
// retransmit timeouts late: those spend no retry, so a peer that was just
// as starved, and lost nothing, is not declared dead.
func TestLateTimeoutsSpendNoRetry(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{RetryCnt: 1})
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(f.ma, 0, 64), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	// A runs five times, each three timeouts after the last; B does not
	// run at all meanwhile: no answer can come.
	const timeout = 4096 << 10 // RCOptions' default: 4.096 µs × 2^10
	for range 5 {
		f.p.Now += 3 * timeout
		if _, err := f.p.A.Node.Poll(f.p.Now); err != nil {
			t.Fatal(err)
		}
	}
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("completion %+v", c)
	}
	if s := f.qa.Stats(); s.LateTimeouts < 4 || s.Timeouts < s.LateTimeouts {
		t.Fatalf("stats %+v: want the late timeouts counted apart", s)
	}
}

// Timeouts noticed late still end in retry-exceeded when the peer is
// gone: after maxLateTimeouts of them in a row, they spend retries again.
func TestLateTimeoutsBounded(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{RetryCnt: 2})
	f.p.A.Filter.Func = func(*wire.Packet) transporttest.Verdict { return transporttest.Drop }
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 64), RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()})
	const timeout = 4096 << 10
	cs := make([]verbs.Completion, 1)
	for i := 0; f.p.A.SendCQ.Poll(cs) == 0; i++ {
		if i > 100 {
			t.Fatalf("no completion; stats %+v", f.qa.Stats())
		}
		f.p.Now += 3 * timeout
		if _, err := f.p.A.Node.Poll(f.p.Now); err != nil {
			t.Fatal(err)
		}
	}
	if cs[0].Status != verbs.RetryExcErr {
		t.Fatalf("completion %+v", cs[0])
	}
	if s := f.qa.Stats(); s.LateTimeouts != 16 || s.Timeouts != 16+3 {
		t.Fatalf("stats %+v: want 16 late timeouts, then the retry count + 1", s)
	}
}

// TestMisaddressed: a packet for a connected queue pair from an address
// other than its peer's (a stray of an earlier connection of the QPN, or
// forged) is dropped before it touches the PSN state, as rxe's check_addr
// drops it; the same packet from the peer's address is taken.
func TestMisaddressed(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	f.postRecv(1, 0, 64)
	pf := f.qa.Attr().Path // from A's address, qb's peer, to B's
	stranger := netip.MustParseAddr("198.18.99.99")
	if !pf.Src.Unmap().Is4() {
		stranger = netip.MustParseAddr("fe80::99")
	}
	packet := func(src netip.Addr) *wire.Packet {
		t.Helper()
		fields := pf
		fields.Src = src
		path, err := wire.NewPath(fields)
		if err != nil {
			t.Fatal(err)
		}
		hl := path.HeaderLen()
		b := make([]byte, hl+wire.BTHSize+8+wire.ICRCSize)
		wire.BTH(b[hl:]).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: f.qb.QPN(), PSN: f.qb.Attr().RQPSN})
		copy(b[hl+wire.BTHSize:], "stranger")
		path.Finish(b)
		var p wire.Packet
		if err := p.Parse(b); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	f.qb.Receive(packet(stranger), 0)
	if st := f.qb.Stats(); st.Misaddressed != 1 || st.RxPackets != 0 || f.p.B.RecvCQ.Len() != 0 {
		t.Fatalf("a packet from %v: %+v, %d receive completions", stranger, st, f.p.B.RecvCQ.Len())
	}
	f.qb.Receive(packet(pf.Src), 0)
	if c := f.wait(f.p.B.RecvCQ, 1)[0]; c.Status != verbs.Success || c.ByteLen != 8 || string(f.mb.Bytes()[:8]) != "stranger" {
		t.Fatalf("the same packet from the peer: %+v", c)
	}
}
