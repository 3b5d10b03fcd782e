package fabric

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
)

// Endpoint states.
const (
	epCreated int32 = iota
	epEnabled
	epConnected
	epShutdown
	epClosed
)

// dgramQKey is the Q_Key of DGRAM endpoints (RDMA-CM's RDMA_UDP_QKEY).
const dgramQKey = 0x01234567

// Endpoint is a communication endpoint: MSG (connected, on an RC queue
// pair), DGRAM (on a UD queue pair) or RDM (reliable, unconnected: RC
// connections to each peer made on first use). Open it with
// Domain.Endpoint, Bind its CQs (and AV, counters, EQ), Enable it, then
// post operations; each completes on the bound CQ with the uint64
// context it was posted with.
//
// A buffer passed to a post belongs to the provider until the operation
// completes, except with Inject, which copies it.
type Endpoint struct {
	d    *Domain
	w    *worker
	info Info
	typ  EPType
	safe bool

	txMu, rxMu sync.Mutex
	state      atomic.Int32

	txCQ, rxCQ          *CQ
	selTx, selRx        bool
	cntSend, cntRecv    *Counter
	cntRead, cntWrite   *Counter
	cntRRead, cntRWrite *Counter
	// rmaSeen are the queue pair's remote writes and reads counted so far
	// (countRMAEvents).
	rmaSeen             [2]uint64
	av                  *AV
	eq                  *EQ
	tx                  opRing[txOp]
	txTaken             uint64 // the slot beginTx took
	lastSignaled        uint64 // the last transmit asking for a completion (worker)
	rx                  opRing[rxOp]
	injectMR, scratchMR *mr.Region
	injectBuf           []byte
	minMultiRecv        int
	qkey                uint32
	rcOpts              QPOptions // MSG: OptTimeout, OptRetryCount

	// Owned by the worker once enabled.
	qp   engine.QP
	rcqp *rc.QP
	udqp *ud.QP
	vsq  *verbs.CQ
	vrq  *verbs.CQ
	swr  verbs.SendWR
	rwr  verbs.RecvWR
	sgl  [MaxIOV + 1]mr.SGE
	vc   [32]verbs.Completion
	comp Completion
	ahs  []ahEntry
	psn  uint32
	conn cmLink
	// cmKind is the connection manager Connect uses (OptCM).
	cmKind int
	rdm    *rdmState
	srx    *SharedRx
	bound  []interface{ release() }
}

// txOp is a posted transmit operation.
type txOp struct {
	ctx    uint64
	op     verbs.Opcode
	sgl    [MaxIOV]mr.SGE
	nsge   uint8
	report bool
	flags  Flags
	cntr   *Counter
	dest   Addr
	raddr  uint64
	rkey   uint32
	imm    uint32
	cmp    uint64
	swap   uint64
	// fail is the status of an operation the worker refused at submit.
	fail Status
	// RDM: the protocol header and software atomic facts.
	rdm rdmTx
}

// rxOp is a posted receive.
type rxOp struct {
	ctx    uint64
	sgl    [MaxIOV]mr.SGE
	nsge   uint8
	buf    []byte
	src    Addr
	tag    uint64
	ignore uint64
	flags  Flags
}

type ahEntry struct {
	gen uint32
	ah  *verbs.AddressHandle
}

// Endpoint opens an endpoint of the type info names (info from GetInfo,
// or from an EventConnReq to accept a connection).
func (d *Domain) Endpoint(info *Info) (*Endpoint, error) {
	if info == nil || info.EP.Type == EPUnspec {
		return nil, fmt.Errorf("opening an endpoint: %w: no endpoint type", ErrInvalid)
	}
	if info.TX.Size <= 0 || info.RX.Size <= 0 || info.TX.Size > maxQueueSize || info.RX.Size > maxQueueSize {
		return nil, fmt.Errorf("opening an endpoint: %w: queue sizes %d/%d", ErrInvalid, info.TX.Size, info.RX.Size)
	}
	if err := d.refs.add(); err != nil {
		return nil, err
	}
	ep := &Endpoint{d: d, w: d.pickWorker(), info: *info, typ: info.EP.Type, safe: d.safe}
	// RDM operations finish in any order (peers, tags): their slots are
	// pooled.
	ep.tx.init(info.TX.Size, info.EP.Type == EPRDM)
	ep.rx.init(info.RX.Size, info.EP.Type == EPRDM)
	ep.minMultiRecv, ep.qkey = info.EP.MaxMsgSize, dgramQKey
	ep.injectBuf = make([]byte, len(ep.tx.ops)*slotArea+ud.GRHSize)
	r, err := d.dev.MRs().Register(ep.injectBuf, mr.LocalWrite)
	if err != nil {
		d.refs.done()
		return nil, fmt.Errorf("opening an endpoint: %w", err)
	}
	ep.injectMR = r
	return ep, nil
}

// Worker is the domain worker (queue) that serves the endpoint.
func (ep *Endpoint) Worker() int { return ep.w.id }

// Type is the endpoint's type.
func (ep *Endpoint) Type() EPType { return ep.typ }

// Info is the endpoint's offer.
func (ep *Endpoint) Info() Info { return ep.info }

// Bind attaches a CQ (flags FlagSend, FlagRecv, both when neither, and
// FlagSelectiveCompletion), a Counter (FlagSend, FlagRecv, FlagRead,
// FlagWrite, FlagRemoteRead, FlagRemoteWrite), an AV or an EQ. Bind before
// Enable.
func (ep *Endpoint) Bind(obj any, flags Flags) error {
	if ep.state.Load() != epCreated {
		return fmt.Errorf("binding: %w: the endpoint is enabled or closed", ErrInvalid)
	}
	switch o := obj.(type) {
	case *CQ:
		if o.d != ep.d {
			return fmt.Errorf("binding a CQ: %w: another domain's", ErrInvalid)
		}
		if flags&(FlagSend|FlagRecv) == 0 {
			flags |= FlagSend | FlagRecv
		}
		if flags&FlagSend != 0 && ep.txCQ != nil || flags&FlagRecv != 0 && ep.rxCQ != nil {
			return fmt.Errorf("binding a CQ: %w: a CQ is bound already", ErrInvalid)
		}
		need := 0
		if flags&FlagSend != 0 {
			need += len(ep.tx.ops)
		}
		if flags&FlagRecv != 0 {
			need += len(ep.rx.ops)
		}
		o.refs.mu.Lock()
		fits := o.committed+need <= o.size
		if fits {
			o.committed += need
		}
		o.refs.mu.Unlock()
		if !fits {
			return fmt.Errorf("binding a CQ: %w: the CQ is too small: %d entries, %d operations outstanding at most with this endpoint's",
				ErrInvalid, o.size, o.committed+need)
		}
		if err := o.refs.add(); err != nil {
			o.uncommit(need)
			return err
		}
		ep.bound = append(ep.bound, cqBinding{o, need})
		if flags&FlagSend != 0 {
			ep.txCQ, ep.selTx = o, flags&FlagSelectiveCompletion != 0
		}
		if flags&FlagRecv != 0 {
			ep.rxCQ, ep.selRx = o, flags&FlagSelectiveCompletion != 0
		}
	case *Counter:
		if o.d != ep.d {
			return fmt.Errorf("binding a counter: %w: another domain's", ErrInvalid)
		}
		if flags&(FlagSend|FlagRecv|FlagRead|FlagWrite|FlagRemoteRead|FlagRemoteWrite) == 0 {
			return fmt.Errorf("binding a counter: %w: no event flags", ErrInvalid)
		}
		if err := o.refs.add(); err != nil {
			return err
		}
		ep.bound = append(ep.bound, &o.refs)
		for f, p := range map[Flags]**Counter{FlagSend: &ep.cntSend, FlagRecv: &ep.cntRecv, FlagRead: &ep.cntRead,
			FlagWrite: &ep.cntWrite, FlagRemoteRead: &ep.cntRRead, FlagRemoteWrite: &ep.cntRWrite} {
			if flags&f != 0 {
				*p = o
			}
		}
	case *AV:
		if o.d != ep.d {
			return fmt.Errorf("binding an AV: %w: another domain's", ErrInvalid)
		}
		if ep.av != nil {
			return fmt.Errorf("binding an AV: %w: one is bound already", ErrInvalid)
		}
		if err := o.refs.add(); err != nil {
			return err
		}
		ep.bound = append(ep.bound, &o.refs)
		ep.av = o
	case *SharedRx:
		if ep.typ != EPMsg || o.d != ep.d || ep.srx != nil {
			return fmt.Errorf("binding a shared receive context: %w", ErrInvalid)
		}
		if err := o.refs.add(); err != nil {
			return err
		}
		ep.bound = append(ep.bound, &o.refs)
		ep.srx, ep.w = o, o.w
	case *EQ:
		if ep.eq != nil {
			return fmt.Errorf("binding an EQ: %w: one is bound already", ErrInvalid)
		}
		if err := o.refs.add(); err != nil {
			return err
		}
		ep.bound = append(ep.bound, &o.refs)
		ep.eq = o
	default:
		return fmt.Errorf("binding %T: %w", obj, ErrInvalid)
	}
	return nil
}

func (r *refs) release() { r.done() }

// cqBinding is an endpoint's hold on a CQ: a child, and room for its
// outstanding operations.
type cqBinding struct {
	q *CQ
	n int
}

func (b cqBinding) release() {
	b.q.uncommit(b.n)
	b.q.refs.done()
}

// Enable makes the endpoint ready: its queue pair is created, receives can
// be posted, and (DGRAM, RDM) sends too.
func (ep *Endpoint) Enable() error {
	if ep.state.Load() != epCreated {
		return fmt.Errorf("enabling: %w: already enabled or closed", ErrInvalid)
	}
	caps := ep.info.Caps
	if caps&(CapSend|CapRead|CapWrite) != 0 && ep.txCQ == nil && ep.cntSend == nil && ep.cntWrite == nil && ep.cntRead == nil {
		return fmt.Errorf("enabling: %w: no CQ or counter bound for transmit", ErrInvalid)
	}
	if caps&CapRecv != 0 && ep.rxCQ == nil && ep.cntRecv == nil {
		return fmt.Errorf("enabling: %w: no CQ or counter bound for receive", ErrInvalid)
	}
	if ep.typ != EPMsg && ep.av == nil {
		return fmt.Errorf("enabling: %w: %v endpoints need an AV", ErrInvalid, ep.typ)
	}
	ep.vsq = verbs.NewCQ(len(ep.tx.ops) + 1)
	ep.vrq = verbs.NewCQ(len(ep.rx.ops) + 1)
	err := ep.d.exec(ep.w, func() error {
		var err error
		switch ep.typ {
		case EPMsg:
			c := device.QPConfig{SendCQ: ep.vsq, RecvCQ: ep.vrq, RQ: verbs.NewRecvQueue(len(ep.rx.ops)),
				SQDepth: len(ep.tx.ops), Worker: ep.w.id}
			if ep.srx != nil {
				c.RecvCQ, c.RQ = ep.srx.vrq, ep.srx.rq
			}
			ep.rcqp, err = ep.d.dev.NewRC(c, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic)
			if err == nil && ep.srx != nil {
				ep.srx.eps[ep.rcqp.QPN()] = ep
			}
			ep.qp = ep.rcqp
			ep.psn = rand.Uint32() & psn.Mask
		case EPDgram:
			ep.udqp, err = ep.d.dev.NewUD(device.QPConfig{SendCQ: ep.vsq, RecvCQ: ep.vrq, RQ: verbs.NewRecvQueue(len(ep.rx.ops)),
				SQDepth: len(ep.tx.ops), Worker: ep.w.id, QPN: uint32(ep.info.Service)}, ep.qkey)
			ep.qp = ep.udqp
		case EPRDM:
			err = ep.rdmEnable()
		}
		if err != nil {
			return err
		}
		ep.w.addEP(ep)
		for _, q := range []*CQ{ep.txCQ, ep.rxCQ} {
			if q != nil {
				q.workers.Or(1 << (ep.w.id % 64))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("enabling a %v endpoint: %w", ep.typ, qpnErr(err))
	}
	ep.state.Store(epEnabled)
	return nil
}

// Name is the endpoint's address, for peers' AVs (DGRAM, RDM) .
func (ep *Endpoint) Name() Address {
	gid, _ := ep.d.dev.GID(ep.info.Src)
	var qpn uint32
	switch {
	case ep.rdm != nil:
		qpn = ep.rdm.ud.QPN()
	case ep.qp != nil:
		qpn = ep.qp.QPN()
	}
	return Address{IP: gid.Unmap(), QPN: qpn}
}

// posted reports operations the worker has not submitted yet.
func (ep *Endpoint) posted() bool { return ep.tx.waiting() || ep.rx.waiting() }

// lockTx and lockRx take the endpoint's locks with ThreadSafe.
func (ep *Endpoint) lockTx() {
	if ep.safe {
		ep.txMu.Lock()
	}
}

func (ep *Endpoint) unlockTx() {
	if ep.safe {
		ep.txMu.Unlock()
	}
}

func (ep *Endpoint) lockRx() {
	if ep.safe {
		ep.rxMu.Lock()
	}
}

func (ep *Endpoint) unlockRx() {
	if ep.safe {
		ep.rxMu.Unlock()
	}
}

// Close closes the endpoint: the connection ends (MSG), the queue pairs
// are destroyed, and operations still outstanding complete with
// ErrCanceled. Closing twice is not an error.
func (ep *Endpoint) Close() error {
	st := ep.state.Swap(epClosed)
	if st == epClosed {
		return nil
	}
	if ep.conn != nil {
		_ = ep.conn.Disconnect()
	}
	var err error
	if st != epCreated {
		err = ep.d.exec(ep.w, func() error {
			ep.w.removeEP(ep)
			ep.teardown()
			return nil
		})
	}
	// Wait out posters that saw the endpoint open.
	ep.lockTx()
	ep.unlockTx()
	ep.lockRx()
	ep.unlockRx()
	_ = ep.d.dev.MRs().Deregister(ep.injectMR)
	if ep.scratchMR != nil {
		_ = ep.d.dev.MRs().Deregister(ep.scratchMR)
	}
	for _, b := range ep.bound {
		b.release()
	}
	ep.d.refs.done()
	return err
}

// teardown destroys the queue pairs and completes everything outstanding
// as canceled. It runs on the worker.
func (ep *Endpoint) teardown() {
	if ep.rdm != nil {
		ep.rdmTeardown()
		return
	}
	if q := ep.qp; q != nil {
		// In error, the queue pair flushes what it holds as canceled.
		a := verbs.QPAttr{State: verbs.StateErr}
		_ = q.(interface {
			Modify(*verbs.QPAttr, verbs.AttrMask) error
		}).Modify(&a, verbs.AttrState)
		ep.d.dev.Destroy(q)
		if ep.srx != nil {
			delete(ep.srx.eps, q.QPN())
		}
	}
	ep.qp = nil
	ep.reapTx(true)
	ep.reapRx(true)
	// What was posted and never submitted.
	for ep.tx.submitted != ep.tx.posted.Load() {
		ep.vsq.Push(&verbs.Completion{WRID: ep.tx.submitted, Status: verbs.WRFlushErr})
		ep.tx.submitted++
	}
	for ep.rx.submitted != ep.rx.posted.Load() {
		ep.vrq.Push(&verbs.Completion{WRID: ep.rx.submitted, Status: verbs.WRFlushErr, Opcode: verbs.CompRecv})
		ep.rx.submitted++
	}
	ep.reapTx(true)
	ep.reapRx(true)
}
