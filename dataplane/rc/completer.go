package rc

import (
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// receive handles a response packet: an ACK or NAK, a read response or an
// atomic acknowledge.
func (r *requester) receive(q *QP, p *wire.Packet, now int64) {
	ps := psn.PSN(p.BTH().PSN())
	if r.valid(ps) && ps.After(r.respFront) {
		r.respFront = ps
	}
	m := p.Info.Mask
	if m&wire.MaskAETH != 0 {
		syn := p.AETH().Syndrome()
		switch wire.SyndromeKind(syn) {
		case wire.AckKindRNR:
			q.stats.RNRNAKsRcvd++
			r.rnrNAK(q, ps, int64(wire.RNRTimer(wire.SyndromeValue(syn))), now)
			return
		case wire.AckKindNAK:
			r.nak(q, ps, wire.NAKCode(wire.SyndromeValue(syn)), now)
			return
		case wire.AckKindReserved:
			q.stats.Dropped++
			return
		}
	}
	switch {
	case m&wire.MaskReadResponse != 0:
		r.readResponse(q, p, ps, now)
	case m&wire.MaskAtomicAck != 0:
		r.atomicAck(q, p, ps, now)
	default:
		r.ack(q, ps, now)
	}
}

// valid reports whether ps acknowledges a PSN that was sent and is not yet
// acknowledged.
func (r *requester) valid(ps psn.PSN) bool {
	return ps.InWindow(r.compPSN, uint32(r.nextPSN.Diff(r.compPSN)))
}

// ack handles an acknowledgement of every PSN up to and including ps.
func (r *requester) ack(q *QP, ps psn.PSN, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		return
	}
	r.ackUpTo(q, ps.Next(), now)
}

// ackUpTo records that the responder has acknowledged, explicitly or by
// implication, every PSN before end, and completes what that finishes.
func (r *requester) ackUpTo(q *QP, end psn.PSN, now int64) {
	if end.After(r.ackedTo) && !end.After(r.nextPSN) {
		r.ackedTo = end
	}
	moved := r.walk(q, now)
	r.progress(q, moved, moved, now)
}

// walk retires the requests at the head that are done and moves compPSN:
// sends and writes wholly before ackedTo, reads and atomics whose
// responses were placed whole. A read or atomic before ackedTo whose
// response is not whole stops the walk: the responder executed it, so
// (part of) its response was lost, and the requester asks for that part
// again (an implied NAK), for that request alone. It reports whether
// compPSN moved.
func (r *requester) walk(q *QP, now int64) bool {
	end := r.ackedTo
	moved := false
	for r.head != r.tail {
		w := &r.sq[r.head&r.mask]
		if !w.started {
			break
		}
		if w.wr.Op.NeedsResponse() {
			if w.placed == w.npkts {
				r.compPSN = w.last().Next()
				moved = true
				r.retire(q, w)
				continue
			}
			if w.first.Before(end) {
				r.askAgainBefore(r.head, end, now)
			}
			return moved
		}
		if !w.first.Before(end) {
			break
		}
		if !w.last().Before(end) {
			// Part of a multi-packet message is acknowledged.
			break
		}
		r.compPSN = w.last().Next()
		moved = true
		r.retire(q, w)
	}
	if end.After(r.compPSN) {
		r.compPSN = end
		moved = true
	}
	return moved
}

// askAgainBefore asks again for the missing responses of the reads and
// atomics from slot i on that lie wholly before end: the responder, which
// answers in order, has answered them already.
func (r *requester) askAgainBefore(i uint32, end psn.PSN, now int64) {
	for ; i != r.tail; i++ {
		w := &r.sq[i&r.mask]
		if !w.started || !w.last().Before(end) {
			return
		}
		if w.wr.Op.NeedsResponse() && w.placed < w.npkts {
			r.askAgain(w)
		}
	}
}

// retire completes the request at the head successfully.
func (r *requester) retire(q *QP, w *sendWQE) {
	if w.wr.Op.NeedsResponse() {
		r.rdAtomic--
	}
	r.complete(q, w, verbs.Success)
	r.head++
	if r.cur-r.head > r.tail-r.head { // cur was the request retired
		r.cur = r.head
	}
}

// progress restarts the timers and reloads the retry counters after a
// response that showed the responder alive (a response placed anywhere),
// and does the bookkeeping of an acknowledgement that moved compPSN.
func (r *requester) progress(q *QP, alive, moved bool, now int64) {
	if !alive {
		return
	}
	if moved {
		if d := r.compPSN.Diff(r.lastComp); d > 0 {
			r.onAcked(uint32(d))
		}
		r.lastComp = r.compPSN
		if r.rttOn && r.rttPSN.Before(r.compPSN) {
			r.sampleRTT(max(now-r.rttSent, 1)) // 0 means "no estimate yet"
			r.rttOn = false
		}
		r.retrying = false
		if r.sendPSN.Before(r.compPSN) {
			// Acknowledged beyond the cursor of a go-back: skip what the
			// responder already has.
			r.rewind(r.compPSN)
			r.retrying = false
		}
	}
	r.probes = 0
	r.retries, r.late = q.attr.RetryCnt, 0
	r.rnrRetries = q.attr.RNRRetry
	r.armTimer(q, now)
}

// sampleRTT folds a round-trip sample into srtt and rttvar (RFC 6298's
// gains, in nanoseconds).
func (r *requester) sampleRTT(sample int64) {
	if r.srtt == 0 {
		r.srtt, r.rttvar = sample, sample/2
		return
	}
	e := sample - r.srtt
	r.srtt += e / 8
	if e < 0 {
		e = -e
	}
	r.rttvar += (e - r.rttvar) / 4
}

// slotOf returns the started request that ps belongs to, and its slot.
func (r *requester) slotOf(ps psn.PSN) (uint32, *sendWQE) {
	for i := r.head; i != r.tail; i++ {
		w := &r.sq[i&r.mask]
		if !w.started {
			break
		}
		if w.contains(ps) {
			return i, w
		}
	}
	return 0, nil
}

// readResponse places one read response packet. Each read places its own
// response in order, independently of the reads before it: a packet lost
// from one read's response costs a repeated request for the rest of that
// read alone, while the responses of later reads, which the responder
// sends meanwhile, are placed as they arrive instead of being thrown away
// and asked for again. Completions stay in order.
func (r *requester) readResponse(q *QP, p *wire.Packet, ps psn.PSN, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		r.stillSending(q, now)
		return
	}
	_, w := r.slotOf(ps)
	if w == nil || w.wr.Op != verbs.OpRead {
		q.stats.Dropped++
		return
	}
	// The responder executed everything before this read.
	r.impliedBy(q, w, now)
	next := w.first.Add(w.placed)
	if ps != next {
		q.stats.DupResponses++
		if ps.After(next) {
			// A response is missing before this one, within this read.
			r.askAgain(w)
		}
		r.stillSending(q, now)
		return
	}
	k := w.placed
	off := k * uint32(q.mtu)
	want := min(uint32(q.mtu), w.length-off)
	last := ps == w.last()
	m := p.Info.Mask
	// A response that ends the message must come last; one that does not
	// must be full. Anything else is a protocol violation by the peer.
	if uint32(len(p.Payload)) != want || last != (m&wire.MaskLast != 0) {
		r.fail(q, w, verbs.BadRespErr)
		return
	}
	if want > 0 {
		if _, err := q.mrs.Scatter(w.wr.SGL, int(off), p.Payload); err != nil {
			r.fail(q, w, verbs.LocProtErr)
			return
		}
	}
	w.placed++
	w.repeated = false // a gap after this is a new loss, not the rest of an old one
	r.answered(q, w, now)
}

// impliedBy acknowledges everything before w, on a response to w: the
// responder executed the requests in order. At the head there is nothing
// before w to complete.
func (r *requester) impliedBy(q *QP, w *sendWQE, now int64) {
	if !w.first.After(r.ackedTo) {
		return
	}
	if w == &r.sq[r.head&r.mask] {
		r.ackedTo = w.first
		return
	}
	r.ackUpTo(q, w.first, now)
}

// stillSending restarts the timers on a read response that places nothing
// (a stale or repeated one): the responder is still streaming an earlier
// response, and a repeated request now would only queue behind it, to be
// answered with one more copy of the whole rest of the read. The probe
// and the retransmit timer run from when the stream goes quiet; the
// probe count is not reset, so probes stay bounded.
func (r *requester) stillSending(q *QP, now int64) {
	if r.outstanding() && r.rnrUntil == 0 {
		r.armTimer(q, now)
	}
}

// answered moves compPSN after a response placed into w, when w is the
// oldest request: past what w has placed, and once w is whole, past every
// later request already answered or acknowledged.
func (r *requester) answered(q *QP, w *sendWQE, now int64) {
	moved := false
	if w == &r.sq[r.head&r.mask] {
		r.compPSN = w.first.Add(w.placed)
		moved = true
		if w.placed == w.npkts {
			r.walk(q, now)
		}
	}
	r.progress(q, true, moved, now)
}

// atomicAck completes an atomic with the original value the responder read.
func (r *requester) atomicAck(q *QP, p *wire.Packet, ps psn.PSN, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		return
	}
	_, w := r.slotOf(ps)
	if w == nil || !w.wr.Op.IsAtomic() {
		q.stats.Dropped++
		return
	}
	r.impliedBy(q, w, now)
	if w.placed != 0 {
		q.stats.DupResponses++
		return
	}
	if err := putAtomicResult(q, w, p.AtomicAckETH().OrigData()); err != nil {
		r.fail(q, w, verbs.LocProtErr)
		return
	}
	w.placed = 1
	r.answered(q, w, now)
}

// nak handles a NAK for ps: a sequence error goes back to ps, any other
// code fails the request that ps belongs to.
func (r *requester) nak(q *QP, ps psn.PSN, code wire.NAKCode, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		return
	}
	if code == wire.NAKPSNSeqErr {
		q.stats.SeqNAKsRcvd++
	} else {
		q.stats.ErrNAKsRcvd++
	}
	before := r.compPSN
	r.ackUpTo(q, ps, now)
	if code != wire.NAKPSNSeqErr {
		// The responder has gone to the error state: the request fails
		// with the NAK's status, any earlier one still waiting for its
		// response with a flush error.
		st := verbs.RemOpErr
		switch code {
		case wire.NAKInvalidRequest:
			st = verbs.RemInvReqErr
		case wire.NAKRemoteAccessErr:
			st = verbs.RemAccessErr
		case wire.NAKInvalidRDRequest:
			st = verbs.RemInvRDReqErr
		}
		if _, w := r.slotOf(ps); w != nil {
			r.fail(q, w, st)
		}
		return
	}
	if !r.retrying {
		r.onLoss(false)
	}
	if before == ps {
		// No progress: this is a retry like a timeout is, and costs one.
		if r.retrying {
			return
		}
		if r.retries == 0 {
			r.fail(q, &r.sq[r.head&r.mask], verbs.RetryExcErr)
			return
		}
		r.retries--
	}
	r.rewind(ps)
	r.armTimer(q, now)
}

// rnrNAK handles receiver-not-ready for ps: wait, then resend from ps.
func (r *requester) rnrNAK(q *QP, ps psn.PSN, wait int64, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		return
	}
	r.ackUpTo(q, ps, now)
	if r.rnrRetries == 0 {
		_, w := r.slotOf(ps)
		if w == nil {
			w = &r.sq[r.head&r.mask]
		}
		r.fail(q, w, verbs.RNRRetryExcErr)
		return
	}
	if r.rnrRetries != 7 { // 7 retries forever
		r.rnrRetries--
	}
	// The responder has no receive buffer: whatever follows ps is
	// dropped there too. Resend from ps with the smallest window and
	// grow again, instead of repeating the whole flight at every RNR NAK
	// (a flood into a slow receiver became a retransmission storm that
	// starved the receiver: 418,000 retransmits for 750 messages).
	r.onLoss(true)
	r.rewind(ps)
	r.timer = 0
	r.rnrUntil = now + wait
	if r.rnrUntil == 0 {
		r.rnrUntil = 1
	}
}
