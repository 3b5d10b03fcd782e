package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric/internal/amo"
	"github.com/softfabric/softfabric/fabric/internal/match"
)

// An RDM endpoint is reliable without connections the application sees,
// as libfabric's RxM makes it over verbs:
//
//   - Its address is a UD queue pair (the service's number, or a random
//     one). On the first operation towards a peer it creates an RC queue
//     pair and sends the peer a connection request over UD; the peer
//     creates one of its own, connects it and replies; the requester
//     connects. Requests are repeated until answered (about 3 s), then
//     the operations waiting for the connection fail with ErrTimedOut.
//     Operations posted meanwhile wait in the endpoint (they count
//     against the transmit queue's size), so the application sees no
//     ErrAgain for a forming connection.
//   - Each side sends on the queue pair it created; the peer's answers to
//     its atomics and delivery acknowledgements come back on the same
//     pair. All queue pairs of the endpoint share one receive pool (an
//     SRQ) of provider buffers of RDMEagerSize + header bytes.
//   - A message carries a small header (its kind, tag, remote CQ data);
//     it lands in a pool buffer and is matched in software against posted
//     receives (tagged or not, with ignore masks and source filters), or
//     waits in the unexpected-message queue, holding its buffer, until a
//     receive matches it. A message that finds no pool buffer waits at
//     the sender (RNR retries, forever): floods slow down, nothing is
//     lost.
//   - RMA and the native atomics go straight on the queue pair; the other
//     atomics are messages the target's provider executes in arrival
//     order and answers.
//   - DELIVERY_COMPLETE: the target acknowledges a message once it is in
//     the application's buffer; the send completes then.

// Message kinds in the RDM header.
const (
	rdmMsg uint8 = iota + 1
	rdmTagged
	rdmAtomicReq
	rdmAtomicResp
	rdmDelivered
)

// Header flags.
const (
	rdmHasData uint8 = 1 << iota
	rdmAckReq
)

// The header: kind, flags, atomic op, datatype, atomic kind, status,
// key, tag, data, remote address, request id, operand length.
type rdmHdr []byte

func (h rdmHdr) kind() uint8     { return h[0] }
func (h rdmHdr) flags() uint8    { return h[1] }
func (h rdmHdr) aop() uint8      { return h[2] }
func (h rdmHdr) adt() uint8      { return h[3] }
func (h rdmHdr) akind() uint8    { return h[4] }
func (h rdmHdr) status() uint8   { return h[5] }
func (h rdmHdr) key() uint32     { return binary.LittleEndian.Uint32(h[8:]) }
func (h rdmHdr) tag() uint64     { return binary.LittleEndian.Uint64(h[16:]) }
func (h rdmHdr) data() uint64    { return binary.LittleEndian.Uint64(h[24:]) }
func (h rdmHdr) raddr() uint64   { return binary.LittleEndian.Uint64(h[32:]) }
func (h rdmHdr) reqID() uint64   { return binary.LittleEndian.Uint64(h[40:]) }
func (h rdmHdr) operandLen() int { return int(binary.LittleEndian.Uint32(h[48:])) }
func (h rdmHdr) set(kind, flags uint8) {
	clear(h[:rdmHeader])
	h[0], h[1] = kind, flags
}

// Connection management messages over UD.
const (
	cmConnReq uint8 = iota + 1
	cmConnRep
	cmMsgSize  = 16
	cmSlots    = 64
	cmTries    = 14
	cmFirstGap = 5 * time.Millisecond
)

// internalWR marks RC sends of the provider's own (answers from a pool
// buffer): the low bits are the buffer's index.
const internalWR = 1 << 63

type rdmState struct {
	ud         *ud.QP
	udSQ, udRQ *verbs.CQ
	srq        *verbs.RecvQueue
	rcSQ, rcRQ *verbs.CQ

	pool   []byte // receive buffers, poolBuf bytes each
	poolMR *mr.Region
	npool  int
	cmBuf  []byte // UD receive slots (GRH + message), then send slots
	cmMR   *mr.Region
	cmSend int

	peers      []*rdmPeer          // by AV index
	byQPN      map[uint32]*rdmConn // every RC queue pair of the endpoint
	accepted   map[acceptKey]*rdmConn
	connecting []*rdmPeer
	backlog    []*rdmPeer

	tagged, untagged *match.Queue
	// gen counts the uses of each transmit slot, so that a late answer
	// for an operation finds the slot's new user and is ignored.
	gen   []uint32
	inUse []bool   // transmit slots the worker took and has not released
	multi []uint64 // multi-receive buffers in use (rx seqs)

	vc   [32]verbs.Completion
	wr   verbs.SendWR
	sgl  [4]mr.SGE
	rwr  verbs.RecvWR
	rsge [1]mr.SGE
}

const poolBuf = rdmHeader + RDMEagerSize

// rdmTx is the RDM part of a transmit slot.
type rdmTx struct {
	kind     uint8 // 0: RMA or native atomic (a plain work request)
	hflags   uint8
	tag      uint64
	data     uint64
	aop, adt uint8
	akind    uint8
	opLen    int    // software atomic: operand bytes (then as many compare bytes)
	res      []byte // software atomic: where the old values go
	awaiting bool   // completes on the peer's answer, not the send's
	fin      bool   // reported
	sent     bool   // its work request completed (or it never had one)
}

// rdmPeer is what the endpoint knows of an AV entry: the connection it
// made towards it.
type rdmPeer struct {
	x      Addr
	gen    uint32
	remote Address
	conn   *rdmConn
	state  uint8
	tries  int
	next   int64
	queue  []uint64
	gap    time.Duration
}

const (
	peerIdle uint8 = iota
	peerConnecting
	peerUp
)

// rdmConn is one RC queue pair of the endpoint, made by it or accepted.
type rdmConn struct {
	qp     *rc.QP
	remote Address
	src    Addr // the sender's AV index, found lazily
	psn    uint32
}

type acceptKey struct {
	remote Address
	qpn    uint32
}

func (ep *Endpoint) rdmEnable() error {
	nrx := len(ep.rx.ops)
	s := &rdmState{
		udSQ: verbs.NewCQ(2 * cmSlots), udRQ: verbs.NewCQ(2 * cmSlots),
		srq: verbs.NewSRQ(nrx), rcSQ: verbs.NewCQ(len(ep.tx.ops) + nrx + 1), rcRQ: verbs.NewCQ(nrx + 1),
		npool: nrx, byQPN: map[uint32]*rdmConn{}, accepted: map[acceptKey]*rdmConn{},
		tagged: match.New(nrx, nrx, true), untagged: match.New(nrx, nrx, false),
	}
	s.pool = make([]byte, nrx*poolBuf)
	s.gen = make([]uint32, len(ep.tx.ops))
	s.inUse = make([]bool, len(ep.tx.ops))
	var err error
	if s.poolMR, err = ep.d.dev.MRs().Register(s.pool, mr.LocalWrite); err != nil {
		return err
	}
	s.cmBuf = make([]byte, cmSlots*(ud.GRHSize+cmMsgSize)+cmSlots*cmMsgSize)
	if s.cmMR, err = ep.d.dev.MRs().Register(s.cmBuf, mr.LocalWrite); err != nil {
		_ = ep.d.dev.MRs().Deregister(s.poolMR)
		return err
	}
	s.ud, err = ep.d.dev.NewUD(device.QPConfig{SendCQ: s.udSQ, RecvCQ: s.udRQ, RQ: verbs.NewRecvQueue(cmSlots),
		SQDepth: cmSlots, Worker: ep.w.id, QPN: uint32(ep.info.Service)}, dgramQKey)
	if err != nil {
		_ = ep.d.dev.MRs().Deregister(s.poolMR)
		_ = ep.d.dev.MRs().Deregister(s.cmMR)
		return err
	}
	ep.rdm = s
	for i := 0; i < cmSlots; i++ {
		ep.cmRepost(uint64(i))
	}
	for i := 0; i < nrx; i++ {
		ep.poolRepost(i)
	}
	return nil
}

func (ep *Endpoint) cmRepost(i uint64) {
	s := ep.rdm
	sz := uint64(ud.GRHSize + cmMsgSize)
	s.rsge[0] = mr.SGE{Addr: s.cmMR.Addr() + i*sz, Length: uint32(sz), LKey: s.cmMR.LKey()}
	s.rwr = verbs.RecvWR{ID: i, SGL: s.rsge[:]}
	_ = s.ud.PostRecv(&s.rwr)
}

func (ep *Endpoint) poolRepost(i int) {
	s := ep.rdm
	s.rsge[0] = mr.SGE{Addr: s.poolMR.Addr() + uint64(i*poolBuf), Length: poolBuf, LKey: s.poolMR.LKey()}
	s.rwr = verbs.RecvWR{ID: uint64(i), SGL: s.rsge[:]}
	_ = s.srq.Post(&s.rwr)
}

func (ep *Endpoint) poolBuf(i int) []byte { return ep.rdm.pool[i*poolBuf : (i+1)*poolBuf] }

// rdmSend posts a message (tagged when f has FlagTagged).
func (ep *Endpoint) rdmSend(b []byte, desc Desc, dst Addr, ctx, data, tag uint64, f Flags) error {
	if len(b) > RDMEagerSize {
		return ErrInvalid
	}
	op, seq, err := ep.beginTx()
	if err != nil {
		return err
	}
	if err := ep.checkDest(dst); err != nil {
		return ep.abortTx(err)
	}
	op.ctx, op.dest, op.op = ctx, dst, verbs.OpSend
	if f&FlagInject != 0 {
		err = ep.injectSGE(op, seq, b)
	} else {
		err = gather(&op.sgl, &op.nsge, [][]byte{b}, []Desc{desc}, 1)
	}
	if err != nil {
		return ep.abortTx(err)
	}
	op.rdm.kind, op.rdm.tag, op.rdm.data = rdmMsg, tag, data
	op.flags = FlagSend | FlagMsg
	if f&FlagTagged != 0 {
		op.rdm.kind, op.flags = rdmTagged, FlagSend|FlagTagged
	}
	if f&FlagRemoteCQData != 0 {
		op.rdm.hflags |= rdmHasData
	}
	level := f & (FlagTransmitComplete | FlagDeliveryComplete)
	if level == 0 {
		level = ep.info.TX.Flags & (FlagTransmitComplete | FlagDeliveryComplete)
	}
	if level&FlagDeliveryComplete != 0 && f&FlagInject == 0 {
		op.rdm.hflags |= rdmAckReq
		op.rdm.awaiting = true
	}
	op.report = ep.report(f)
	op.cntr = ep.cntSend
	ep.commitTx(seq)
	return nil
}

// fillSoftAtomic describes an atomic the target's provider executes.
func (ep *Endpoint) fillSoftAtomic(o *txOp, op AtomicOp, t Datatype, k AtomicKind, b []byte, desc Desc, cmp []byte, cdesc Desc, res []byte, rdesc Desc) error {
	if ep.rdm == nil {
		return ErrNotSupported
	}
	o.op = verbs.OpSend
	o.rdm.kind, o.rdm.aop, o.rdm.adt, o.rdm.akind = rdmAtomicReq, uint8(op), uint8(t), uint8(k)
	o.rdm.awaiting = true
	if op == AtomicRead {
		o.rdm.opLen = len(res)
		o.nsge = 0
	} else {
		o.rdm.opLen = len(b)
		iov, descs := [][]byte{b, cmp}, []Desc{desc, cdesc}
		if k != AtomicCompare {
			iov, descs = iov[:1], descs[:1]
		}
		if err := gather(&o.sgl, &o.nsge, iov, descs, 2); err != nil {
			return err
		}
	}
	if k != AtomicBase {
		var s mr.SGE
		if err := sge(res, rdesc, &s); err != nil {
			return err
		}
		o.rdm.res = res
	}
	return nil
}

// rdmRecv posts a receive: untagged (FlagMsg), tagged (FlagTagged, with
// tag and ignore), multi-receive, or a peek/claim/discard request.
func (ep *Endpoint) rdmRecv(b []byte, desc Desc, src Addr, ctx, tag, ignore uint64, f Flags) error {
	ep.lockRx()
	defer ep.unlockRx()
	if st := ep.state.Load(); st != epEnabled {
		if st == epCreated {
			return ErrNotConnected
		}
		return ErrClosed
	}
	if src != AddrUnspec && ep.av.entry(src) == nil {
		return ErrAddrNotAvail
	}
	op, seq, ok := ep.rx.slot()
	if !ok {
		return ErrAgain
	}
	*op = rxOp{ctx: ctx, src: src, tag: tag, ignore: ignore, flags: f, buf: b}
	if f&(FlagPeek|FlagDiscard) == 0 || f&FlagClaim != 0 && f&FlagDiscard == 0 {
		if err := gather(&op.sgl, &op.nsge, [][]byte{b}, []Desc{desc}, 1); err != nil {
			ep.rx.unpublish(seq)
			return err
		}
	}
	ep.rx.publish(seq)
	ep.w.kick()
	return nil
}

// TSend sends b with tag (RDM).
func (ep *Endpoint) TSend(b []byte, desc Desc, dst Addr, tag, ctx uint64) error {
	if ep.rdm == nil {
		return ErrNotSupported
	}
	return ep.rdmSend(b, desc, dst, ctx, 0, tag, FlagTagged)
}

// TSendData sends b with tag and remote CQ data.
func (ep *Endpoint) TSendData(b []byte, desc Desc, data uint64, dst Addr, tag, ctx uint64) error {
	if ep.rdm == nil {
		return ErrNotSupported
	}
	return ep.rdmSend(b, desc, dst, ctx, data, tag, FlagTagged|FlagRemoteCQData)
}

// TInject sends up to InjectSize bytes with tag, copied at once, with no
// completion.
func (ep *Endpoint) TInject(b []byte, dst Addr, tag uint64) error {
	if ep.rdm == nil {
		return ErrNotSupported
	}
	return ep.rdmSend(b, Desc{}, dst, 0, 0, tag, FlagTagged|FlagInject)
}

// TSendMsg sends m as a tagged message; flags as SendMsg.
func (ep *Endpoint) TSendMsg(m *Msg, f Flags) error {
	if ep.rdm == nil || len(m.IOV) > 1 {
		return ErrNotSupported
	}
	b, d := m.single()
	return ep.rdmSend(b, d, m.Addr, m.Context, m.Data, m.Tag, f|FlagTagged)
}

// TRecv posts b for a message whose tag matches tag in the bits ignore
// does not set, from src (AddrUnspec: anyone).
func (ep *Endpoint) TRecv(b []byte, desc Desc, src Addr, tag, ignore, ctx uint64) error {
	if ep.rdm == nil {
		return ErrNotSupported
	}
	return ep.rdmRecv(b, desc, src, ctx, tag, ignore, FlagTagged)
}

// TRecvMsg posts a tagged receive with flags: FlagPeek (report, without
// taking, the oldest matching unexpected message; ErrNoMsg as the
// completion's error when none), FlagPeek|FlagClaim (and reserve it for
// a later FlagClaim receive with the same Context), FlagClaim (receive
// the message reserved for m.Context), FlagPeek|FlagDiscard and
// FlagClaim|FlagDiscard (drop it).
func (ep *Endpoint) TRecvMsg(m *Msg, f Flags) error {
	if ep.rdm == nil || len(m.IOV) > 1 {
		return ErrNotSupported
	}
	b, d := m.single()
	return ep.rdmRecv(b, d, m.Addr, m.Context, m.Tag, m.Ignore, FlagTagged|f&(FlagPeek|FlagClaim|FlagDiscard))
}

// Cancel cancels the posted receive with context ctx (RDM): it completes
// with ErrCanceled. ErrNoMsg (wrapped) if there is none.
func (ep *Endpoint) Cancel(ctx uint64) error {
	if ep.rdm == nil {
		return ErrNotSupported
	}
	if ep.state.Load() != epEnabled {
		return ErrClosed
	}
	found := false
	err := ep.d.exec(ep.w, func() error {
		ep.rdmSubmitRx()
		for _, q := range []*match.Queue{ep.rdm.untagged, ep.rdm.tagged} {
			if r, ok := q.Cancel(ctx); ok {
				ep.finishRx(r.Cookie, StatusCanceled, 0, nil, 0, 0, AddrUnspec, 0)
				found = true
				return nil
			}
		}
		for i, seq := range ep.rdm.multi {
			if ep.rx.ops[seq].ctx == ctx {
				ep.rdm.multi = append(ep.rdm.multi[:i], ep.rdm.multi[i+1:]...)
				ep.finishRx(seq, StatusCanceled, 0, nil, 0, 0, AddrUnspec, FlagMultiRecv)
				found = true
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !found {
		return ErrNoMsg
	}
	return nil
}

// rdmService is the worker's turn at an RDM endpoint.
func (ep *Endpoint) rdmService() bool {
	s := ep.rdm
	did := ep.rdmSubmitTx()
	// What arrived first, then new receives: a peek posted after a
	// message reached the device finds it.
	if s.rcRQ.Len() > 0 && ep.rdmReapRx() {
		did = true
	}
	if ep.rdmSubmitRx() {
		did = true
	}
	if s.udRQ.Len() > 0 {
		ep.cmReceive()
		did = true
	}
	if s.udSQ.Len() > 0 {
		s.udSQ.Poll(s.vc[:])
	}
	if len(s.connecting) > 0 {
		ep.cmRetry(ep.d.dev.Now())
	}
	if len(s.backlog) > 0 && ep.flushBacklog() {
		did = true
	}
	if s.rcSQ.Len() > 0 && ep.rdmReapTx() {
		did = true
	}
	return did
}

// peer returns the endpoint's state for AV entry x, new when the entry
// was reused for another address.
func (ep *Endpoint) peer(x Addr) *rdmPeer {
	e := ep.av.entry(x)
	if e == nil {
		return nil
	}
	s := ep.rdm
	if uint64(x) >= uint64(len(s.peers)) {
		s.peers = append(s.peers, make([]*rdmPeer, int(x)+1-len(s.peers))...)
	}
	p := s.peers[x]
	if p == nil || p.gen != e.gen {
		p = &rdmPeer{x: x, gen: e.gen, remote: e.addr}
		s.peers[x] = p
	}
	return p
}

func (ep *Endpoint) rdmSubmitTx() bool {
	did := false
	for {
		seq, ok := ep.tx.next()
		if !ok {
			break
		}
		did = true
		op := &ep.tx.ops[seq]
		ep.rdm.gen[seq]++
		ep.rdm.inUse[seq] = true
		p := ep.peer(op.dest)
		if p == nil {
			op.rdm.sent = true
			ep.finishTx(seq, StatusAddrNotAvail)
			continue
		}
		switch p.state {
		case peerUp:
			if len(p.queue) == 0 && ep.postTx(p, seq) {
				continue
			}
		case peerIdle:
			if err := ep.cmStart(p); err != nil {
				op.rdm.sent = true
				ep.finishTx(seq, StatusAddrNotAvail)
				continue
			}
		}
		if len(p.queue) == 0 && p.state == peerUp {
			ep.rdm.backlog = append(ep.rdm.backlog, p)
		}
		p.queue = append(p.queue, seq)
	}
	return did
}

// postTx posts transmit op seq on p's queue pair; false when its send
// queue is full.
func (ep *Endpoint) postTx(p *rdmPeer, seq uint64) bool {
	s := ep.rdm
	op := &ep.tx.ops[seq]
	wr := &s.wr
	*wr = verbs.SendWR{ID: seq, Op: op.op, Flags: verbs.Signaled, RemoteAddr: op.raddr, RKey: op.rkey,
		Imm: op.imm, CompareAdd: op.cmp, Swap: op.swap}
	n := 0
	if op.rdm.kind != 0 {
		off := int(seq&ep.tx.mask) * slotArea
		h := rdmHdr(ep.injectBuf[off : off+rdmHeader])
		h.set(op.rdm.kind, op.rdm.hflags)
		h[2], h[3], h[4] = op.rdm.aop, op.rdm.adt, op.rdm.akind
		binary.LittleEndian.PutUint32(h[8:], op.rkey)
		binary.LittleEndian.PutUint64(h[16:], op.rdm.tag)
		binary.LittleEndian.PutUint64(h[24:], op.rdm.data)
		binary.LittleEndian.PutUint64(h[32:], op.raddr)
		binary.LittleEndian.PutUint64(h[40:], uint64(s.gen[seq])<<32|seq)
		binary.LittleEndian.PutUint32(h[48:], uint32(op.rdm.opLen))
		s.sgl[0] = mr.SGE{Addr: ep.injectMR.Addr() + uint64(off), Length: rdmHeader, LKey: ep.injectMR.LKey()}
		n = 1
		wr.RemoteAddr, wr.RKey = 0, 0
	}
	n += copy(s.sgl[n:], op.sgl[:op.nsge])
	wr.SGL = s.sgl[:n]
	err := p.conn.qp.PostSend(wr)
	if errors.Is(err, verbs.ErrQueueFull) {
		return false
	}
	if err != nil {
		op.rdm.sent = true
		ep.finishTx(seq, StatusOther)
	}
	return true
}

func (ep *Endpoint) flushBacklog() bool {
	s := ep.rdm
	did := false
	keep := s.backlog[:0]
	for _, p := range s.backlog {
		for len(p.queue) > 0 && p.state == peerUp {
			if !ep.postTx(p, p.queue[0]) {
				break
			}
			p.queue = p.queue[1:]
			did = true
		}
		if len(p.queue) > 0 && p.state == peerUp {
			keep = append(keep, p)
		}
	}
	s.backlog = keep
	return did
}

// finishTx reports transmit operation seq once, and frees its slot when
// its work request is over too.
func (ep *Endpoint) finishTx(seq uint64, st Status) {
	op := &ep.tx.ops[seq]
	if !op.rdm.fin {
		op.rdm.fin = true
		op.cntr.count(st == StatusOK)
		if (op.report || st != StatusOK) && ep.txCQ != nil {
			ep.comp = Completion{Context: op.ctx, Flags: op.flags, Status: st, Src: AddrUnspec}
			ep.txCQ.push(ep.w.id, &ep.comp)
			ep.txCQ.signal()
		}
	}
	if op.rdm.sent && ep.rdm.inUse[seq] {
		ep.rdm.inUse[seq] = false
		ep.tx.release(seq)
	}
}

// cmStart creates the queue pair towards p and asks p to connect.
func (ep *Endpoint) cmStart(p *rdmPeer) error {
	q, err := ep.d.dev.NewRC(device.QPConfig{SendCQ: ep.rdm.rcSQ, RecvCQ: ep.rdm.rcRQ, RQ: ep.rdm.srq,
		SQDepth: len(ep.tx.ops), Worker: ep.w.id}, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic)
	if err != nil {
		return err
	}
	c := &rdmConn{qp: q, remote: p.remote, src: p.x, psn: rand.Uint32() & psn.Mask}
	ep.rdm.byQPN[q.QPN()] = c
	p.conn, p.state, p.tries, p.gap = c, peerConnecting, 0, cmFirstGap
	ep.rdm.connecting = append(ep.rdm.connecting, p)
	ep.cmSendReq(p, ep.d.dev.Now())
	return nil
}

func (ep *Endpoint) cmSendReq(p *rdmPeer, now int64) {
	p.tries++
	p.next = now + int64(p.gap)
	p.gap = min(2*p.gap, 500*time.Millisecond)
	ep.cmSend(p.remote, cmConnReq, p.conn.qp.QPN(), p.conn.psn, 0)
}

// cmRetry repeats unanswered requests and gives up on silent peers.
func (ep *Endpoint) cmRetry(now int64) {
	s := ep.rdm
	keep := s.connecting[:0]
	for _, p := range s.connecting {
		if p.state != peerConnecting {
			continue
		}
		if now < p.next {
			keep = append(keep, p)
			continue
		}
		if p.tries >= cmTries {
			ep.cmFail(p)
			continue
		}
		ep.cmSendReq(p, now)
		keep = append(keep, p)
	}
	s.connecting = keep
}

// cmFail fails what waits for a connection that never came.
func (ep *Endpoint) cmFail(p *rdmPeer) {
	for _, seq := range p.queue {
		ep.tx.ops[seq].rdm.sent = true
		ep.finishTx(seq, StatusTimedOut)
	}
	p.queue = nil
	delete(ep.rdm.byQPN, p.conn.qp.QPN())
	ep.d.dev.Destroy(p.conn.qp)
	p.conn, p.state = nil, peerIdle
}

// cmSend sends a connection management message to remote's UD queue pair.
func (ep *Endpoint) cmSend(remote Address, kind uint8, qpn, psn, echo uint32) {
	s := ep.rdm
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	path, err := ep.d.dev.Path(ctx, remote.IP, s.ud.QPN(), remote.QPN)
	if err != nil {
		return
	}
	ah, err := verbs.NewAddressHandle(path, remote.QPN, dgramQKey)
	if err != nil {
		return
	}
	off := cmSlots*(ud.GRHSize+cmMsgSize) + s.cmSend*cmMsgSize
	s.cmSend = (s.cmSend + 1) % cmSlots
	m := s.cmBuf[off : off+cmMsgSize]
	clear(m)
	m[0] = kind
	binary.BigEndian.PutUint32(m[4:], qpn)
	binary.BigEndian.PutUint32(m[8:], psn)
	binary.BigEndian.PutUint32(m[12:], echo)
	s.rsge[0] = mr.SGE{Addr: s.cmMR.Addr() + uint64(off), Length: cmMsgSize, LKey: s.cmMR.LKey()}
	wr := verbs.SendWR{Op: verbs.OpSend, SGL: s.rsge[:], Dest: ah}
	_ = s.ud.PostSend(&wr)
}

// cmReceive handles connection requests and replies.
func (ep *Endpoint) cmReceive() {
	s := ep.rdm
	var vc [cmSlots]verbs.Completion
	n := s.udRQ.Poll(vc[:])
	for i := 0; i < n; i++ {
		v := &vc[i]
		if v.Status == verbs.Success && v.ByteLen >= ud.GRHSize+cmMsgSize {
			off := int(v.WRID)*(ud.GRHSize+cmMsgSize) + ud.GRHSize
			m := s.cmBuf[off : off+cmMsgSize]
			from := Address{IP: netip.AddrFrom16(v.SrcGID).Unmap(), QPN: v.SrcQP}
			qpn, ps, echo := binary.BigEndian.Uint32(m[4:]), binary.BigEndian.Uint32(m[8:]), binary.BigEndian.Uint32(m[12:])
			switch m[0] {
			case cmConnReq:
				ep.cmAccept(from, qpn, ps)
			case cmConnRep:
				ep.cmEstablish(qpn, ps, echo)
			}
		}
		if v.Status != verbs.WRFlushErr {
			ep.cmRepost(v.WRID)
		}
	}
}

// cmAccept answers a connection request, making the queue pair once
// (repeated requests get the same answer).
func (ep *Endpoint) cmAccept(from Address, qpn, ps uint32) {
	s := ep.rdm
	k := acceptKey{remote: from, qpn: qpn}
	c := s.accepted[k]
	if c == nil {
		q, err := ep.d.dev.NewRC(device.QPConfig{SendCQ: s.rcSQ, RecvCQ: s.rcRQ, RQ: s.srq, SQDepth: len(ep.tx.ops), Worker: ep.w.id},
			mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic)
		if err != nil {
			return
		}
		c = &rdmConn{qp: q, remote: from, src: AddrUnspec, psn: rand.Uint32() & psn.Mask}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = ep.d.dev.ConnectRC(ctx, q, c.psn, device.Remote{QPN: qpn, PSN: ps, GID: from.IP}, device.ConnectOptions{})
		cancel()
		if err != nil {
			ep.d.dev.Destroy(q)
			return
		}
		s.accepted[k] = c
		s.byQPN[q.QPN()] = c
	}
	ep.cmSend(from, cmConnRep, c.qp.QPN(), c.psn, qpn)
}

// cmEstablish completes a connection this endpoint asked for.
func (ep *Endpoint) cmEstablish(qpn, ps, echo uint32) {
	s := ep.rdm
	c := s.byQPN[echo]
	if c == nil || c.qp.State() != verbs.StateInit {
		return // a repeated reply
	}
	p := ep.peer(c.src)
	if p == nil || p.conn != c {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := ep.d.dev.ConnectRC(ctx, c.qp, c.psn, device.Remote{QPN: qpn, PSN: ps, GID: p.remote.IP}, device.ConnectOptions{}); err != nil {
		return
	}
	p.state = peerUp
	if len(p.queue) > 0 {
		s.backlog = append(s.backlog, p)
	}
}

// rdmSubmitRx takes posted receives: each first looks for an unexpected
// message it matches, else waits in its matching queue.
func (ep *Endpoint) rdmSubmitRx() bool {
	s := ep.rdm
	did := false
	for {
		seq, ok := ep.rx.next()
		if !ok {
			break
		}
		did = true
		op := &ep.rx.ops[seq]
		q := s.untagged
		if op.flags&FlagTagged != 0 {
			q = s.tagged
		}
		src := uint64(op.src)
		switch {
		case op.flags&FlagPeek != 0:
			var m match.Msg
			var ok bool
			switch {
			case op.flags&FlagClaim != 0:
				m, ok = q.Claim(src, op.tag, op.ignore, op.ctx)
			case op.flags&FlagDiscard != 0:
				m, ok = q.DiscardMatch(src, op.tag, op.ignore)
			default:
				m, ok = q.Peek(src, op.tag, op.ignore)
			}
			ep.peekResult(seq, m, ok, op.flags&FlagDiscard != 0)
			continue
		case op.flags&FlagClaim != 0:
			var m match.Msg
			var ok bool
			if op.flags&FlagDiscard != 0 {
				m, ok = q.Discard(op.ctx)
				ep.peekResult(seq, m, ok, true)
				continue
			}
			if m, ok = q.TakeClaimed(op.ctx); !ok {
				ep.finishRx(seq, StatusNoMsg, 0, nil, 0, 0, AddrUnspec, 0)
				continue
			}
			ep.deliverUnexpected(seq, m)
			continue
		case op.flags&FlagMultiRecv != 0:
			s.multi = append(s.multi, seq)
			for len(s.multi) > 0 && s.multi[0] == seq {
				m, ok := q.TakeUnexpected(match.AddrAny, 0, 0)
				if !ok {
					break
				}
				ep.deliverUnexpected(seq, m)
			}
			continue
		}
		if m, ok := q.TakeUnexpected(src, op.tag, op.ignore); ok {
			ep.deliverUnexpected(seq, m)
			continue
		}
		_ = q.Post(match.Recv{Context: op.ctx, Src: src, Tag: op.tag, Ignore: op.ignore, Cookie: seq})
	}
	return did
}

// peekResult completes a peek (or discard) with the message's facts.
func (ep *Endpoint) peekResult(seq uint64, m match.Msg, ok, discard bool) {
	if !ok {
		ep.finishRx(seq, StatusNoMsg, 0, nil, 0, 0, AddrUnspec, 0)
		return
	}
	if discard {
		ep.releaseBuf(m)
	}
	ep.finishRx(seq, StatusOK, m.Len, nil, m.Tag, m.Data, Addr(m.Src), msgFlags(m))
}

func msgFlags(m match.Msg) Flags {
	if m.Flags&uint32(rdmHasData) != 0 {
		return FlagRemoteCQData
	}
	return 0
}

// Unexpected messages keep their pool buffer and the queue pair they
// came on (to acknowledge delivery): Cookie = qpn<<32 | buffer.
func (ep *Endpoint) deliverUnexpected(seq uint64, m match.Msg) {
	i := int(m.Cookie & 0xffffffff)
	buf := ep.poolBuf(i)
	ep.place(seq, buf[rdmHeader:rdmHeader+m.Len], m.Tag, m.Data, Addr(m.Src), msgFlags(m))
	ep.releaseBuf(m)
}

// releaseBuf gives an unexpected message's buffer back, acknowledging it
// first when its sender asked.
func (ep *Endpoint) releaseBuf(m match.Msg) {
	i := int(m.Cookie & 0xffffffff)
	if m.Flags&uint32(rdmAckReq) != 0 {
		if c := ep.rdm.byQPN[uint32(m.Cookie>>32)]; c != nil {
			ep.answer(c, i, rdmDelivered, rdmHdr(ep.poolBuf(i)).reqID(), 0, 0, 0)
			return
		}
	}
	ep.poolRepost(i)
}

// place copies a message into receive seq and completes it (part of a
// multi-receive buffer stays posted).
func (ep *Endpoint) place(seq uint64, payload []byte, tag, data uint64, src Addr, f Flags) {
	op := &ep.rx.ops[seq]
	if op.flags&FlagMultiRecv != 0 {
		used := int(op.ignore) // a multi-receive keeps its fill level here
		part := op.buf[used:]
		n := copy(part, payload)
		st := StatusOK
		if n < len(payload) {
			st = StatusTruncated
		}
		used += n
		op.ignore = uint64(used)
		release := len(op.buf)-used < ep.minMultiRecv
		if release {
			f |= FlagMultiRecv
			ep.rdm.multi = ep.rdm.multi[1:]
			ep.finishRx(seq, st, n, part[:n], tag, data, src, f)
			return
		}
		ep.report1(op, st, n, part[:n], tag, data, src, f)
		return
	}
	n := copy(op.buf, payload)
	st := StatusOK
	if n < len(payload) {
		st = StatusTruncated
	}
	ep.finishRx(seq, st, len(payload), op.buf[:n], tag, data, src, f)
}

// report1 reports a receive completion without retiring the receive.
func (ep *Endpoint) report1(op *rxOp, st Status, n int, buf []byte, tag, data uint64, src Addr, f Flags) {
	kind := FlagRecv | FlagMsg
	if op.flags&FlagTagged != 0 {
		kind = FlagRecv | FlagTagged
	}
	ep.cntRecv.count(st == StatusOK)
	if ep.rxCQ != nil {
		ep.comp = Completion{Context: op.ctx, Flags: kind | f, Len: n, Buf: buf, Tag: tag, Data: data, Src: src, Status: st}
		ep.rxCQ.push(ep.w.id, &ep.comp)
		ep.rxCQ.signal()
	}
}

// finishRx completes receive seq and frees its slot.
func (ep *Endpoint) finishRx(seq uint64, st Status, n int, buf []byte, tag, data uint64, src Addr, f Flags) {
	ep.report1(&ep.rx.ops[seq], st, n, buf, tag, data, src, f)
	ep.rx.release(seq)
}

// srcOf is the AV index of the peer behind connection c.
func (ep *Endpoint) srcOf(c *rdmConn) Addr {
	if c.src != AddrUnspec {
		if e := ep.av.entry(c.src); e != nil && e.addr == c.remote {
			return c.src
		}
	}
	c.src = ep.av.reverse(c.remote)
	return c.src
}

// rdmReapRx handles what arrived in the pool.
func (ep *Endpoint) rdmReapRx() bool {
	s := ep.rdm
	n := s.rcRQ.Poll(s.vc[:ep.rxCQ.fit(ep.w.id, len(s.vc))])
	for i := 0; i < n; i++ {
		v := &s.vc[i]
		idx := int(v.WRID)
		c := s.byQPN[v.QPN]
		if v.Status != verbs.Success || c == nil {
			if v.Status != verbs.WRFlushErr {
				ep.poolRepost(idx)
			}
			continue
		}
		if v.Opcode == verbs.CompRecvWriteImm {
			ep.cntRWrite.count(true)
			if ep.rxCQ != nil {
				ep.comp = Completion{Flags: FlagRMA | FlagRemoteWrite | FlagRemoteCQData, Len: int(v.ByteLen), Data: uint64(v.Imm), Src: ep.srcOf(c)}
				ep.rxCQ.push(ep.w.id, &ep.comp)
				ep.rxCQ.signal()
			}
			ep.poolRepost(idx)
			continue
		}
		buf := ep.poolBuf(idx)
		if v.ByteLen < rdmHeader {
			ep.poolRepost(idx)
			continue
		}
		h := rdmHdr(buf)
		payload := buf[rdmHeader:v.ByteLen]
		switch h.kind() {
		case rdmMsg, rdmTagged:
			ep.arrive(c, idx, h, payload)
		case rdmAtomicReq:
			ep.executeAtomic(c, idx, h, payload)
		case rdmAtomicResp, rdmDelivered:
			ep.answered(h, payload)
			ep.poolRepost(idx)
		default:
			ep.poolRepost(idx)
		}
	}
	return n > 0
}

// arrive matches a message with a posted receive or queues it as
// unexpected.
func (ep *Endpoint) arrive(c *rdmConn, idx int, h rdmHdr, payload []byte) {
	s := ep.rdm
	src := ep.srcOf(c)
	tag, data := h.tag(), uint64(0)
	var f Flags
	if h.flags()&rdmHasData != 0 {
		data, f = h.data(), FlagRemoteCQData
	}
	q := s.tagged
	if h.kind() == rdmMsg {
		q, tag = s.untagged, 0
		if len(s.multi) > 0 {
			ep.place(s.multi[0], payload, 0, data, src, f)
			ep.delivered(c, idx, h)
			return
		}
	}
	if r, ok := q.Arrive(uint64(src), tag); ok {
		ep.place(r.Cookie, payload, tag, data, src, f)
		ep.delivered(c, idx, h)
		return
	}
	_ = q.Unexpected(match.Msg{Src: uint64(src), Tag: tag, Len: len(payload), Data: data, Flags: uint32(h.flags()),
		Cookie: uint64(c.qp.QPN())<<32 | uint64(idx)})
}

// delivered acknowledges a placed message if its sender asked, then
// gives its buffer back.
func (ep *Endpoint) delivered(c *rdmConn, idx int, h rdmHdr) {
	if h.flags()&rdmAckReq != 0 {
		ep.answer(c, idx, rdmDelivered, h.reqID(), 0, 0, 0)
		return
	}
	ep.poolRepost(idx)
}

// executeAtomic runs a provider-executed atomic on the target memory and
// answers with the old values.
func (ep *Endpoint) executeAtomic(c *rdmConn, idx int, h rdmHdr, payload []byte) {
	n := h.operandLen()
	k := amo.Kind(h.akind())
	op := amo.Op(h.aop())
	status := uint8(StatusOK)
	var operand, compare []byte
	if op != amo.AtomicRead {
		if len(payload) < n || k == amo.Compare && len(payload) < 2*n {
			status = uint8(StatusRemoteOp)
		} else {
			operand = payload[:n]
			if k == amo.Compare {
				compare = payload[n : 2*n]
			}
		}
	}
	buf := ep.poolBuf(idx)
	resOff := rdmHeader + 2*n
	if status == uint8(StatusOK) && resOff+n > len(buf) {
		status = uint8(StatusRemoteOp)
	}
	resLen := 0
	if status == uint8(StatusOK) {
		need := mr.RemoteAtomic
		if op == amo.AtomicRead {
			need = mr.RemoteRead
		}
		dst, err := ep.d.dev.MRs().Remote(h.key(), h.raddr(), uint32(n), need)
		var result []byte
		if k != amo.Base {
			result = buf[resOff : resOff+n]
			resLen = n
		}
		switch {
		case err != nil:
			status, resLen = uint8(StatusRemoteAccess), 0
		case amo.Apply(op, amo.Datatype(h.adt()), k, dst, operand, compare, result) != nil:
			status, resLen = uint8(StatusRemoteOp), 0
		}
	}
	ep.answer(c, idx, rdmAtomicResp, h.reqID(), status, resOff, resLen)
}

// answer sends a response from pool buffer idx back on c: the header, and
// resLen bytes at resOff of the same buffer. The buffer is reposted when
// the send completes.
func (ep *Endpoint) answer(c *rdmConn, idx int, kind uint8, reqID uint64, status uint8, resOff, resLen int) {
	s := ep.rdm
	buf := ep.poolBuf(idx)
	h := rdmHdr(buf)
	h.set(kind, 0)
	h[5] = status
	binary.LittleEndian.PutUint64(h[40:], reqID)
	binary.LittleEndian.PutUint32(h[48:], uint32(resLen))
	base := s.poolMR.Addr() + uint64(idx*poolBuf)
	s.sgl[0] = mr.SGE{Addr: base, Length: rdmHeader, LKey: s.poolMR.LKey()}
	n := 1
	if resLen > 0 {
		s.sgl[1] = mr.SGE{Addr: base + uint64(resOff), Length: uint32(resLen), LKey: s.poolMR.LKey()}
		n = 2
	}
	s.wr = verbs.SendWR{ID: internalWR | uint64(idx), Op: verbs.OpSend, Flags: verbs.Signaled, SGL: s.sgl[:n]}
	if err := c.qp.PostSend(&s.wr); err != nil {
		ep.poolRepost(idx)
	}
}

// answered completes the operation a response or delivery ack is for.
func (ep *Endpoint) answered(h rdmHdr, payload []byte) {
	id := h.reqID()
	seq := id & 0xffffffff
	if seq >= uint64(len(ep.tx.ops)) || !ep.rdm.inUse[seq] || uint64(ep.rdm.gen[seq]) != id>>32 {
		return // an answer to an operation that is over
	}
	op := &ep.tx.ops[seq]
	if op.rdm.fin || !op.rdm.awaiting {
		return
	}
	st := Status(h.status())
	if h.kind() == rdmAtomicResp && st == StatusOK && op.rdm.res != nil {
		copy(op.rdm.res, payload)
	}
	ep.finishTx(seq, st)
}

// rdmReapTx handles send completions of the endpoint's queue pairs.
func (ep *Endpoint) rdmReapTx() bool {
	s := ep.rdm
	n := s.rcSQ.Poll(s.vc[:ep.txCQ.fit(ep.w.id, len(s.vc))])
	for i := 0; i < n; i++ {
		v := &s.vc[i]
		if v.WRID&internalWR != 0 {
			if v.Status != verbs.WRFlushErr {
				ep.poolRepost(int(v.WRID &^ internalWR))
			}
			continue
		}
		op := &ep.tx.ops[v.WRID]
		op.rdm.sent = true
		st := statusOf(v.Status, false)
		if st != StatusOK && st != StatusCanceled {
			ep.rdmConnFailed(v.QPN)
		}
		if st != StatusOK || !op.rdm.awaiting || op.rdm.fin {
			ep.finishTx(v.WRID, st)
		}
	}
	return n > 0
}

// rdmConnFailed forgets the connection of a queue pair that failed (an RC
// error, such as a bad key's access error, ends its queue pair): what
// was on it completes flushed, and the peer's next operation connects
// again, as RxM does, instead of every later one failing.
func (ep *Endpoint) rdmConnFailed(qpn uint32) {
	c := ep.rdm.byQPN[qpn]
	for _, p := range ep.rdm.peers {
		if p == nil || c == nil || p.conn != c || p.state != peerUp {
			continue
		}
		p.conn, p.state = nil, peerIdle
		if len(p.queue) > 0 && ep.cmStart(p) != nil {
			for _, seq := range p.queue {
				ep.tx.ops[seq].rdm.sent = true
				ep.finishTx(seq, StatusAddrNotAvail)
			}
			p.queue = nil
		}
	}
}

// rdmTeardown destroys the endpoint's queue pairs and cancels what is
// outstanding.
func (ep *Endpoint) rdmTeardown() {
	s := ep.rdm
	for _, c := range s.byQPN {
		ep.d.dev.Destroy(c.qp)
	}
	ep.d.dev.Destroy(s.ud)
	for {
		seq, ok := ep.tx.next()
		if !ok {
			break
		}
		ep.rdm.inUse[seq] = true
	}
	for seq, used := range ep.rdm.inUse {
		if used {
			ep.tx.ops[seq].rdm.sent = true
			ep.finishTx(uint64(seq), StatusCanceled)
		}
	}
	ep.rdmSubmitRx()
	for _, q := range []*match.Queue{s.untagged, s.tagged} {
		q.Flush(func(r match.Recv) { ep.finishRx(r.Cookie, StatusCanceled, 0, nil, 0, 0, AddrUnspec, 0) }, nil)
	}
	for _, seq := range s.multi {
		ep.finishRx(seq, StatusCanceled, 0, nil, 0, 0, AddrUnspec, FlagMultiRecv)
	}
	s.multi = nil
	_ = ep.d.dev.MRs().Deregister(s.poolMR)
	_ = ep.d.dev.MRs().Deregister(s.cmMR)
}

func (ep *Endpoint) rdmStats(st *TransportStats) {
	if ep.rdm == nil {
		return
	}
	for _, c := range ep.rdm.byQPN {
		addRC(st, c.qp.Stats())
	}
}
