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

// ackUpTo completes the requests whose every PSN lies before end, which the
// responder has acknowledged explicitly or by implication, and moves
// compPSN. A read or atomic in that range whose response is missing
// stops the walk: the responder executed it, so its response was lost, and
// the requester goes back to ask again (an implied NAK).
func (r *requester) ackUpTo(q *QP, end psn.PSN, now int64) {
	progress := false
	for r.head != r.tail {
		w := &r.sq[r.head&r.mask]
		if !w.started || !w.first.Before(end) {
			break
		}
		if w.wr.Op.NeedsResponse() {
			r.progress(q, progress, now)
			r.impliedNAK(q, now)
			return
		}
		if !w.last().Before(end) {
			// Part of a multi-packet message is acknowledged.
			if end.After(r.compPSN) {
				r.compPSN = end
				progress = true
			}
			break
		}
		r.compPSN = w.last().Next()
		progress = true
		r.retire(q, w)
	}
	if end.After(r.compPSN) && !end.After(r.nextPSN) {
		r.compPSN = end
		progress = true
	}
	r.progress(q, progress, now)
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

// progress restarts the timers and reloads the retry counters after an
// acknowledgement that moved compPSN.
func (r *requester) progress(q *QP, moved bool, now int64) {
	if !moved {
		return
	}
	if d := r.compPSN.Diff(r.lastComp); d > 0 {
		r.onAcked(uint32(d))
	}
	r.lastComp = r.compPSN
	if r.rttOn && r.rttPSN.Before(r.compPSN) {
		sample := max(now-r.rttSent, 1) // 0 means "no estimate yet"
		if r.srtt == 0 {
			r.srtt = sample
		} else {
			r.srtt += (sample - r.srtt) / 8
		}
		r.rttOn = false
	}
	r.probed = false
	r.retrying = false
	r.retries = q.attr.RetryCnt
	r.rnrRetries = q.attr.RNRRetry
	if r.sendPSN.Before(r.compPSN) {
		// Acknowledged beyond the cursor of a go-back: skip what the
		// responder already has.
		r.rewind(r.compPSN)
		r.retrying = false
	}
	r.armTimer(q, now)
}

// impliedNAK goes back to compPSN at once, unless a go-back already
// started and nothing has been acknowledged since.
func (r *requester) impliedNAK(q *QP, now int64) {
	if r.retrying {
		return
	}
	r.rewind(r.compPSN)
	r.armTimer(q, now)
}

// readResponse places one read response packet.
func (r *requester) readResponse(q *QP, p *wire.Packet, ps psn.PSN, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		return
	}
	w, ok := r.responseWQE(q, ps, now)
	if !ok || w.wr.Op != verbs.OpRead {
		q.stats.Dropped++
		return
	}
	if ps != r.compPSN {
		// A response is missing before this one.
		q.stats.DupResponses++
		r.impliedNAK(q, now)
		return
	}
	k := uint32(ps.Diff(w.first))
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
	r.compPSN = ps.Next()
	if last {
		r.retire(q, w)
	}
	r.progress(q, true, now)
}

// atomicAck completes an atomic with the original value the responder read.
func (r *requester) atomicAck(q *QP, p *wire.Packet, ps psn.PSN, now int64) {
	if !r.valid(ps) {
		q.stats.DupResponses++
		return
	}
	w, ok := r.responseWQE(q, ps, now)
	if !ok || !w.wr.Op.IsAtomic() || ps != r.compPSN {
		q.stats.Dropped++
		return
	}
	if err := putAtomicResult(q, w, p.AtomicAckETH().OrigData()); err != nil {
		r.fail(q, w, verbs.LocProtErr)
		return
	}
	r.compPSN = ps.Next()
	r.retire(q, w)
	r.progress(q, true, now)
}

// responseWQE finds the request a response PSN belongs to, after completing
// the requests before it: a response acknowledges every earlier PSN.
func (r *requester) responseWQE(q *QP, ps psn.PSN, now int64) (*sendWQE, bool) {
	for i := r.head; i != r.tail; i++ {
		w := &r.sq[i&r.mask]
		if !w.started {
			return nil, false
		}
		if w.contains(ps) {
			if i != r.head {
				r.ackUpTo(q, w.first, now)
				if r.head != i {
					return nil, false // an earlier read or atomic is still missing
				}
			}
			return w, true
		}
	}
	return nil, false
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
	if r.compPSN != ps {
		return // a read or atomic before ps is being asked again
	}
	if code != wire.NAKPSNSeqErr {
		st := verbs.RemOpErr
		switch code {
		case wire.NAKInvalidRequest:
			st = verbs.RemInvReqErr
		case wire.NAKRemoteAccessErr:
			st = verbs.RemAccessErr
		case wire.NAKInvalidRDRequest:
			st = verbs.RemInvRDReqErr
		}
		r.fail(q, &r.sq[r.head&r.mask], st)
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
	if r.compPSN != ps {
		return
	}
	if r.rnrRetries == 0 {
		r.fail(q, &r.sq[r.head&r.mask], verbs.RNRRetryExcErr)
		return
	}
	if r.rnrRetries != 7 { // 7 retries forever
		r.rnrRetries--
	}
	r.rewind(ps)
	r.timer = 0
	r.rnrUntil = now + wait
	if r.rnrUntil == 0 {
		r.rnrUntil = 1
	}
}
