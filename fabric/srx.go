package fabric

import (
	"errors"
	"fmt"
	"sync"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// SharedRx is a shared receive context (libfabric's fi_srx_context, a
// shared receive queue underneath): one pool of posted receives that the
// MSG endpoints bound to it all take from. Bind it to endpoints before
// Enable; each receive completes on the CQ of the endpoint whose message
// filled it.
type SharedRx struct {
	d    *Domain
	w    *worker
	rx   opRing[rxOp]
	rq   *verbs.RecvQueue
	vrq  *verbs.CQ
	refs refs
	mu   sync.Mutex

	// Owned by the worker.
	eps  map[uint32]*Endpoint
	rwr  verbs.RecvWR
	sgl  [MaxIOV]mr.SGE
	vc   [1]verbs.Completion
	held bool // vc[0] waits for room in its endpoint's CQ
}

// SharedRx opens a shared receive context holding up to size receives.
func (d *Domain) SharedRx(size int) (*SharedRx, error) {
	if size <= 0 || size > maxQueueSize {
		return nil, fmt.Errorf("opening a shared receive context: %w: size %d", ErrInvalid, size)
	}
	if err := d.refs.add(); err != nil {
		return nil, err
	}
	s := &SharedRx{d: d, w: d.pickWorker(), rq: verbs.NewSRQ(size), eps: map[uint32]*Endpoint{}}
	s.rx.init(size, false)
	s.vrq = verbs.NewCQ(len(s.rx.ops) + 1)
	if err := d.exec(s.w, func() error { s.w.addEP(s); return nil }); err != nil {
		d.refs.done()
		return nil, err
	}
	return s, nil
}

// Recv posts b to the pool.
func (s *SharedRx) Recv(b []byte, desc Desc, ctx uint64) error {
	if s.d.safe {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if s.refs.isClosed() {
		return ErrClosed
	}
	op, seq, ok := s.rx.slot()
	if !ok {
		return ErrAgain
	}
	*op = rxOp{ctx: ctx, src: AddrUnspec, buf: b}
	if err := gather(&op.sgl, &op.nsge, [][]byte{b}, []Desc{desc}, 1); err != nil {
		return err
	}
	s.rx.publish(seq)
	s.w.kick()
	return nil
}

func (s *SharedRx) posted() bool { return s.rx.waiting() }

// service posts the pool's new receives to the shared queue and hands
// completions to their endpoints.
func (s *SharedRx) service() bool {
	did := s.submit()
	for {
		if !s.held && s.vrq.Poll(s.vc[:]) == 0 {
			break
		}
		v := &s.vc[0]
		ep := s.eps[v.QPN]
		if ep != nil && ep.rxCQ != nil && ep.rxCQ.room(ep.w.id) == 0 {
			s.held = true
			break
		}
		s.held = false
		if ep != nil {
			ep.deliverRx(v, &s.rx.ops[v.WRID&s.rx.mask])
			if ep.rxCQ != nil {
				ep.rxCQ.signal()
			}
		}
		s.rx.done.Store(v.WRID + 1)
		did = true
	}
	return did
}

// submit posts the pool's new receives to the shared queue.
func (s *SharedRx) submit() bool {
	did := false
	for posted := s.rx.posted.Load(); s.rx.submitted != posted; {
		op := &s.rx.ops[s.rx.submitted&s.rx.mask]
		copy(s.sgl[:], op.sgl[:op.nsge])
		s.rwr = verbs.RecvWR{ID: s.rx.submitted, SGL: s.sgl[:op.nsge]}
		if err := s.rq.Post(&s.rwr); errors.Is(err, verbs.ErrQueueFull) {
			break
		}
		s.rx.submitted++
		did = true
	}
	return did
}

// Close closes the context; ErrBusy while endpoints are bound to it.
// Receives still posted are dropped.
func (s *SharedRx) Close() error {
	first, err := s.refs.closing()
	if !first {
		return err
	}
	err = s.d.exec(s.w, func() error { s.w.removeEP(s); return nil })
	s.d.refs.done()
	return err
}
