package rc

import (
	"encoding/binary"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Congestion window bounds, in packets.
const (
	initialCwnd = 64
	minCwnd     = 4
)

// onAcked grows the window for n newly acknowledged packets: doubling per
// round trip below ssthresh (slow start), one packet per window above.
func (r *requester) onAcked(n uint32) {
	if r.cwnd < r.ssthresh {
		r.cwnd = min(r.cwnd+n, r.ssthresh, r.maxInflight)
		return
	}
	r.cwndAcc += n
	for r.cwndAcc >= r.cwnd && r.cwnd < r.maxInflight {
		r.cwndAcc -= r.cwnd
		r.cwnd++
	}
}

// onLoss shrinks the window: halved for a NAKed gap, to the minimum for a
// timeout, which means the path lost a whole flight.
func (r *requester) onLoss(timeout bool) {
	r.ssthresh = max(r.cwnd/2, minCwnd)
	r.cwnd = r.ssthresh
	if timeout {
		r.cwnd = minCwnd
	}
	r.cwndAcc = 0
}

// ackReqEvery bounds the packets of a long message sent without asking for
// an acknowledgement, so the requester frees its window before it stalls.
const ackReqEvery = 32

// sendWQE is a send work request in its queue slot.
type sendWQE struct {
	wr     verbs.SendWR // wr.SGL points at sgl
	sgl    [verbs.MaxSGE]mr.SGE
	length uint32
	// PSNs are assigned when the request is first transmitted.
	started bool
	first   psn.PSN
	npkts   uint32
	// placed counts the response packets of a read (or the one of an
	// atomic) placed, in order from first.
	placed uint32
	// askAgain is set while a repeated request for the missing part of
	// the response waits to be sent; repeated is set when one went out,
	// and cleared when a response is placed; askMark is nextPSN when it
	// went out: a response to a PSN from askMark on shows that the
	// responder has served the repeat.
	askAgain bool
	repeated bool
	askMark  psn.PSN
	// err, when set, is the status the request completes with when the
	// queue pair flushes.
	err verbs.Status
}

func (w *sendWQE) last() psn.PSN { return w.first.Add(w.npkts - 1) }

func (w *sendWQE) contains(p psn.PSN) bool { return p.InWindow(w.first, w.npkts) }

// requester is the send side of a queue pair: the send queue, PSN
// assignment, segmentation and retransmission.
type requester struct {
	sq   []sendWQE
	mask uint32
	// head is the oldest uncompleted request, cur the one being
	// transmitted, tail the next free slot: head <= cur <= tail.
	head, cur, tail uint32
	// sendPSN is the PSN of the next packet to transmit (within sq[cur]);
	// nextPSN is one past the highest PSN ever assigned; compPSN is the
	// oldest PSN not yet acknowledged.
	sendPSN, nextPSN, compPSN psn.PSN
	maxInflight               uint32
	// cwnd bounds the packets in flight below maxInflight: a congestion
	// window, AIMD in packets. A software path has no lossless fabric
	// underneath, and go-back-N turns every overflowed queue into a
	// retransmitted window, so the requester backs off on loss signals
	// (a sequence NAK, a timeout) and probes upward as ACKs arrive.
	cwnd, ssthresh uint32
	cwndAcc        uint32  // acknowledged packets towards the next +1
	lastComp       psn.PSN // compPSN when the window last grew
	// Tail-loss probe: with packets outstanding and no acknowledgement
	// for a couple of round trips, resend the last packet sent, asking
	// for an ACK, so that a lost tail is NAKed in microseconds instead
	// of waiting out the retransmit timeout (tens of milliseconds on a
	// path that never needed them); up to maxProbes in a row, each after
	// twice the wait of the one before. srtt and rttvar are the smoothed
	// round trip and its variation, measured Karn-style on one AckReq
	// packet at a time.
	probe    int64
	probes   int
	forceAck bool
	srtt     int64
	rttvar   int64
	rttPSN   psn.PSN
	rttSent  int64
	rttOn    bool
	// ackedTo is one past the highest PSN the responder has acknowledged,
	// explicitly or by answering a later request; compPSN lags behind it
	// while a response before it is missing.
	ackedTo psn.PSN
	// respFront is the highest PSN a response has named.
	respFront psn.PSN
	// asks counts the requests with askAgain set.
	asks int
	// exp is the announcement of a read's responses (expectRead).
	exp link.Expectation
	// rdAtomic counts reads and atomics started and not completed.
	rdAtomic int
	// retries and rnrRetries are what is left of the retry counters; they
	// are reloaded from the attributes whenever an acknowledgement makes
	// progress.
	retries, rnrRetries uint8
	// late counts the timeouts in a row noticed late, which spent no
	// retry (see retry).
	late uint8
	// timer is when the retransmit timer fires (0: not running); rnrUntil
	// is the end of an RNR wait (0: none).
	timer, rnrUntil int64
	// retrying is set when the requester went back to compPSN and cleared
	// on progress, so a burst of NAKs or implied NAKs restarts once.
	retrying bool
	// highSent is one past the highest PSN ever transmitted: a packet
	// before it is a retransmission.
	highSent    psn.PSN
	sinceAckReq int
}

func (r *requester) init(depth, maxInflight int) {
	n := 1
	for n < depth {
		n <<= 1
	}
	*r = requester{sq: make([]sendWQE, n), mask: uint32(n - 1), maxInflight: uint32(maxInflight)}
	r.cwnd = min(initialCwnd, r.maxInflight)
	r.ssthresh = r.maxInflight
}

func (r *requester) setPSN(p psn.PSN) {
	r.sendPSN, r.nextPSN, r.compPSN, r.highSent, r.lastComp, r.ackedTo = p, p, p, p, p, p
	r.respFront = p.Sub(1)
}

func (r *requester) post(q *QP, wr *verbs.SendWR) error {
	if len(wr.SGL) > verbs.MaxSGE {
		return verbs.ErrTooManySGE
	}
	if r.tail-r.head >= uint32(len(r.sq)) {
		return verbs.ErrQueueFull
	}
	w := &r.sq[r.tail&r.mask]
	*w = sendWQE{wr: *wr}
	n := copy(w.sgl[:], wr.SGL)
	w.wr.SGL = w.sgl[:n]
	w.wr.Dest = nil
	w.length = uint32(mr.SGLLen(w.wr.SGL))
	if err := checkLocal(q, w); err != nil {
		return err
	}
	r.tail++
	if q.attr.State == verbs.StateErr {
		r.complete(q, w, verbs.WRFlushErr)
		r.head++
		r.cur = r.head
	}
	return nil
}

// outstanding reports whether any packet waits for an acknowledgement.
func (r *requester) outstanding() bool { return r.compPSN != r.nextPSN }

func (r *requester) deadline() int64 {
	if r.rnrUntil != 0 {
		return r.rnrUntil
	}
	if r.probe != 0 && (r.timer == 0 || r.probe < r.timer) {
		return r.probe
	}
	return r.timer
}

// canSend reports whether transmit would produce a request now.
func (r *requester) canSend(q *QP) bool {
	if r.cur == r.tail || r.rnrUntil != 0 {
		return false
	}
	if uint32(r.sendPSN.Diff(r.compPSN)) >= r.cwnd {
		return false
	}
	w := &r.sq[r.cur&r.mask]
	if w.started {
		return true
	}
	if w.wr.Flags&verbs.Fence != 0 && r.rdAtomic > 0 {
		return false
	}
	if w.wr.Op.NeedsResponse() && r.rdAtomic >= maxRdAtomic(q) {
		return false
	}
	return true
}

func maxRdAtomic(q *QP) int {
	if q.attr.MaxRdAtomic == 0 {
		return 1
	}
	return int(q.attr.MaxRdAtomic)
}

// transmit handles timers, then sends request packets while the window,
// the ordering rules and b allow.
func (r *requester) transmit(q *QP, now int64, b *link.Batch) {
	if r.rnrUntil != 0 {
		if now < r.rnrUntil {
			return
		}
		r.rnrUntil = 0
		r.armTimer(q, now)
	}
	if r.timer != 0 && now >= r.timer {
		q.stats.Timeouts++
		if !r.retry(q, now, q.timeout > 0 && now-r.timer > q.timeout) {
			return
		}
	}
	if r.asks > 0 {
		r.sendAsks(q, now, b)
	}
	if r.probe != 0 && now >= r.probe && b.Room() > 0 {
		r.probe = 0
		r.sendProbe(q, now, b)
	}
	if q.attr.State == verbs.StateSQD {
		// Drained: finish what was started, start nothing new.
		if r.cur == r.tail || !r.sq[r.cur&r.mask].started {
			return
		}
	}
	for b.Room() > 0 && r.canSend(q) {
		w := &r.sq[r.cur&r.mask]
		if !w.started {
			r.start(q, w)
		}
		if !r.sendPacket(q, w, b, now) {
			return
		}
		if r.timer == 0 {
			r.armTimer(q, now)
		}
	}
}

// start assigns a request its PSNs.
func (r *requester) start(q *QP, w *sendWQE) {
	w.started = true
	w.first = r.sendPSN
	switch {
	case w.wr.Op == verbs.OpRead:
		w.npkts = max(1, (w.length+uint32(q.mtu)-1)/uint32(q.mtu))
		r.rdAtomic++
	case w.wr.Op.IsAtomic():
		w.npkts = 1
		r.rdAtomic++
	default:
		w.npkts = max(1, (w.length+uint32(q.mtu)-1)/uint32(q.mtu))
	}
	r.nextPSN = w.first.Add(w.npkts)
}

// sendPacket builds the packet of w at sendPSN, advancing the cursor. It
// reports false when the packet could not be built.
func (r *requester) sendPacket(q *QP, w *sendWQE, b *link.Batch, now int64) bool {
	if w.wr.Op.NeedsResponse() && w.placed == w.npkts {
		// Answered whole already: a go-back passes over it.
		r.advance(w.last().Next())
		return true
	}
	k := uint32(r.sendPSN.Diff(w.first))
	off := k * uint32(q.mtu)
	retransmit := r.sendPSN.Before(r.highSent)
	if retransmit {
		q.stats.Retransmits++
		r.rttOn = false // Karn: no RTT sample across a retransmission
	} else if !r.rttOn {
		r.rttOn, r.rttPSN, r.rttSent = true, r.sendPSN, now
	}
	solicited := w.wr.Flags&verbs.Solicited != 0
	switch op := w.wr.Op; {
	case op == verbs.OpRead:
		// Never ask for less than what is missing, nor from before what
		// was placed: a responder may take the address of a repeated
		// read request as the lowest it will serve again (Linux rxe does).
		from := r.sendPSN
		if p := w.first.Add(w.placed); p.After(from) {
			from = p
		}
		off = uint32(from.Diff(w.first)) * uint32(q.mtu)
		if b.Expects() && b.Room() > 0 {
			r.expectRead(q, w, from, off, b)
		}
		f, h := q.frame(b, wire.RCReadRequest, 0)
		if f == nil {
			return false
		}
		q.bth(f, h, wire.RCReadRequest, from, 0, true, false)
		info := wire.RCReadRequest.Info()
		wire.RETH(f[h+info.RETH:]).Encode(w.wr.RemoteAddr+uint64(off), w.wr.RKey, w.length-off)
		q.send(b, f)
		if retransmit {
			r.asked(w)
		}
		r.advance(w.last().Next())
	case op.IsAtomic():
		opc := wire.RCFetchAdd
		swapAdd, cmp := w.wr.CompareAdd, uint64(0)
		if op == verbs.OpCmpSwap {
			opc, swapAdd, cmp = wire.RCCompareSwap, w.wr.Swap, w.wr.CompareAdd
		}
		f, h := q.frame(b, opc, 0)
		if f == nil {
			return false
		}
		q.bth(f, h, opc, r.sendPSN, 0, true, false)
		wire.AtomicETH(f[h+opc.Info().AtomicETH:]).Encode(w.wr.RemoteAddr, w.wr.RKey, swapAdd, cmp)
		q.send(b, f)
		if retransmit {
			r.asked(w)
		}
		r.advance(r.sendPSN.Next())
	default:
		n := min(w.length-off, uint32(q.mtu))
		lastPkt := k == w.npkts-1
		opc := segmentOpcode(op, k == 0, lastPkt)
		f, h := q.frame(b, opc, int(n))
		if f == nil {
			return false
		}
		info := opc.Info()
		ackReq := r.wantAck(w, lastPkt)
		q.bth(f, h, opc, r.sendPSN, int(n), ackReq, solicited && lastPkt)
		if info.RETH != 0 {
			wire.RETH(f[h+info.RETH:]).Encode(w.wr.RemoteAddr, w.wr.RKey, w.length)
		}
		if info.ImmDt != 0 {
			wire.ImmDt(f[h+info.ImmDt:]).Encode(w.wr.Imm)
		}
		if info.IETH != 0 {
			wire.IETH(f[h+info.IETH:]).Encode(w.wr.Imm)
		}
		p := h + info.HeaderLen
		if buf, ok := r.source(q, b, w, off, n); ok {
			// One buffer, its payload taken where it lies if the link
			// gathers it.
			q.sendPayload(b, f, p, buf)
		} else {
			if n > 0 {
				if _, err := q.mrs.Gather(f[p:p+int(n)], w.wr.SGL, int(off)); err != nil {
					// The send buffer went away under the request: a local
					// protection error, fatal to the queue pair as in verbs.
					r.fail(q, w, verbs.LocProtErr)
					return false
				}
			}
			q.send(b, f)
		}
		if ackReq {
			r.sinceAckReq = 0
		} else {
			r.sinceAckReq++
		}
		r.advance(r.sendPSN.Next())
	}
	return true
}

// source is the n bytes at off of w's one-buffer scatter/gather list, when
// b's link gathers payloads and the list is one buffer; else the caller
// gathers the payload itself.
func (r *requester) source(q *QP, b *link.Batch, w *sendWQE, off, n uint32) ([]byte, bool) {
	if n == 0 || !b.Gathers() || len(w.wr.SGL) != 1 {
		return nil, false
	}
	s := &w.wr.SGL[0]
	buf, err := q.mrs.Local(s.LKey, s.Addr, s.Length, 0)
	if err != nil || uint64(off)+uint64(n) > uint64(len(buf)) {
		return nil, false
	}
	return buf[off : off+n : off+n], true
}

// wantAck decides whether a send or write packet asks for an ACK. Asking
// on every message would cost the responder a packet (and a transmit
// kick) per message, so, as RDMA NICs do, the requester asks only where it
// needs one: at the end of a signalled request (its completion waits for
// it), when the send queue runs dry or the congestion window fills (the
// ACK is what frees them), and at least every ackReqEvery packets.
func (r *requester) wantAck(w *sendWQE, lastPkt bool) bool {
	if r.sinceAckReq >= ackReqEvery || r.forceAck {
		return true
	}
	if uint32(r.sendPSN.Next().Diff(r.compPSN)) >= r.cwnd {
		return true
	}
	if !lastPkt {
		return false
	}
	return w.wr.Flags&verbs.Signaled != 0 || r.cur+1 == r.tail || w.err != verbs.Success
}

// advance moves the send cursor to p, onto the next request when the
// current one has been sent whole.
func (r *requester) advance(p psn.PSN) {
	r.sendPSN = p
	if r.sendPSN.After(r.highSent) {
		r.highSent = r.sendPSN
	}
	w := &r.sq[r.cur&r.mask]
	if !p.InWindow(w.first, w.npkts) {
		r.cur++
	}
}

// segmentOpcode picks the opcode of one packet of a send or write.
func segmentOpcode(op verbs.Opcode, first, last bool) wire.Opcode {
	type row struct{ only, first, middle, last wire.Opcode }
	var t row
	switch op {
	case verbs.OpSend:
		t = row{wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast}
	case verbs.OpSendImm:
		t = row{wire.RCSendOnlyImm, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastImm}
	case verbs.OpSendInv:
		t = row{wire.RCSendOnlyInv, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastInv}
	case verbs.OpWrite:
		t = row{wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast}
	default: // OpWriteImm
		t = row{wire.RCWriteOnlyImm, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLastImm}
	}
	switch {
	case first && last:
		return t.only
	case first:
		return t.first
	case last:
		return t.last
	}
	return t.middle
}

func (r *requester) armTimer(q *QP, now int64) {
	r.timer, r.probe = 0, 0
	if q.timeout != 0 && r.outstanding() {
		r.timer = now + q.timeout
	}
	r.armProbe(now)
}

// armProbe sets the probe timer for the next probe, if one is due.
func (r *requester) armProbe(now int64) {
	r.probe = 0
	if !r.outstanding() || r.srtt == 0 || r.probes >= maxProbes {
		return
	}
	r.probe = now + r.pto()<<r.probes
	if r.timer != 0 && r.probe >= r.timer {
		r.probe = 0
	}
}

// pto is the probe timeout: two round trips, or one plus four times its
// variation where the path is that jittery, plus minProbeSlack for the
// peer's scheduling, and never below minProbe.
func (r *requester) pto() int64 {
	return max(max(2*r.srtt, r.srtt+4*r.rttvar)+minProbeSlack, minProbe)
}

// Tail-loss probe timing, in ns: the probe timeout is never below
// minProbe, and allows minProbeSlack beyond the round trips. At most
// maxProbes probes go out in a row without progress; then the
// retransmit timer decides.
const (
	minProbe      = 200_000
	minProbeSlack = 50_000
	maxProbes     = 3
)

// expectRead tells a link that places payloads where the responses to
// the read request for w from PSN from (byte off of w) go, when that is
// one buffer.
func (r *requester) expectRead(q *QP, w *sendWQE, from psn.PSN, off uint32, b *link.Batch) {
	buf, ok := q.singleBuffer(w.wr.SGL)
	if !ok || off >= uint32(len(buf)) {
		return // elsewhere, or not to land at all: as without the link's help
	}
	q.expect(b, &r.exp, from, buf[off:], true)
}

// askAgain schedules a repeated request for what is missing from w's
// response. Once asked, w is not asked again for the same missing packet
// (only a probe may) until the responder has shown that it got past the
// repeated request, by answering a request sent after it: the responder
// serves requests in order, so until then the rest of w's old response,
// and then its repeat, may still be on the way.
func (r *requester) askAgain(w *sendWQE) {
	if w.askAgain {
		return
	}
	if w.repeated && r.respFront.Before(w.askMark) {
		return
	}
	w.askAgain = true
	r.asks++
}

// asked notes that a request for w's missing response went out.
func (r *requester) asked(w *sendWQE) {
	w.repeated, w.askMark = true, r.nextPSN
	if w.askAgain {
		w.askAgain = false
		r.asks--
	}
}

// sendAsks sends the repeated requests askAgain scheduled: each read asks
// for its response from the first packet not placed, each atomic is sent
// again (the responder replays its result).
func (r *requester) sendAsks(q *QP, now int64, b *link.Batch) {
	for i := r.head; i != r.cur && r.asks > 0 && b.Room() > 0; i++ {
		w := &r.sq[i&r.mask]
		if !w.askAgain {
			continue
		}
		if !r.resend(q, i, w.first.Add(w.placed), now, b) {
			return
		}
		q.stats.AskedAgain++
	}
	if r.asks > 0 && r.cur != r.tail {
		// Requests past the cursor are sent (again) by the go-back.
		for i := r.cur; i != r.tail; i++ {
			if w := &r.sq[i&r.mask]; w.askAgain {
				w.askAgain = false
				r.asks--
			}
		}
	}
}

// resend sends the packet at PSN p of the request in slot i out of turn,
// leaving the send cursor where it was. It reports false when the packet
// could not be built.
func (r *requester) resend(q *QP, i uint32, p psn.PSN, now int64, b *link.Batch) bool {
	cur, sendPSN := r.cur, r.sendPSN
	r.cur, r.sendPSN = i, p
	r.forceAck = true
	ok := r.sendPacket(q, &r.sq[i&r.mask], b, now)
	r.forceAck = false
	r.cur, r.sendPSN = cur, sendPSN
	return ok
}

// sendProbe resends one packet with AckReq to make the responder speak. The
// first probe after a flight went out whole resends its last packet: the
// responder answers with an ACK if everything arrived, or with a sequence
// NAK naming the first missing PSN, so a lost tail costs a round trip.
// Later probes, and any probe in the middle of a go-back, resend the
// oldest unacknowledged packet instead: a responder NAKs a gap only once
// (IBTA; rxe too) and stays silent about it until the missing packet
// arrives, so when that NAK or the go-back's first packet was lost, only
// the missing packet itself gets the conversation going again. A probe
// that lands on a read or an atomic asks for the oldest response still
// missing.
func (r *requester) sendProbe(q *QP, now int64, b *link.Batch) {
	if !r.outstanding() || b.Room() == 0 {
		return
	}
	p := r.compPSN
	if r.probes == 0 && r.sendPSN == r.highSent {
		p = r.highSent.Sub(1)
	}
	i, w := r.slotOf(p)
	if w != nil && w.wr.Op.NeedsResponse() {
		if j, wj := r.oldestUnanswered(); wj != nil {
			i, p = j, wj.first.Add(wj.placed)
		} else {
			// Every response is in: what is missing is the ACK of a
			// send or write before the last request.
			p = r.compPSN
			i, w = r.slotOf(p)
		}
	}
	if w == nil || !r.resend(q, i, p, now, b) {
		return
	}
	r.probes++
	q.stats.Probes++
	r.armProbe(now)
}

// oldestUnanswered returns the oldest started read or atomic whose response
// is not all placed.
func (r *requester) oldestUnanswered() (uint32, *sendWQE) {
	for i := r.head; i != r.tail; i++ {
		w := &r.sq[i&r.mask]
		if !w.started {
			break
		}
		if w.wr.Op.NeedsResponse() && w.placed < w.npkts {
			return i, w
		}
	}
	return 0, nil
}

// maxLateTimeouts bounds the late timeouts in a row that spend no retry.
const maxLateTimeouts = 16

// retry handles a retransmit timeout: go back to the oldest unacknowledged
// PSN, or fail the request when the retry counter is spent. It reports
// whether the queue pair is still usable.
//
// A timeout noticed late, more than a whole timeout after it was due,
// tells of this end's scheduling (its worker did not run: a starved core,
// a stopped process) more than of the network: what the peer sent meanwhile
// may still wait behind it. It goes back and retransmits all the same, but
// spends no retry, up to maxLateTimeouts in a row: shared cores do not
// turn into retry-exceeded errors while nothing was lost, and a dead peer
// is still found, late.
func (r *requester) retry(q *QP, now int64, late bool) bool {
	if !r.outstanding() {
		r.timer = 0
		return true
	}
	switch {
	case late && r.late < maxLateTimeouts:
		r.late++
		q.stats.LateTimeouts++
	case r.retries == 0:
		r.fail(q, &r.sq[r.head&r.mask], verbs.RetryExcErr)
		return false
	default:
		r.retries--
	}
	r.onLoss(true)
	r.probes = 0 // a new flight: its tail may be probed again
	r.rewind(r.compPSN)
	r.armTimer(q, now)
	return true
}

// rewind moves the send cursor back to p, which lies within a started
// request: go-back-N.
func (r *requester) rewind(p psn.PSN) {
	r.retrying = true
	for i := r.head; i != r.tail; i++ {
		w := &r.sq[i&r.mask]
		if !w.started {
			break
		}
		if w.contains(p) {
			r.cur = i
			r.sendPSN = p
			return
		}
	}
	// p is past every started request: resume with the first unstarted.
	r.sendPSN = p
	for r.cur = r.head; r.cur != r.tail && r.sq[r.cur&r.mask].started; r.cur++ {
	}
}

// complete reports w on the send CQ when it failed or asked to be signalled.
func (r *requester) complete(q *QP, w *sendWQE, st verbs.Status) {
	if st == verbs.Success && w.wr.Flags&verbs.Signaled == 0 {
		return
	}
	c := verbs.Completion{
		WRID:   w.wr.ID,
		Status: st,
		Opcode: verbs.SendCompOpcode(w.wr.Op),
		QPN:    q.qpn,
	}
	if st == verbs.Success {
		c.ByteLen = w.length
	}
	q.sendCQ.Push(&c)
}

// fail marks w failed with st and moves the queue pair to the error state:
// w completes with st, in order, and everything else with a flush error.
func (r *requester) fail(q *QP, w *sendWQE, st verbs.Status) {
	w.err = st
	q.toError()
}

// flush completes every outstanding request with a flush error, or with the
// error that failed it.
func (r *requester) flush(q *QP) {
	for ; r.head != r.tail; r.head++ {
		w := &r.sq[r.head&r.mask]
		st := verbs.WRFlushErr
		if w.err != verbs.Success {
			st = w.err
		}
		r.complete(q, w, st)
	}
	r.cur = r.head
	r.timer, r.rnrUntil = 0, 0
	r.rdAtomic = 0
}

// putAtomicResult stores the original value an atomic returned into the
// request's local buffer, in host byte order as verbs does.
func putAtomicResult(q *QP, w *sendWQE, v uint64) error {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	_, err := q.mrs.Scatter(w.wr.SGL, 0, b[:min(8, int(w.length))])
	return err
}

// checkLocal validates a request's local buffers when it is posted, as a
// NIC would on its first DMA: an unusable lkey fails the post.
func checkLocal(q *QP, w *sendWQE) error {
	var need mr.Access
	if w.wr.Op.NeedsResponse() {
		need = mr.LocalWrite
	}
	if w.wr.Op.IsAtomic() && w.length != 8 {
		return fmt.Errorf("rc: post send: %v needs an 8-byte local buffer, not %d", w.wr.Op, w.length)
	}
	for _, s := range w.wr.SGL {
		if _, err := q.mrs.Local(s.LKey, s.Addr, s.Length, need); err != nil {
			return fmt.Errorf("rc: post send: local buffer: %w", err)
		}
	}
	return nil
}
