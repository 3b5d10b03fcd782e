package fabric

import (
	"errors"
	"net/netip"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// service is the worker's turn at the endpoint: submit what was posted,
// retire what completed. It reports whether it did anything.
func (ep *Endpoint) service() bool {
	if ep.rdm != nil {
		return ep.rdmService()
	}
	did := ep.submitTx()
	if ep.submitRx() {
		did = true
	}
	if ep.reapTx(false) {
		did = true
	}
	if ep.reapRx(false) {
		did = true
	}
	if ep.cntRWrite != nil || ep.cntRRead != nil {
		ep.countRMAEvents()
	}
	return did
}

// countRMAEvents adds to the endpoint's FlagRemoteWrite and
// FlagRemoteRead counters the RDMA writes (without immediate data: those
// complete a receive and are counted there) and reads its queue pair has
// served since it last looked (CapRMAEvent). A counter's count rises
// after the memory is written, so a reader that sees it may read what the
// writes placed.
func (ep *Endpoint) countRMAEvents() {
	if ep.rcqp == nil {
		return
	}
	st := ep.rcqp.Stats()
	if n := st.RemoteWrites - ep.rmaSeen[0]; n > 0 && ep.cntRWrite != nil {
		ep.cntRWrite.Add(n)
	}
	if n := st.RemoteReads - ep.rmaSeen[1]; n > 0 && ep.cntRRead != nil {
		ep.cntRRead.Add(n)
	}
	ep.rmaSeen = [2]uint64{st.RemoteWrites, st.RemoteReads}
}

func (ep *Endpoint) submit() bool {
	if ep.rdm != nil {
		return ep.rdmSubmitTx()
	}
	did := ep.submitTx()
	return ep.submitRx() || did
}

// submitTx hands posted transmit operations to the queue pair.
func (ep *Endpoint) submitTx() bool {
	posted := ep.tx.posted.Load()
	if ep.tx.submitted == posted || ep.qp == nil {
		return false
	}
	if ep.rcqp != nil && ep.rcqp.State() != verbs.StateRTS && ep.rcqp.State() != verbs.StateErr {
		return false // not connected yet
	}
	did := false
	for ep.tx.submitted != posted {
		seq := ep.tx.submitted
		op := &ep.tx.ops[seq&ep.tx.mask]
		wr := &ep.swr
		*wr = verbs.SendWR{ID: seq, Op: op.op, SGL: ep.sgl[:op.nsge], Imm: op.imm,
			RemoteAddr: op.raddr, RKey: op.rkey, CompareAdd: op.cmp, Swap: op.swap}
		// Only operations that report, or count, ask the transport for a
		// completion (and so for an immediate ACK): the others complete
		// with the next one that does, in order, as unsignaled verbs work
		// requests do. One in every half ring is signalled regardless, so
		// that slots come back to an application that reports nothing.
		if op.report || op.cntr != nil || seq-ep.lastSignaled >= uint64(len(ep.tx.ops)/2) {
			wr.Flags = verbs.Signaled
			ep.lastSignaled = seq
		}
		copy(ep.sgl[:], op.sgl[:op.nsge])
		var err error
		if ep.udqp != nil {
			wr.Dest, err = ep.addressHandle(op.dest)
			if err == nil {
				err = ep.udqp.PostSend(wr)
			}
		} else {
			err = ep.rcqp.PostSend(wr)
		}
		if errors.Is(err, verbs.ErrQueueFull) {
			break
		}
		if err != nil {
			// Refused: complete it in order, as failed.
			op.fail = StatusOther
			if errors.Is(err, errAHGone) {
				op.fail = StatusAddrNotAvail
			}
			ep.vsq.Push(&verbs.Completion{WRID: seq, Status: verbs.LocQPOpErr, Opcode: verbs.SendCompOpcode(op.op)})
		}
		ep.tx.submitted++
		did = true
	}
	return did
}

// submitRx hands posted receives to the queue pair.
func (ep *Endpoint) submitRx() bool {
	posted := ep.rx.posted.Load()
	if ep.rx.submitted == posted || ep.qp == nil {
		return false
	}
	for ep.rx.submitted != posted {
		seq := ep.rx.submitted
		op := &ep.rx.ops[seq&ep.rx.mask]
		sgl := ep.sgl[:0]
		if ep.udqp != nil {
			sgl = append(sgl, ep.grhSGE())
		}
		sgl = append(sgl, op.sgl[:op.nsge]...)
		ep.rwr = verbs.RecvWR{ID: seq, SGL: sgl}
		var err error
		if ep.udqp != nil {
			err = ep.udqp.PostRecv(&ep.rwr)
		} else {
			err = ep.rcqp.PostRecv(&ep.rwr)
		}
		if errors.Is(err, verbs.ErrQueueFull) {
			break
		}
		if err != nil {
			ep.vrq.Push(&verbs.Completion{WRID: seq, Status: verbs.WRFlushErr, Opcode: verbs.CompRecv})
		}
		ep.rx.submitted++
	}
	return true
}

// reapTx retires completed transmit operations in order, reporting those
// that asked for a completion (and every failure) to the CQ while it has
// room. all ignores the CQ's room (teardown: what does not fit is lost,
// the application having closed the endpoint without reading).
func (ep *Endpoint) reapTx(all bool) bool {
	if ep.vsq.Len() == 0 {
		return false
	}
	k := len(ep.vc)
	if !all {
		k = ep.txCQ.fit(ep.w.id, k)
	}
	n := ep.vsq.Poll(ep.vc[:k])
	for i := 0; i < n; i++ {
		v := &ep.vc[i]
		// Unsignaled operations before this one completed with it.
		for d := ep.tx.done.Load(); d < v.WRID; d++ {
			ep.tx.ops[d&ep.tx.mask].cntr.count(true)
		}
		op := &ep.tx.ops[v.WRID&ep.tx.mask]
		st := statusOf(v.Status, false)
		if op.fail != StatusOK {
			st = op.fail
		}
		op.cntr.count(st == StatusOK)
		if (op.report || st != StatusOK) && ep.txCQ != nil && ep.txCQ.room(ep.w.id) > 0 {
			ep.comp = Completion{Context: op.ctx, Flags: op.flags, Status: st, Src: AddrUnspec}
			ep.txCQ.push(ep.w.id, &ep.comp)
		}
		ep.tx.done.Store(v.WRID + 1)
	}
	if n > 0 && ep.txCQ != nil {
		ep.txCQ.signal()
	}
	return n > 0
}

// reapRx retires completed receives in order into the CQ.
func (ep *Endpoint) reapRx(all bool) bool {
	if ep.vrq.Len() == 0 {
		return false
	}
	k := len(ep.vc)
	if !all {
		k = ep.rxCQ.fit(ep.w.id, k)
	}
	n := ep.vrq.Poll(ep.vc[:k])
	for i := 0; i < n; i++ {
		v := &ep.vc[i]
		ep.deliverRx(v, &ep.rx.ops[v.WRID&ep.rx.mask])
		ep.rx.done.Store(v.WRID + 1)
	}
	if n > 0 && ep.rxCQ != nil {
		ep.rxCQ.signal()
	}
	return n > 0
}

// deliverRx reports the completion v of receive op to the endpoint's CQ
// and counters.
func (ep *Endpoint) deliverRx(v *verbs.Completion, op *rxOp) {
	st := statusOf(v.Status, true)
	c := &ep.comp
	*c = Completion{Context: op.ctx, Status: st, Src: AddrUnspec}
	length := int(v.ByteLen)
	if ep.udqp != nil && st == StatusOK {
		length -= ud.GRHSize
	}
	switch v.Opcode {
	case verbs.CompRecvWriteImm:
		c.Flags = FlagRMA | FlagRemoteWrite | FlagRemoteCQData
		c.Len = length
		ep.cntRWrite.count(st == StatusOK)
	default:
		c.Flags = FlagRecv | FlagMsg
		c.Len = length
		if st == StatusOK {
			c.Buf = op.buf[:min(length, len(op.buf))]
		}
		ep.cntRecv.count(st == StatusOK)
	}
	if v.Flags&verbs.WithImm != 0 {
		c.Flags |= FlagRemoteCQData
		c.Data = uint64(v.Imm)
	}
	if ep.udqp != nil && ep.info.Caps&CapSource != 0 && st == StatusOK {
		c.Src = ep.av.reverse(Address{IP: netip.AddrFrom16(v.SrcGID).Unmap(), QPN: v.SrcQP})
	}
	if ep.rxCQ != nil && ep.rxCQ.room(ep.w.id) > 0 {
		ep.rxCQ.push(ep.w.id, c)
	}
}

// errAHGone: the destination left the AV between post and submit.
var errAHGone = errors.New("address removed")

// addressHandle returns the UD address handle of AV entry x, built once
// per entry (and again when the entry is reused).
func (ep *Endpoint) addressHandle(x Addr) (*verbs.AddressHandle, error) {
	e := ep.av.entry(x)
	if e == nil {
		return nil, errAHGone
	}
	if uint64(x) >= uint64(len(ep.ahs)) {
		ep.ahs = append(ep.ahs, make([]ahEntry, int(x)+1-len(ep.ahs))...)
	}
	c := &ep.ahs[x]
	if c.ah == nil || c.gen != e.gen {
		p := e.path
		p.SrcPort = wire.SourcePort(ep.qp.QPN(), e.addr.QPN)
		qkey := ep.qkey
		if e.hasQKey {
			qkey = e.qkey
		}
		ah, err := verbs.NewAddressHandle(p, e.addr.QPN, qkey)
		if err != nil {
			return nil, err
		}
		*c = ahEntry{gen: e.gen, ah: ah}
	}
	return c.ah, nil
}

// grhSGE is where a UD receive's GRH goes: the 40 bytes after the inject
// area, shared by all receives (nobody reads them).
func (ep *Endpoint) grhSGE() (s mr.SGE) {
	off := len(ep.tx.ops) * slotArea
	s.Addr = ep.injectMR.Addr() + uint64(off)
	s.Length = ud.GRHSize
	s.LKey = ep.injectMR.LKey()
	return s
}
