// Package ud implements the InfiniBand Unreliable Datagram transport as a
// pure state machine: single-packet messages addressed per work request,
// Q_Key checked at the receiver, and the sender's address delivered with
// each receive as a GRH, as verbs does.
package ud

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// GRHSize is the room a UD receive buffer keeps in front of the payload for
// the sender's network header (the IB GRH, or on RoCEv2 over IPv4, 20 zero
// bytes and the IPv4 header).
const GRHSize = 40

// qkeyFromQP, set in a work request's Q_Key, asks for the QP's own Q_Key.
const qkeyFromQP = 1 << 31

// Config describes a new queue pair.
type Config struct {
	QPN     uint32
	MRs     *mr.Table
	SendCQ  *verbs.CQ
	RecvCQ  *verbs.CQ
	RQ      *verbs.RecvQueue
	SQDepth int // default 256
}

// Stats count what a queue pair has seen and done.
type Stats struct {
	TxPackets, RxPackets uint64
	QKeyViolations       uint64 // received with the wrong Q_Key: dropped
	NoRecv               uint64 // received with no receive posted: dropped
	Dropped              uint64 // wrong state, P_Key, opcode
}

type sendWQE struct {
	wr     verbs.SendWR
	sgl    [verbs.MaxSGE]mr.SGE
	ah     verbs.AddressHandle
	length uint32
}

// QP is an unreliable datagram queue pair.
type QP struct {
	qpn    uint32
	attr   verbs.QPAttr
	mrs    *mr.Table
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	rq     *verbs.RecvQueue

	sq         []sendWQE
	mask       uint32
	head, tail uint32
	psn        psn.PSN

	// notify, set by the engine, says the queue pair has new work.
	notify func()

	stats Stats
}

// SetNotify installs the function PostSend calls to tell the engine that
// the queue pair has work (engine.Notifier).
func (q *QP) SetNotify(f func()) { q.notify = f }

// New returns a queue pair in the RESET state.
func New(cfg Config) (*QP, error) {
	if cfg.MRs == nil || cfg.SendCQ == nil || cfg.RecvCQ == nil || cfg.RQ == nil {
		return nil, errors.New("ud: memory table, completion queues and receive queue are required")
	}
	n := 1
	for n < max(cfg.SQDepth, 256) {
		n <<= 1
	}
	q := &QP{
		qpn:    cfg.QPN & psn.Mask,
		mrs:    cfg.MRs,
		sendCQ: cfg.SendCQ,
		recvCQ: cfg.RecvCQ,
		rq:     cfg.RQ,
		sq:     make([]sendWQE, n),
		mask:   uint32(n - 1),
	}
	q.attr.PKey = wire.DefaultPKey
	q.attr.PathMTU = 1024
	return q, nil
}

// QPN is the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// State is the current state.
func (q *QP) State() verbs.QPState { return q.attr.State }

// Stats returns the counters.
func (q *QP) Stats() Stats { return q.stats }

// Modify changes the state, P_Key, Q_Key, path MTU (the largest message)
// and send PSN.
func (q *QP) Modify(a *verbs.QPAttr, mask verbs.AttrMask) error {
	if err := q.attr.CheckModify(a, mask); err != nil {
		return err
	}
	prev := q.attr.State
	if mask&verbs.AttrState != 0 && a.State == verbs.StateInit && prev == verbs.StateReset && mask&verbs.AttrQKey == 0 {
		return fmt.Errorf("%w: RESET to INIT needs the Q_Key", verbs.ErrBadAttr)
	}
	q.attr.Apply(a, mask)
	if mask&verbs.AttrSQPSN != 0 {
		q.psn = psn.PSN(q.attr.SQPSN)
	}
	if mask&verbs.AttrState != 0 {
		switch {
		case a.State == verbs.StateErr && prev != verbs.StateErr:
			q.flush()
		case a.State == verbs.StateReset:
			q.head = q.tail
		}
	}
	return nil
}

func (q *QP) flush() {
	for ; q.head != q.tail; q.head++ {
		w := &q.sq[q.head&q.mask]
		q.sendCQ.Push(&verbs.Completion{WRID: w.wr.ID, Status: verbs.WRFlushErr, Opcode: verbs.CompSend, QPN: q.qpn})
	}
	if !q.rq.Shared() {
		q.rq.Flush(q.recvCQ, q.qpn)
	}
}

// PostSend queues a datagram. It must name its destination and fit in one
// path-MTU packet.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	if q.attr.State != verbs.StateRTS {
		return fmt.Errorf("ud: post send: %w (%v)", verbs.ErrBadState, q.attr.State)
	}
	if wr.Op != verbs.OpSend && wr.Op != verbs.OpSendImm {
		return fmt.Errorf("ud: post send: %v is not a datagram operation", wr.Op)
	}
	if wr.Dest == nil {
		return errors.New("ud: post send: no address handle")
	}
	if len(wr.SGL) > verbs.MaxSGE {
		return verbs.ErrTooManySGE
	}
	length := mr.SGLLen(wr.SGL)
	if length > q.attr.PathMTU {
		return fmt.Errorf("ud: post send: %d bytes over the path MTU %d", length, q.attr.PathMTU)
	}
	for _, s := range wr.SGL {
		if _, err := q.mrs.Local(s.LKey, s.Addr, s.Length, 0); err != nil {
			return fmt.Errorf("ud: post send: local buffer: %w", err)
		}
	}
	if q.tail-q.head >= uint32(len(q.sq)) {
		return verbs.ErrQueueFull
	}
	w := &q.sq[q.tail&q.mask]
	w.wr = *wr
	n := copy(w.sgl[:], wr.SGL)
	w.wr.SGL = w.sgl[:n]
	w.ah = *wr.Dest
	w.wr.Dest = &w.ah
	w.length = uint32(length)
	q.tail++
	if q.notify != nil {
		q.notify()
	}
	return nil
}

// PostRecv queues a receive. Its buffer needs GRHSize bytes in front of the
// largest payload expected.
func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	if q.attr.State == verbs.StateReset {
		return fmt.Errorf("ud: post recv: %w (%v)", verbs.ErrBadState, q.attr.State)
	}
	return q.rq.Post(wr)
}

// HasWork reports whether datagrams wait to be sent.
func (q *QP) HasWork() bool { return q.attr.State == verbs.StateRTS && q.head != q.tail }

// Deadline is always 0: a datagram queue pair runs no timers.
func (q *QP) Deadline() int64 { return 0 }

// Transmit sends queued datagrams while b has room. Each completes as soon
// as it is handed to the link, as unreliable service does.
func (q *QP) Transmit(now int64, b *link.Batch) {
	if q.attr.State != verbs.StateRTS {
		return
	}
	for q.head != q.tail {
		buf := b.Next()
		if buf == nil {
			return
		}
		w := &q.sq[q.head&q.mask]
		op := wire.UDSendOnly
		if w.wr.Op == verbs.OpSendImm {
			op = wire.UDSendOnlyImm
		}
		info := op.Info()
		hl := w.ah.Path.HeaderLen()
		n := int(w.length)
		pad := -n & 3
		f := buf[:hl+info.HeaderLen+n+pad+wire.ICRCSize]
		wire.BTH(f[hl:]).Encode(&wire.BTHFields{
			Opcode:    op,
			Solicited: w.wr.Flags&verbs.Solicited != 0,
			PadCount:  uint8(pad),
			PKey:      q.attr.PKey,
			DestQP:    w.ah.DestQPN,
			PSN:       uint32(q.psn),
		})
		qkey := w.ah.QKey
		if qkey&qkeyFromQP != 0 {
			qkey = q.attr.QKey
		}
		wire.DETH(f[hl+info.DETH:]).Encode(qkey, q.qpn)
		if info.ImmDt != 0 {
			wire.ImmDt(f[hl+info.ImmDt:]).Encode(w.wr.Imm)
		}
		p := hl + info.HeaderLen
		st := verbs.Success
		if _, err := q.mrs.Gather(f[p:p+n], w.wr.SGL, 0); err != nil {
			st = verbs.LocProtErr
		} else {
			clear(f[p+n : p+n+pad])
			w.ah.Path.Finish(f)
			b.Commit(len(f))
			q.psn = q.psn.Next()
			q.stats.TxPackets++
		}
		if st != verbs.Success || w.wr.Flags&verbs.Signaled != 0 {
			c := verbs.Completion{WRID: w.wr.ID, Status: st, Opcode: verbs.CompSend, QPN: q.qpn}
			if st == verbs.Success {
				c.ByteLen = w.length
			}
			q.sendCQ.Push(&c)
		}
		q.head++
	}
}

// Receive handles a datagram addressed to this queue pair. The caller has
// parsed it, checked its ICRC and matched its destination QPN.
func (q *QP) Receive(p *wire.Packet, now int64) {
	if q.attr.State != verbs.StateRTR && q.attr.State != verbs.StateRTS {
		q.stats.Dropped++
		return
	}
	if p.Info.Mask&wire.MaskUD == 0 || p.BTH().PKey()&0x7fff != q.attr.PKey&0x7fff {
		q.stats.Dropped++
		return
	}
	deth := p.DETH()
	if deth.QKey() != q.attr.QKey {
		q.stats.QKeyViolations++
		return
	}
	slot := q.rq.Peek()
	if slot == nil {
		q.stats.NoRecv++ // unreliable: the datagram is lost, as on a NIC
		return
	}
	q.stats.RxPackets++
	c := verbs.Completion{
		WRID:   slot.ID,
		Opcode: verbs.CompRecv,
		Flags:  verbs.GRH,
		QPN:    q.qpn,
		SrcQP:  deth.SrcQP(),
		SrcGID: p.Src().As16(),
	}
	if p.Info.Mask&wire.MaskImmDt != 0 {
		c.Flags |= verbs.WithImm
		c.Imm = p.ImmDt().Imm()
	}
	if slot.Len() < GRHSize+len(p.Payload) {
		c.Status = verbs.LocLenErr
	} else {
		var grh [GRHSize]byte
		if p.IPv6 {
			copy(grh[:], p.Frame[p.L3:p.L3+wire.IPv6Size])
		} else {
			copy(grh[20:], p.Frame[p.L3:p.L3+wire.IPv4MinSize])
		}
		_, err1 := q.mrs.Scatter(slot.SGL(), 0, grh[:])
		_, err2 := q.mrs.Scatter(slot.SGL(), GRHSize, p.Payload)
		if err1 != nil || err2 != nil {
			c.Status = verbs.LocProtErr
		} else {
			c.ByteLen = uint32(GRHSize + len(p.Payload))
		}
	}
	q.recvCQ.Push(&c)
	q.rq.Pop()
}
