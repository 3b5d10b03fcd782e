package perf

import (
	"github.com/softfabric/softfabric/fabric"
)

// request is one queue pair's request of a bandwidth or latency test,
// posted in bursts of which only the last reports a completion (perftest's
// post list and CQ moderation); its context carries the queue pair's
// index (high 32 bits) and the burst's size. Atomics report each request
// (their context's count is 1). Posting allocates nothing.
type request struct {
	ep      *fabric.Endpoint
	op      string
	cmpSwap bool
	qp      uint64
	rma     fabric.RMAMsg
	msg     fabric.Msg
	iov     [1][]byte
	desc    [1]fabric.Desc
	result  []byte
	operand [8]byte // fetch-add: 1; compare-and-swap: swap in 1
	compare [8]byte // compare-and-swap: expect 0
	raddr   uint64
	key     uint64
}

// init prepares queue pair i's request of length bytes (8 for atomics)
// at the peer's buffer.
func (q *request) init(s *session, i int, op string, cmpSwap bool, length int, peer qpInfo) {
	*q = request{ep: s.eps[i], op: op, cmpSwap: cmpSwap, qp: uint64(i) << 32, raddr: peer.VA, key: uint64(peer.RKey)}
	if op == "atomic" {
		length = 8
	}
	q.iov[0], q.desc[0] = s.buf[:length], s.mr.Desc()
	q.rma = fabric.RMAMsg{IOV: q.iov[:], Desc: q.desc[:], Addr: fabric.AddrUnspec, RAddr: peer.VA, Key: uint64(peer.RKey)}
	q.msg = fabric.Msg{IOV: q.iov[:], Desc: q.desc[:], Addr: fabric.AddrUnspec}
	q.result = s.buf[:8]
	q.operand[0] = 1
}

// post posts a burst of n requests.
func (q *request) post(n int) error {
	for k := 0; k < n; k++ {
		var f fabric.Flags
		ctx := q.qp
		if k == n-1 {
			f, ctx = fabric.FlagCompletion, ctx|uint64(n)
		}
		var err error
		switch q.op {
		case "write":
			q.rma.Context = ctx
			err = q.ep.WriteMsg(&q.rma, f)
		case "read":
			q.rma.Context = ctx
			err = q.ep.ReadMsg(&q.rma, f)
		case "send":
			q.msg.Context = ctx
			err = q.ep.SendMsg(&q.msg, f)
		case "atomic":
			if q.cmpSwap {
				err = q.ep.CompareAtomic(fabric.AtomicCSwap, fabric.Uint64, q.operand[:], q.desc[0], q.compare[:], q.desc[0],
					q.result, q.desc[0], fabric.AddrUnspec, q.raddr, q.key, q.qp|1)
			} else {
				err = q.ep.FetchAtomic(fabric.AtomicSum, fabric.Uint64, q.operand[:], q.desc[0], q.result, q.desc[0],
					fabric.AddrUnspec, q.raddr, q.key, q.qp|1)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
