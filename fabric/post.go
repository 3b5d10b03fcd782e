package fabric

import (
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// Msg describes a message operation with several buffers (SendMsg,
// RecvMsg, TSendMsg, TRecvMsg). Callers may reuse one Msg: posts copy it.
type Msg struct {
	IOV     [][]byte
	Desc    []Desc
	Addr    Addr
	Context uint64
	// Data is remote CQ data (with FlagRemoteCQData).
	Data uint64
	// Tag and Ignore: tagged operations.
	Tag, Ignore uint64
}

// single returns m's one buffer and its descriptor (RDM messages, and
// injects, have at most one).
func (m *Msg) single() ([]byte, Desc) {
	var b []byte
	var d Desc
	if len(m.IOV) == 1 {
		b = m.IOV[0]
	}
	if len(m.Desc) > 0 {
		d = m.Desc[0]
	}
	return b, d
}

// RMAMsg describes an RMA operation with several local buffers.
type RMAMsg struct {
	IOV     [][]byte
	Desc    []Desc
	Addr    Addr
	RAddr   uint64
	Key     uint64
	Context uint64
	Data    uint64
}

// beginTx checks the endpoint and takes a transmit slot, holding the
// transmit lock; commitTx publishes it, abortTx gives it up.
func (ep *Endpoint) beginTx() (*txOp, uint64, error) {
	ep.lockTx()
	switch ep.state.Load() {
	case epEnabled:
		if ep.typ == EPMsg {
			ep.unlockTx()
			return nil, 0, ErrNotConnected
		}
	case epConnected:
	case epCreated:
		ep.unlockTx()
		return nil, 0, ErrNotConnected
	default:
		ep.unlockTx()
		return nil, 0, ErrClosed
	}
	op, seq, ok := ep.tx.slot()
	if !ok {
		ep.unlockTx()
		return nil, 0, ErrAgain
	}
	*op = txOp{dest: AddrUnspec}
	ep.txTaken = seq
	return op, seq, nil
}

func (ep *Endpoint) commitTx(seq uint64) {
	ep.tx.publish(seq)
	ep.unlockTx()
	ep.w.kick()
}

func (ep *Endpoint) abortTx(err error) error {
	ep.tx.unpublish(ep.txTaken)
	ep.unlockTx()
	return err
}

// gather fills op's scatter/gather list from iov and desc.
func gather(op *[MaxIOV]mr.SGE, n *uint8, iov [][]byte, desc []Desc, limit int) error {
	if len(iov) > limit || len(desc) < len(iov) && !(len(desc) == 0 && totalLen(iov) == 0) {
		return ErrInvalid
	}
	k := 0
	for i, b := range iov {
		if len(b) == 0 {
			continue
		}
		if err := sge(b, desc[i], &op[k]); err != nil {
			return err
		}
		k++
	}
	*n = uint8(k)
	return nil
}

func totalLen(iov [][]byte) int {
	n := 0
	for _, b := range iov {
		n += len(b)
	}
	return n
}

// sendFlags turns a post's flags into whether it reports a completion and
// the completion flags it reports.
func (ep *Endpoint) report(f Flags) bool {
	if f&FlagInject != 0 {
		return false
	}
	return !ep.selTx || f&FlagCompletion != 0
}

// Send sends b (inside desc's region) to dst (AddrUnspec on a connected
// endpoint). ctx comes back in the completion.
func (ep *Endpoint) Send(b []byte, desc Desc, dst Addr, ctx uint64) error {
	return ep.send(b, desc, dst, ctx, 0, 0)
}

// SendData sends b with 4 bytes of remote CQ data, which the receiver's
// completion carries (FlagRemoteCQData).
func (ep *Endpoint) SendData(b []byte, desc Desc, data uint64, dst Addr, ctx uint64) error {
	return ep.send(b, desc, dst, ctx, data, FlagRemoteCQData)
}

// Inject sends up to InjectSize bytes, copied before it returns: b may be
// reused at once. It reports no completion (counters still count it).
func (ep *Endpoint) Inject(b []byte, dst Addr) error {
	return ep.send(b, Desc{}, dst, 0, 0, FlagInject)
}

// InjectData is Inject with remote CQ data.
func (ep *Endpoint) InjectData(b []byte, data uint64, dst Addr) error {
	return ep.send(b, Desc{}, dst, 0, data, FlagInject|FlagRemoteCQData)
}

func (ep *Endpoint) send(b []byte, desc Desc, dst Addr, ctx, data uint64, f Flags) error {
	if ep.rdm != nil {
		return ep.rdmSend(b, desc, dst, ctx, data, 0, f)
	}
	op, seq, err := ep.beginTx()
	if err != nil {
		return err
	}
	if err := ep.fillSend(op, seq, b, desc, dst, ctx, data, f); err != nil {
		return ep.abortTx(err)
	}
	ep.commitTx(seq)
	return nil
}

// fillSend describes a send in op: the buffer (copied into the inject
// area for FlagInject), the destination and the completion it reports.
func (ep *Endpoint) fillSend(op *txOp, seq uint64, b []byte, desc Desc, dst Addr, ctx, data uint64, f Flags) error {
	if err := ep.checkDest(dst); err != nil {
		return err
	}
	if ep.typ == EPDgram && len(b) > ep.info.EP.MaxMsgSize || len(b) > MaxMsgSize {
		return ErrInvalid
	}
	op.ctx, op.dest, op.op = ctx, dst, verbs.OpSend
	if f&FlagRemoteCQData != 0 {
		op.op, op.imm = verbs.OpSendImm, uint32(data)
	}
	if f&FlagInject != 0 {
		if err := ep.injectSGE(op, seq, b); err != nil {
			return err
		}
	} else if err := gather(&op.sgl, &op.nsge, [][]byte{b}, []Desc{desc}, 1); err != nil {
		return err
	}
	op.report = ep.report(f)
	op.flags = FlagSend | FlagMsg
	op.cntr = ep.cntSend
	return nil
}

// injectSGE copies b into the slot's inject area.
func (ep *Endpoint) injectSGE(op *txOp, seq uint64, b []byte) error {
	if len(b) > InjectSize {
		return ErrInvalid
	}
	op.nsge = 0
	if len(b) == 0 {
		return nil
	}
	off := int(seq&ep.tx.mask)*slotArea + slotInject
	copy(ep.injectBuf[off:], b)
	op.sgl[0] = mr.SGE{Addr: ep.injectMR.Addr() + uint64(off), Length: uint32(len(b)), LKey: ep.injectMR.LKey()}
	op.nsge = 1
	return nil
}

// checkDest checks a destination: AddrUnspec on MSG endpoints, an AV
// entry elsewhere.
func (ep *Endpoint) checkDest(dst Addr) error {
	if ep.typ == EPMsg {
		return nil
	}
	if ep.av.entry(dst) == nil {
		return ErrAddrNotAvail
	}
	return nil
}

// SendMsg sends the buffers of m as one message. Flags: FlagRemoteCQData
// (send m.Data), FlagInject, FlagCompletion (with selective completion),
// FlagTransmitComplete, FlagDeliveryComplete, FlagFence, FlagMore.
func (ep *Endpoint) SendMsg(m *Msg, f Flags) error {
	if ep.rdm != nil {
		if len(m.IOV) > 1 {
			return ErrInvalid
		}
		b, d := m.single()
		return ep.rdmSend(b, d, m.Addr, m.Context, m.Data, 0, f)
	}
	op, seq, err := ep.beginTx()
	if err != nil {
		return err
	}
	if f&FlagInject != 0 {
		// An inject copies one buffer; a gather would be a copy of each.
		if len(m.IOV) > 1 {
			return ep.abortTx(ErrInvalid)
		}
		b, _ := m.single()
		err = ep.fillSend(op, seq, b, Desc{}, m.Addr, m.Context, m.Data, f)
	} else {
		err = ep.fillSend(op, seq, nil, Desc{}, m.Addr, m.Context, m.Data, f)
		if err == nil && totalLen(m.IOV) > ep.info.EP.MaxMsgSize {
			err = ErrInvalid
		}
		if err == nil {
			err = gather(&op.sgl, &op.nsge, m.IOV, m.Desc, ep.info.TX.IOVLimit)
		}
	}
	if err != nil {
		return ep.abortTx(err)
	}
	ep.commitTx(seq)
	return nil
}

// Recv posts b (inside desc's region) to receive a message. src filters
// the sender on endpoints with CapDirectedRecv (AddrUnspec: any).
func (ep *Endpoint) Recv(b []byte, desc Desc, src Addr, ctx uint64) error {
	if ep.rdm != nil {
		return ep.rdmRecv(b, desc, src, ctx, 0, 0, FlagMsg)
	}
	return ep.recv([][]byte{b}, []Desc{desc}, ctx)
}

// RecvMsg posts the buffers of m for one message. Flags: FlagMultiRecv
// (RDM: m.IOV[0] takes several messages, each completing with its part as
// Buf; the last completion carries FlagMultiRecv).
func (ep *Endpoint) RecvMsg(m *Msg, f Flags) error {
	if ep.rdm != nil {
		if len(m.IOV) != 1 {
			return ErrInvalid
		}
		var d Desc
		if len(m.Desc) > 0 {
			d = m.Desc[0]
		}
		return ep.rdmRecv(m.IOV[0], d, m.Addr, m.Context, 0, 0, FlagMsg|f&FlagMultiRecv)
	}
	if f&FlagMultiRecv != 0 {
		return ErrNotSupported
	}
	return ep.recv(m.IOV, m.Desc, m.Context)
}

func (ep *Endpoint) recv(iov [][]byte, desc []Desc, ctx uint64) error {
	if ep.srx != nil {
		return fmt.Errorf("%w: the endpoint receives through its shared receive context", ErrInvalid)
	}
	ep.lockRx()
	defer ep.unlockRx()
	if st := ep.state.Load(); st != epEnabled && st != epConnected {
		if st == epCreated {
			return ErrNotConnected
		}
		return ErrClosed
	}
	op, seq, ok := ep.rx.slot()
	if !ok {
		return ErrAgain
	}
	*op = rxOp{ctx: ctx, src: AddrUnspec}
	if err := gather(&op.sgl, &op.nsge, iov, desc, ep.info.RX.IOVLimit); err != nil {
		ep.rx.unpublish(seq)
		return err
	}
	if len(iov) > 0 {
		op.buf = iov[0]
	}
	ep.rx.publish(seq)
	ep.w.kick()
	return nil
}

// Write writes b to the peer's memory at raddr under key.
func (ep *Endpoint) Write(b []byte, desc Desc, dst Addr, raddr, key, ctx uint64) error {
	return ep.rma(verbs.OpWrite, b, desc, dst, raddr, key, ctx, 0, 0)
}

// WriteData writes b and delivers data to the peer's receive CQ: it
// consumes one of the peer's posted receives (which completes with
// FlagRemoteWrite|FlagRemoteCQData), as in verbs.
func (ep *Endpoint) WriteData(b []byte, desc Desc, data uint64, dst Addr, raddr, key, ctx uint64) error {
	return ep.rma(verbs.OpWriteImm, b, desc, dst, raddr, key, ctx, data, 0)
}

// InjectWrite writes up to InjectSize bytes, copied before it returns; no
// completion.
func (ep *Endpoint) InjectWrite(b []byte, dst Addr, raddr, key uint64) error {
	return ep.rma(verbs.OpWrite, b, Desc{}, dst, raddr, key, 0, 0, FlagInject)
}

// InjectWriteData is InjectWrite with remote CQ data.
func (ep *Endpoint) InjectWriteData(b []byte, data uint64, dst Addr, raddr, key uint64) error {
	return ep.rma(verbs.OpWriteImm, b, Desc{}, dst, raddr, key, 0, data, FlagInject)
}

// Read reads len(b) bytes of the peer's memory at raddr under key into b.
func (ep *Endpoint) Read(b []byte, desc Desc, src Addr, raddr, key, ctx uint64) error {
	return ep.rma(verbs.OpRead, b, desc, src, raddr, key, ctx, 0, 0)
}

// WriteMsg writes the buffers of m; flags as SendMsg (FlagRemoteCQData:
// WriteData).
func (ep *Endpoint) WriteMsg(m *RMAMsg, f Flags) error {
	op := verbs.OpWrite
	if f&FlagRemoteCQData != 0 {
		op = verbs.OpWriteImm
	}
	return ep.rmaV(op, m.IOV, m.Desc, m.Addr, m.RAddr, m.Key, m.Context, m.Data, f)
}

// ReadMsg reads into the buffers of m.
func (ep *Endpoint) ReadMsg(m *RMAMsg, f Flags) error {
	return ep.rmaV(verbs.OpRead, m.IOV, m.Desc, m.Addr, m.RAddr, m.Key, m.Context, 0, f)
}

func (ep *Endpoint) rma(o verbs.Opcode, b []byte, desc Desc, dst Addr, raddr, key, ctx, data uint64, f Flags) error {
	if f&FlagInject != 0 {
		return ep.rmaV(o, [][]byte{b}, nil, dst, raddr, key, ctx, data, f)
	}
	return ep.rmaV(o, [][]byte{b}, []Desc{desc}, dst, raddr, key, ctx, data, f)
}

func (ep *Endpoint) rmaV(o verbs.Opcode, iov [][]byte, desc []Desc, dst Addr, raddr, key, ctx, data uint64, f Flags) error {
	if ep.typ == EPDgram || ep.info.Caps&CapRMA == 0 {
		return ErrNotSupported
	}
	if key > 0xffffffff {
		return ErrInvalid
	}
	op, seq, err := ep.beginTx()
	if err != nil {
		return err
	}
	if err := ep.checkDest(dst); err != nil {
		return ep.abortTx(err)
	}
	op.ctx, op.dest, op.op, op.raddr, op.rkey, op.imm = ctx, dst, o, raddr, uint32(key), uint32(data)
	if f&FlagInject != 0 {
		if len(iov) != 1 || o == verbs.OpRead {
			return ep.abortTx(ErrInvalid)
		}
		if err := ep.injectSGE(op, seq, iov[0]); err != nil {
			return ep.abortTx(err)
		}
	} else if err := gather(&op.sgl, &op.nsge, iov, desc, ep.info.TX.IOVLimit); err != nil {
		return ep.abortTx(err)
	}
	op.report = ep.report(f)
	if o == verbs.OpRead {
		op.flags, op.cntr = FlagRMA|FlagRead, ep.cntRead
	} else {
		op.flags, op.cntr = FlagRMA|FlagWrite, ep.cntWrite
	}
	ep.commitTx(seq)
	return nil
}
