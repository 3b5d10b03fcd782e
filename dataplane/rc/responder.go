package rc

import (
	"errors"
	"sync/atomic"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// creditsInvalid is the AETH credit code for "no end-to-end flow control",
// which Linux rxe and most RoCE NICs send.
const creditsInvalid = 0x1f

// message kinds in progress at the responder.
const (
	inNone = iota
	inSend
	inWrite
)

// output kinds of the responder's queue, sent in PSN order.
const (
	outAck = iota
	outNAK
	outRead
	outAtomic
)

// respItem is one queued response: an ACK or NAK, the remaining packets of
// a read response, or an atomic acknowledge.
type respItem struct {
	kind     uint8
	syndrome uint8
	psn      psn.PSN // PSN of the next packet of this item
	msn      uint32
	// read response state
	buf         []byte
	off, length uint32
	started     bool
	// atomic result
	orig uint64
}

// resource remembers an executed read or atomic, so that a duplicate can be
// answered again: reads are re-executed, atomics replayed, never redone.
type resource struct {
	valid  bool
	atomic bool
	first  psn.PSN
	npkts  uint32
	orig   uint64
}

// responder is the receive side of a queue pair.
type responder struct {
	ePSN psn.PSN
	msn  uint32
	// nakSent is set once a NAK for the current gap went out: one NAK per
	// gap, until ePSN moves.
	nakSent bool

	// The message in progress (a multi-packet send or write).
	cur  int
	recv verbs.RecvSlot
	off  uint32
	wbuf []byte
	wlen uint32
	// expectFrom is the first PSN of the write or send in progress, whose
	// later packets the link may place (link.Expecter), told on the next
	// transmit; exp the announcement.
	expectFrom psn.PSN
	expecting  bool
	exp        link.Expectation

	out     []respItem
	outMask uint32
	outHead uint32
	outTail uint32
	res     []resource
	resNext int
}

func (s *responder) init() {
	*s = responder{}
	s.setResources(0)
}

// setResources sizes the replay cache for n outstanding reads and atomics.
func (s *responder) setResources(n int) {
	n = max(n, 1)
	s.res = make([]resource, n)
	s.resNext = 0
	size := 1
	for size < 2*n+16 {
		size <<= 1
	}
	s.out = make([]respItem, size)
	s.outMask = uint32(size - 1)
	s.outHead, s.outTail = 0, 0
}

func (s *responder) pendingOutput() bool { return s.outHead != s.outTail }

func (s *responder) outFull() bool { return s.outTail-s.outHead >= uint32(len(s.out)) }

func (s *responder) push() *respItem {
	it := &s.out[s.outTail&s.outMask]
	*it = respItem{}
	s.outTail++
	return it
}

// queueAck queues an ACK of every PSN up to ps, merged into an ACK already
// waiting at the tail of the queue: coalesced acknowledgements.
func (s *responder) queueAck(ps psn.PSN) {
	if s.outTail != s.outHead {
		if t := &s.out[(s.outTail-1)&s.outMask]; t.kind == outAck {
			t.psn, t.msn = ps, s.msn
			return
		}
	}
	if s.outFull() {
		return // the requester's timer recovers a lost ACK
	}
	it := s.push()
	it.kind, it.psn, it.msn, it.syndrome = outAck, ps, s.msn, wire.AckSyndrome(creditsInvalid)
}

func (s *responder) queueNAK(q *QP, ps psn.PSN, syndrome uint8) {
	if s.outFull() {
		return
	}
	it := s.push()
	it.kind, it.psn, it.msn, it.syndrome = outNAK, ps, s.msn, syndrome
	switch wire.SyndromeKind(syndrome) {
	case wire.AckKindRNR:
		q.stats.RNRNAKsSent++
	default:
		if wire.NAKCode(wire.SyndromeValue(syndrome)) == wire.NAKPSNSeqErr {
			q.stats.SeqNAKsSent++
		} else {
			q.stats.ErrNAKsSent++
		}
	}
}

// fatal answers a request the responder cannot execute with a NAK and moves
// the queue pair to the error state: the NAK is the last thing it sends.
func (s *responder) fatal(q *QP, ps psn.PSN, code wire.NAKCode) {
	q.toError()
	s.queueNAK(q, ps, wire.NAKSyndrome(code))
}

// receive handles a request packet.
func (s *responder) receive(q *QP, p *wire.Packet) {
	ps := psn.PSN(p.BTH().PSN())
	switch d := ps.Diff(s.ePSN); {
	case d > 0:
		if !s.nakSent {
			s.nakSent = true
			s.queueNAK(q, s.ePSN, wire.NAKSyndrome(wire.NAKPSNSeqErr))
		}
	case d < 0:
		q.stats.DupRequests++
		s.duplicate(q, p, ps)
	default:
		s.execute(q, p, ps)
	}
}

// duplicate answers a request seen before: sends and writes are
// acknowledged again, reads re-executed, atomics replayed from the cache.
func (s *responder) duplicate(q *QP, p *wire.Packet, ps psn.PSN) {
	m := p.Info.Mask
	switch {
	case m&(wire.MaskSend|wire.MaskWrite) != 0:
		s.queueAck(s.ePSN.Sub(1))
	case m&wire.MaskRead != 0:
		r := s.findResource(ps, false)
		if r == nil {
			return
		}
		reth := p.RETH()
		n := npackets(reth.DMALen(), q.mtu)
		if !ps.Add(n-1).InWindow(r.first, r.npkts) {
			return
		}
		buf, err := s.readBuffer(q, reth)
		if err != nil {
			return
		}
		// The same read still being answered (a response lost on the way,
		// asked again from there): answer from the PSN asked at once,
		// rather than finish the old answer, whose rest the requester
		// throws away, and answer again after it. Behind every loss of a
		// long read the whole rest would go twice (rxe restarts too).
		it := s.answering(r)
		if it == nil {
			if s.outFull() {
				return
			}
			it = s.push()
			it.kind = outRead
		}
		it.psn, it.msn, it.buf, it.length, it.off, it.started = ps, s.msn, buf, reth.DMALen(), 0, false
	case m&wire.MaskAtomic != 0:
		r := s.findResource(ps, true)
		if r == nil || s.outFull() {
			return
		}
		it := s.push()
		it.kind, it.psn, it.msn, it.orig = outAtomic, ps, s.msn, r.orig
	}
}

// answering returns the queued response to read r not yet sent whole,
// or nil.
func (s *responder) answering(r *resource) *respItem {
	for i := s.outHead; i != s.outTail; i++ {
		if it := &s.out[i&s.outMask]; it.kind == outRead && it.psn.InWindow(r.first, r.npkts) {
			return it
		}
	}
	return nil
}

func (s *responder) findResource(ps psn.PSN, atomic bool) *resource {
	for i := range s.res {
		r := &s.res[i]
		if r.valid && r.atomic == atomic && ps.InWindow(r.first, r.npkts) {
			return r
		}
	}
	return nil
}

func (s *responder) record(r resource) {
	r.valid = true
	s.res[s.resNext] = r
	s.resNext = (s.resNext + 1) % len(s.res)
}

func npackets(length uint32, mtu int) uint32 {
	return max(1, (length+uint32(mtu)-1)/uint32(mtu))
}

// execute runs the request at the expected PSN.
func (s *responder) execute(q *QP, p *wire.Packet, ps psn.PSN) {
	m := p.Info.Mask
	n := uint32(len(p.Payload))

	// The opcode must continue the message in progress, or start one.
	var want int
	switch {
	case m&wire.MaskSend != 0:
		want = inSend
	case m&wire.MaskWrite != 0:
		want = inWrite
	}
	if m&wire.MaskFirst != 0 || want == inNone {
		if s.cur != inNone {
			s.fatal(q, ps, wire.NAKInvalidRequest)
			return
		}
	} else if s.cur != want {
		s.fatal(q, ps, wire.NAKInvalidRequest)
		return
	}

	// The queue pair must allow the operation.
	need := mr.Access(0)
	switch {
	case m&wire.MaskWrite != 0:
		need = mr.RemoteWrite
	case m&wire.MaskRead != 0:
		need = mr.RemoteRead
	case m&wire.MaskAtomic != 0:
		need = mr.RemoteAtomic
	}
	if q.attr.Access&need != need {
		s.fatal(q, ps, wire.NAKInvalidRequest)
		return
	}

	// Payload sizes: every packet but the last of a message is full.
	if m&wire.MaskPayload != 0 {
		if m&wire.MaskLast == 0 && n != uint32(q.mtu) || n > uint32(q.mtu) {
			s.fatal(q, ps, wire.NAKInvalidRequest)
			return
		}
	}

	switch want {
	case inSend:
		s.send(q, p, ps, n)
	case inWrite:
		s.write(q, p, ps, n)
	default:
		if m&wire.MaskRead != 0 {
			s.read(q, p, ps)
		} else if m&wire.MaskAtomic != 0 {
			s.atomic(q, p, ps)
		} else {
			s.fatal(q, ps, wire.NAKInvalidRequest)
		}
	}
}

// advance accepts the request at ePSN: the next PSN is expected, a new gap
// may be NAKed again, and an ACK goes out when the requester asked for one.
func (s *responder) advance(p *wire.Packet, ps psn.PSN, npkts uint32) {
	s.ePSN = ps.Add(npkts)
	s.nakSent = false
	if p.BTH().AckReq() && p.Info.Mask&(wire.MaskRead|wire.MaskAtomic) == 0 {
		s.queueAck(ps)
	}
}

// takeRecv consumes a receive WQE for a message that needs one, or queues
// an RNR NAK and reports false when none is posted.
func (s *responder) takeRecv(q *QP, ps psn.PSN) bool {
	slot := q.rq.Peek()
	if slot == nil {
		// Every attempt at this PSN is told to wait; the packets behind it
		// are out of sequence but get no NAK of their own.
		s.nakSent = true
		s.queueNAK(q, ps, wire.RNRSyndrome(q.attr.MinRNRTimer))
		return false
	}
	s.recv = *slot
	q.rq.Pop()
	return true
}

func (s *responder) send(q *QP, p *wire.Packet, ps psn.PSN, n uint32) {
	m := p.Info.Mask
	if m&wire.MaskFirst != 0 {
		if !s.takeRecv(q, ps) {
			return
		}
		s.cur, s.off = inSend, 0
		if m&wire.MaskLast == 0 {
			s.expectFrom, s.expecting = ps, true
		}
	}
	if uint64(s.off)+uint64(n) > uint64(s.recv.Len()) {
		s.completeRecv(q, verbs.CompRecv, verbs.LocLenErr, 0, 0)
		s.fatal(q, ps, wire.NAKInvalidRequest)
		return
	}
	if n > 0 {
		if _, err := q.mrs.Scatter(s.recv.SGL(), int(s.off), p.Payload); err != nil {
			s.completeRecv(q, verbs.CompRecv, verbs.LocProtErr, 0, 0)
			s.fatal(q, ps, wire.NAKRemoteOpErr)
			return
		}
	}
	s.off += n
	if m&wire.MaskLast != 0 {
		var flags verbs.CompFlags
		var imm uint32
		switch {
		case m&wire.MaskImmDt != 0:
			flags, imm = verbs.WithImm, p.ImmDt().Imm()
		case m&wire.MaskIETH != 0:
			flags, imm = verbs.WithInv, p.IETH().RKey()
			if err := q.mrs.Invalidate(imm); err != nil {
				s.completeRecv(q, verbs.CompRecv, verbs.LocQPOpErr, 0, 0)
				s.fatal(q, ps, wire.NAKInvalidRequest)
				return
			}
		}
		s.msn = (s.msn + 1) & psn.Mask
		s.completeRecv(q, verbs.CompRecv, verbs.Success, flags, imm)
	}
	s.advance(p, ps, 1)
}

func (s *responder) write(q *QP, p *wire.Packet, ps psn.PSN, n uint32) {
	m := p.Info.Mask
	// A write with immediate consumes a receive on its last packet; check
	// before anything is placed so that an RNR NAK leaves memory as it was.
	if m&wire.MaskImmDt != 0 && q.rq.Peek() == nil {
		s.takeRecv(q, ps)
		return
	}
	if m&wire.MaskFirst != 0 {
		reth := p.RETH()
		s.wlen = reth.DMALen()
		s.wbuf = nil
		if s.wlen > 0 {
			buf, err := q.mrs.Remote(reth.RKey(), reth.VA(), s.wlen, mr.RemoteWrite)
			if err != nil {
				s.fatal(q, ps, wire.NAKRemoteAccessErr)
				return
			}
			s.wbuf = buf
		}
		s.cur, s.off = inWrite, 0
		if m&wire.MaskLast == 0 {
			s.expectFrom, s.expecting = ps, true
		}
	}
	if uint64(s.off)+uint64(n) > uint64(s.wlen) {
		s.fatal(q, ps, wire.NAKInvalidRequest)
		return
	}
	mr.Place(s.wbuf[s.off:], p.Payload)
	s.off += n
	if m&wire.MaskLast != 0 {
		if s.off != s.wlen {
			s.fatal(q, ps, wire.NAKInvalidRequest)
			return
		}
		s.msn = (s.msn + 1) & psn.Mask
		if m&wire.MaskImmDt != 0 {
			s.takeRecv(q, ps) // checked above: cannot fail
			s.completeRecv(q, verbs.CompRecvWriteImm, verbs.Success, verbs.WithImm, p.ImmDt().Imm())
		} else {
			s.cur = inNone
			q.stats.RemoteWrites++
		}
	}
	s.advance(p, ps, 1)
}

// completeRecv reports the message that used s.recv and ends it.
func (s *responder) completeRecv(q *QP, op verbs.CompOpcode, st verbs.Status, flags verbs.CompFlags, imm uint32) {
	c := verbs.Completion{
		WRID:   s.recv.ID,
		Status: st,
		Opcode: op,
		Flags:  flags,
		QPN:    q.qpn,
		Imm:    imm,
	}
	if st == verbs.Success {
		c.ByteLen = s.off
	}
	q.recvCQ.Push(&c)
	s.cur = inNone
}

func (s *responder) readBuffer(q *QP, reth wire.RETH) ([]byte, error) {
	if reth.DMALen() == 0 {
		return nil, nil
	}
	return q.mrs.Remote(reth.RKey(), reth.VA(), reth.DMALen(), mr.RemoteRead)
}

func (s *responder) read(q *QP, p *wire.Packet, ps psn.PSN) {
	if s.outFull() {
		q.stats.Dropped++ // the requester retries
		return
	}
	reth := p.RETH()
	buf, err := s.readBuffer(q, reth)
	if err != nil {
		s.fatal(q, ps, wire.NAKRemoteAccessErr)
		return
	}
	npkts := npackets(reth.DMALen(), q.mtu)
	s.msn = (s.msn + 1) & psn.Mask
	q.stats.RemoteReads++
	s.record(resource{first: ps, npkts: npkts})
	it := s.push()
	it.kind, it.psn, it.msn, it.buf, it.length = outRead, ps, s.msn, buf, reth.DMALen()
	s.advance(p, ps, npkts)
}

func (s *responder) atomic(q *QP, p *wire.Packet, ps psn.PSN) {
	if s.outFull() {
		q.stats.Dropped++
		return
	}
	a := p.AtomicETH()
	word, err := q.mrs.Atomic64(a.RKey(), a.VA())
	if err != nil {
		code := wire.NAKRemoteAccessErr
		if errors.Is(err, mr.ErrMisaligned) {
			code = wire.NAKInvalidRequest
		}
		s.fatal(q, ps, code)
		return
	}
	var orig uint64
	if p.Opcode == wire.RCCompareSwap {
		for {
			orig = atomic.LoadUint64(word)
			if orig != a.Compare() || atomic.CompareAndSwapUint64(word, orig, a.SwapAdd()) {
				break
			}
		}
	} else {
		orig = atomic.AddUint64(word, a.SwapAdd()) - a.SwapAdd()
	}
	s.msn = (s.msn + 1) & psn.Mask
	s.record(resource{atomic: true, first: ps, npkts: 1, orig: orig})
	it := s.push()
	it.kind, it.psn, it.msn, it.orig = outAtomic, ps, s.msn, orig
	s.advance(p, ps, 1)
}

// transmit sends queued responses in order while b has room.
func (s *responder) transmit(q *QP, b *link.Batch) {
	if s.expecting {
		s.expect(q, b)
	}
	for s.outHead != s.outTail && b.Room() > 0 {
		it := &s.out[s.outHead&s.outMask]
		switch it.kind {
		case outAck, outNAK:
			f, h := q.frame(b, wire.RCAcknowledge, 0)
			q.bth(f, h, wire.RCAcknowledge, it.psn, 0, false, false)
			wire.AETH(f[h+wire.RCAcknowledge.Info().AETH:]).Encode(it.syndrome, it.msn)
			q.send(b, f)
		case outAtomic:
			f, h := q.frame(b, wire.RCAtomicAcknowledge, 0)
			q.bth(f, h, wire.RCAtomicAcknowledge, it.psn, 0, false, false)
			info := wire.RCAtomicAcknowledge.Info()
			wire.AETH(f[h+info.AETH:]).Encode(wire.AckSyndrome(creditsInvalid), it.msn)
			wire.AtomicAckETH(f[h+info.AtomicAckETH:]).Encode(it.orig)
			q.send(b, f)
		case outRead:
			if !s.readPacket(q, it, b) {
				continue // more packets of this response
			}
		}
		s.outHead++
	}
}

// expect tells a link that places payloads where the rest of the message
// in progress goes, if it is still in progress: the packets after those
// that arrived since its first. A write's length is known (its RETH); a
// send's is not, so its expectation is the rest of the receive buffer
// (one SGE only), which the link ends at the message's last packet.
func (s *responder) expect(q *QP, b *link.Batch) {
	s.expecting = false
	if !b.Expects() {
		return
	}
	var rest []byte
	switch s.cur {
	case inWrite:
		if s.off < s.wlen {
			rest = s.wbuf[s.off:s.wlen]
		}
	case inSend:
		if buf, ok := q.singleBuffer(s.recv.SGL()); ok && s.off < uint32(len(buf)) {
			rest = buf[s.off:]
		}
	}
	if len(rest) == 0 {
		return
	}
	k := s.off / uint32(q.mtu) // packets placed: s.off is whole packets until the last
	q.expect(b, &s.exp, s.expectFrom.Add(k), rest, false)
}

// readPacket sends the next packet of a read response and reports whether
// it was the last.
func (s *responder) readPacket(q *QP, it *respItem, b *link.Batch) bool {
	n := min(it.length-it.off, uint32(q.mtu))
	first := !it.started
	last := it.off+n == it.length
	var op wire.Opcode
	switch {
	case first && last:
		op = wire.RCReadResponseOnly
	case first:
		op = wire.RCReadResponseFirst
	case last:
		op = wire.RCReadResponseLast
	default:
		op = wire.RCReadResponseMiddle
	}
	f, h := q.frame(b, op, int(n))
	q.bth(f, h, op, it.psn, int(n), false, false)
	info := op.Info()
	if info.AETH != 0 {
		wire.AETH(f[h+info.AETH:]).Encode(wire.AckSyndrome(creditsInvalid), it.msn)
	}
	q.sendPayload(b, f, h+info.HeaderLen, it.buf[it.off:it.off+n])
	it.started = true
	it.off += n
	it.psn = it.psn.Next()
	return last
}

// flush ends the message in progress when the queue pair enters the error
// state; a receive it consumed completes with a flush error.
func (s *responder) flush(q *QP) {
	if s.cur == inSend {
		s.completeRecv(q, verbs.CompRecv, verbs.WRFlushErr, 0, 0)
	}
	s.cur = inNone
	s.outHead = s.outTail
}
