package rc

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Config describes a new queue pair.
type Config struct {
	QPN    uint32
	MRs    *mr.Table
	SendCQ *verbs.CQ
	RecvCQ *verbs.CQ
	// RQ is the queue pair's receive queue, or a shared receive queue.
	RQ *verbs.RecvQueue
	// SQDepth is the send queue size (default 256).
	SQDepth int
	// MaxInflight bounds the packets sent and not yet acknowledged
	// (default 512, at most half the PSN space).
	MaxInflight int
}

// Stats count what a queue pair has seen and done.
type Stats struct {
	TxPackets, RxPackets     uint64
	Retransmits              uint64 // packets sent again
	Timeouts                 uint64 // retransmit timer expiries
	LateTimeouts             uint64 // of those, noticed over a timeout late: no retry spent
	Probes                   uint64 // tail-loss probes sent
	AskedAgain               uint64 // repeated requests for lost read responses and atomic results
	SeqNAKsSent, SeqNAKsRcvd uint64
	RNRNAKsSent, RNRNAKsRcvd uint64
	ErrNAKsSent, ErrNAKsRcvd uint64 // invalid request, remote access, remote operation
	DupRequests              uint64 // duplicate requests seen by the responder
	DupResponses             uint64 // stale or duplicate responses seen by the completer
	Dropped                  uint64 // packets dropped: wrong state, P_Key, malformed, misaddressed
	Misaddressed             uint64 // of those, from an address other than the connected peer's
	// Requests the responder executed, each once: RDMA writes without
	// immediate placed whole, RDMA reads accepted (what libfabric's
	// FI_RMA_EVENT counters count at the target).
	RemoteWrites, RemoteReads uint64
}

// QP is a reliable connected queue pair.
type QP struct {
	qpn    uint32
	attr   verbs.QPAttr
	mrs    *mr.Table
	sendCQ *verbs.CQ
	recvCQ *verbs.CQ
	rq     *verbs.RecvQueue
	path   wire.Path
	peer   [16]byte // the connected peer's address (path.Dst16): its packets come from there
	mtu    int
	// timeout is the retransmit timeout in nanoseconds; 0 is infinite.
	timeout int64

	req  requester
	resp responder

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
		return nil, errors.New("rc: memory table, completion queues and receive queue are required")
	}
	if cfg.SQDepth <= 0 {
		cfg.SQDepth = 256
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 512
	}
	if cfg.MaxInflight > psn.Half {
		return nil, fmt.Errorf("rc: max inflight %d over half the PSN space", cfg.MaxInflight)
	}
	q := &QP{
		qpn:    cfg.QPN & psn.Mask,
		mrs:    cfg.MRs,
		sendCQ: cfg.SendCQ,
		recvCQ: cfg.RecvCQ,
		rq:     cfg.RQ,
	}
	q.attr.State = verbs.StateReset
	q.attr.PKey = wire.DefaultPKey
	q.req.init(cfg.SQDepth, cfg.MaxInflight)
	q.resp.init()
	return q, nil
}

// QPN is the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// State is the current state.
func (q *QP) State() verbs.QPState { return q.attr.State }

// Attr returns the current attributes.
func (q *QP) Attr() verbs.QPAttr { return q.attr }

// Stats returns the counters.
func (q *QP) Stats() Stats { return q.stats }

// Modify changes the attributes named by mask, checking the state transition
// and the attributes it requires, as ibv_modify_qp.
func (q *QP) Modify(a *verbs.QPAttr, mask verbs.AttrMask) error {
	if err := q.attr.CheckModify(a, mask); err != nil {
		return err
	}
	prev, next := q.attr.State, q.attr.State
	if mask&verbs.AttrState != 0 {
		next = a.State
	}
	var path wire.Path
	if mask&verbs.AttrPath != 0 {
		p, err := wire.NewPath(a.Path)
		if err != nil {
			return fmt.Errorf("%w: path: %w", verbs.ErrBadAttr, err)
		}
		path = p
	}
	if next == verbs.StateRTR && prev == verbs.StateInit {
		need := verbs.AttrPath | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if mask&need != need {
			return fmt.Errorf("%w: INIT to RTR needs path, path MTU, dest QPN and RQ PSN", verbs.ErrBadAttr)
		}
	}
	if next == verbs.StateRTS && prev == verbs.StateRTR && mask&verbs.AttrSQPSN == 0 {
		return fmt.Errorf("%w: RTR to RTS needs the SQ PSN", verbs.ErrBadAttr)
	}

	// Everything checked: apply, then act on what changed.
	q.attr.Apply(a, mask)
	if mask&verbs.AttrPath != 0 {
		q.path = path
		q.peer = path.Dst16()
	}
	if mask&verbs.AttrPathMTU != 0 {
		q.mtu = a.PathMTU
	}
	if mask&verbs.AttrRQPSN != 0 {
		q.resp.ePSN = psn.PSN(q.attr.RQPSN)
	}
	if mask&verbs.AttrSQPSN != 0 {
		q.req.setPSN(psn.PSN(q.attr.SQPSN))
	}
	if mask&verbs.AttrTimeout != 0 {
		q.timeout = 0
		if a.Timeout != 0 {
			q.timeout = 4096 << a.Timeout // 4.096 µs × 2^timeout, in ns
		}
	}
	if mask&verbs.AttrRetryCnt != 0 {
		q.req.retries = a.RetryCnt
	}
	if mask&verbs.AttrRNRRetry != 0 {
		q.req.rnrRetries = a.RNRRetry
	}
	if mask&verbs.AttrMaxDestRdAtomic != 0 {
		q.resp.setResources(int(a.MaxDestRdAtomic))
	}
	switch {
	case next == verbs.StateErr && prev != verbs.StateErr:
		q.flush()
	case mask&verbs.AttrState != 0 && next == verbs.StateReset:
		q.reset()
	}
	return nil
}

// toError moves the queue pair to the error state, flushing its work.
func (q *QP) toError() {
	if q.attr.State != verbs.StateErr {
		q.attr.State = verbs.StateErr
		q.flush()
	}
}

// flush completes all outstanding work with flush errors: the send queue,
// and the receive queue when it is not shared.
func (q *QP) flush() {
	q.req.flush(q)
	q.resp.flush(q)
	if !q.rq.Shared() {
		q.rq.Flush(q.recvCQ, q.qpn)
	}
}

func (q *QP) reset() {
	q.req.init(len(q.req.sq), int(q.req.maxInflight))
	q.resp.init()
	q.resp.setResources(int(q.attr.MaxDestRdAtomic))
	q.stats = Stats{}
}

// PostSend queues a send work request.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	switch q.attr.State {
	case verbs.StateRTS, verbs.StateSQD, verbs.StateErr:
	default:
		return fmt.Errorf("rc: post send: %w (%v)", verbs.ErrBadState, q.attr.State)
	}
	if err := q.req.post(q, wr); err != nil {
		return err
	}
	if q.notify != nil {
		q.notify()
	}
	return nil
}

// PostRecv queues a receive work request on the queue pair's receive queue.
func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	if q.attr.State == verbs.StateReset {
		return fmt.Errorf("rc: post recv: %w (%v)", verbs.ErrBadState, q.attr.State)
	}
	if q.attr.State == verbs.StateErr && !q.rq.Shared() {
		// As verbs: work posted to a queue pair in error completes at once, flushed.
		q.recvCQ.Push(&verbs.Completion{WRID: wr.ID, Status: verbs.WRFlushErr, Opcode: verbs.CompRecv, QPN: q.qpn})
		return nil
	}
	return q.rq.Post(wr)
}

// Receive handles one packet addressed to this queue pair. The caller has
// parsed it, checked its ICRC and matched its destination QPN. now is the
// current time in nanoseconds on the engine's monotonic clock.
func (q *QP) Receive(p *wire.Packet, now int64) {
	st := q.attr.State
	if st == verbs.StateReset || st == verbs.StateInit || st == verbs.StateErr {
		q.stats.Dropped++
		return
	}
	if !pkeyMatch(p.BTH().PKey(), q.attr.PKey) || p.Info.Mask&wire.MaskRC == 0 {
		q.stats.Dropped++
		return
	}
	if p.Src().As16() != q.peer {
		// Not from the peer it is connected to (a stray of an earlier
		// connection of this QPN, or forged): dropped, as rxe's
		// check_addr drops it, before it can touch the PSN state.
		q.stats.Dropped++
		q.stats.Misaddressed++
		return
	}
	q.stats.RxPackets++
	if p.Info.Mask&wire.MaskRequest != 0 {
		q.resp.receive(q, p)
		return
	}
	if st == verbs.StateRTR {
		q.stats.Dropped++ // no requests sent yet: nothing to answer
		return
	}
	q.req.receive(q, p, now)
}

// Transmit appends the packets the queue pair has to send now to b:
// responses first, then requests. It returns when there is nothing more to
// send or b is full.
func (q *QP) Transmit(now int64, b *link.Batch) {
	if q.attr.State < verbs.StateRTR || q.attr.State == verbs.StateErr && !q.resp.pendingOutput() {
		return
	}
	q.resp.transmit(q, b)
	if q.attr.State == verbs.StateRTS || q.attr.State == verbs.StateSQD {
		q.req.transmit(q, now, b)
	}
}

// Deadline is the time at which the queue pair next needs Transmit called
// for a timer (retransmit or RNR wait), or 0 when no timer runs.
func (q *QP) Deadline() int64 { return q.req.deadline() }

// HasWork reports whether Transmit would send something now (ignoring
// timers, which Deadline covers).
func (q *QP) HasWork() bool {
	return q.resp.pendingOutput() || q.req.canSend(q)
}

// pkeyMatch compares P_Keys as IBTA does: the low 15 bits match and at least
// one side is a full member.
func pkeyMatch(a, b uint16) bool {
	if a&0x7fff != b&0x7fff || a&0x7fff == 0 {
		return false
	}
	return a&0x8000 != 0 || b&0x8000 != 0
}

// frame starts a packet of op carrying n payload bytes in the next buffer of
// b: it returns the frame (headers to be filled, payload area and pad
// zeroed as needed) and the offset of its BTH, or nil when b is full.
func (q *QP) frame(b *link.Batch, op wire.Opcode, n int) ([]byte, int) {
	buf := b.Next()
	if buf == nil {
		return nil, 0
	}
	hl := q.path.HeaderLen()
	pad := -n & 3
	total := hl + op.Info().HeaderLen + n + pad + wire.ICRCSize
	f := buf[:total]
	for i := total - wire.ICRCSize - pad; i < total-wire.ICRCSize; i++ {
		f[i] = 0
	}
	return f, hl
}

// bth writes a BTH for this queue pair's peer.
func (q *QP) bth(f []byte, off int, op wire.Opcode, p psn.PSN, n int, ackReq, solicited bool) {
	h := wire.BTHFields{
		Opcode:    op,
		Solicited: solicited,
		PadCount:  uint8(-n & 3),
		PKey:      q.attr.PKey,
		DestQP:    q.attr.DestQPN,
		AckReq:    ackReq,
		PSN:       uint32(p),
	}
	wire.BTH(f[off:]).Encode(&h)
}

// expect tells b's link, if it places payloads (link.Expecter), that the
// packets from PSN ps carry buf in order, a path MTU each (responses to
// this queue pair's own read when responses); e holds the announcement.
func (q *QP) expect(b *link.Batch, e *link.Expectation, ps psn.PSN, buf []byte, responses bool) {
	*e = link.Expectation{
		Peer: q.path.Dst16(), PeerQPN: q.attr.DestQPN, QPN: q.qpn,
		PSN: uint32(ps), Packets: npackets(uint32(len(buf)), q.mtu), MTU: q.mtu, Buf: buf, Responses: responses,
	}
	b.Expect(e)
}

// singleBuffer is the memory of a one-entry scatter/gather list, where
// local writes may go; false for any other list, or a bad entry.
func (q *QP) singleBuffer(sgl []mr.SGE) ([]byte, bool) {
	if len(sgl) != 1 {
		return nil, false
	}
	buf, err := q.mrs.Local(sgl[0].LKey, sgl[0].Addr, sgl[0].Length, mr.LocalWrite)
	return buf, err == nil
}

// send finishes a frame and commits it to the batch.
func (q *QP) send(b *link.Batch, f []byte) {
	q.path.Finish(f)
	b.Commit(len(f))
	q.stats.TxPackets++
}

// sendPayload puts payload into frame f at byte at and sends it; when
// b's link gathers payloads (link.Gatherer) and takes this one, it leaves
// the payload where it lies, for the link to take when it sends the
// frame, and copies nothing.
func (q *QP) sendPayload(b *link.Batch, f []byte, at int, payload []byte) {
	if len(payload) > 0 && b.Gather(at, payload) {
		q.path.FinishGather(f, at, payload)
		b.Commit(len(f))
		q.stats.TxPackets++
		return
	}
	copy(f[at:], payload)
	q.send(b, f)
}

// ConnectAttr is what moving a queue pair from INIT to RTS needs: the
// path to the peer and its queue pair, both sides' first PSNs, and the
// retry and read/atomic limits.
type ConnectAttr struct {
	Path        wire.PathFields
	PathMTU     int
	DestQPN     uint32
	RQPSN       uint32 // the first PSN the peer sends
	SQPSN       uint32 // the first PSN this queue pair sends
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	RdAtomic    uint8 // max_rd_atomic and max_dest_rd_atomic
}

// Connect moves an INIT queue pair through RTR to RTS: the one
// connection sequence of the device and the tests.
func (q *QP) Connect(c ConnectAttr) error {
	a := verbs.QPAttr{
		State: verbs.StateRTR, Path: c.Path, PathMTU: c.PathMTU, DestQPN: c.DestQPN, RQPSN: c.RQPSN,
		MinRNRTimer: c.MinRNRTimer, MaxDestRdAtomic: c.RdAtomic,
	}
	if err := q.Modify(&a, verbs.AttrState|verbs.AttrPath|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMinRNRTimer|verbs.AttrMaxDestRdAtomic); err != nil {
		return err
	}
	a = verbs.QPAttr{State: verbs.StateRTS, SQPSN: c.SQPSN, Timeout: c.Timeout, RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry, MaxRdAtomic: c.RdAtomic}
	return q.Modify(&a, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxRdAtomic)
}
