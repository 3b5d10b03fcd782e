package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softfabric/softfabric/fabric"
)

// session is one end's resources for a test, or for a lane of it: MSG
// endpoints (one per queue pair) on one worker of the test's domain,
// their completion queue, and one registered buffer that every request
// and receive uses.
type session struct {
	fb     *fab
	worker int // the worker its endpoints belong to
	cq     *fabric.CQ
	eps    []*fabric.Endpoint
	mr     *fabric.MR
	buf    []byte
	cs     []fabric.Completion
	// selective: the endpoints report only the requests posted with
	// FlagCompletion (the last of each burst).
	selective bool
	// recvLen is the length of the receives posted (send servers).
	recvLen int
	// owed counts, per endpoint, receives to post again that found its
	// queue full: the worker (automatic progress) reports a receive
	// before it frees its slot.
	owed    []int
	anyOwed bool
	// wrote, when set before the endpoints are added, counts the RDMA
	// writes the peers placed in buf (FlagRemoteWrite, CapRMAEvent).
	wrote *fabric.Counter
}

// epQueue is each server endpoint's receive queue depth.
const epQueue = 512

// newSession is newSessionOn worker 0, every queue pair on it, reporting
// only the requests that ask to be (the last of each burst).
func newSession(fb *fab, nqps, size int) (*session, error) {
	return openSession(fb, nqps, size, true)
}

// openSession is newSession, selective or not (atomics report each
// request).
func openSession(fb *fab, nqps, size int, selective bool) (*session, error) {
	s, err := newSessionOn(fb, 0, size, selective, nqps)
	if err != nil {
		return nil, err
	}
	for range nqps {
		if err := s.addEP(); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// newSessionOn makes a session on worker w without endpoints (addEP adds
// up to neps).
func newSessionOn(fb *fab, w, size int, selective bool, neps int) (*session, error) {
	s := &session{fb: fb, worker: w, cs: make([]fabric.Completion, 256), selective: selective}
	var err error
	if s.cq, err = fb.dom.CQ(fb.cqSize(neps)); err != nil {
		return nil, err
	}
	// Memory from the domain's allocator: through a daemon it is shared
	// with it, which places large payloads straight into it (MRShared).
	if s.mr, err = fb.dom.AllocMemory(max(size, 64), 0); err != nil {
		s.close()
		return nil, err
	}
	s.buf = s.mr.Bytes()[:max(size, 64)]
	return s, nil
}

// addEP opens, binds and enables one more endpoint on the session's
// worker.
func (s *session) addEP() error {
	ep, err := s.newEP(&s.fb.info, nil)
	if err != nil {
		return err
	}
	s.eps = append(s.eps, ep)
	return nil
}

// newEP opens, binds and enables an endpoint for info (the domain's
// offer, or a connection request's) on the session's worker, its events
// to eq if not nil.
func (s *session) newEP(info *fabric.Info, eq *fabric.EQ) (*fabric.Endpoint, error) {
	ep, err := s.fb.dom.Endpoint(info)
	if err != nil {
		return nil, err
	}
	var f fabric.Flags
	if s.selective {
		f = fabric.FlagSelectiveCompletion
	}
	if err = ep.SetOption(fabric.OptWorker, s.worker); err == nil {
		if err = ep.Bind(s.cq, f); err == nil && eq != nil {
			err = ep.Bind(eq, 0)
		}
		if err == nil && s.wrote != nil {
			err = ep.Bind(s.wrote, fabric.FlagRemoteWrite)
		}
		if err == nil {
			err = ep.Enable()
		}
	}
	if err != nil {
		_ = ep.Close()
		return nil, err
	}
	return ep, nil
}

func (s *session) close() {
	for _, ep := range s.eps {
		_ = ep.Close()
	}
	if s.mr != nil {
		_ = s.mr.Close()
	}
	if s.wrote != nil {
		_ = s.wrote.Close()
	}
	if s.cq != nil {
		_ = s.cq.Close()
	}
}

func (s *session) infos(gid netip.Addr) []qpInfo {
	out := make([]qpInfo, len(s.eps))
	for i, ep := range s.eps {
		q := ep.QPInfo()
		out[i] = qpInfo{QPN: q.QPN, PSN: q.PSN, GID: gid, RKey: uint32(s.mr.Key()), VA: s.mr.Addr()}
	}
	return out
}

func (s *session) connect(ctx context.Context, peers []qpInfo, mtu int) error {
	for i, ep := range s.eps {
		p := fabric.QPInfo{QPN: peers[i].QPN, PSN: peers[i].PSN, GID: peers[i].GID}
		if err := ep.ConnectQP(ctx, p, fabric.QPOptions{PathMTU: mtu}); err != nil {
			return fmt.Errorf("connecting QP %d: %w", ep.QPInfo().QPN, err)
		}
	}
	return nil
}

// postRecvs fills every endpoint's receive queue with receives of size
// bytes.
func (s *session) postRecvs(size int) error {
	s.recvLen = size
	for i := range s.eps {
		for {
			err := s.postRecv(i)
			if errors.Is(err, fabric.ErrAgain) {
				break
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// repost replaces a completed receive of endpoint i, now or, when its
// queue has no room yet, at the next flush.
func (s *session) repost(i int) error {
	err := s.postRecv(i)
	if errors.Is(err, fabric.ErrAgain) {
		if s.owed == nil {
			s.owed = make([]int, len(s.eps))
		}
		s.owed[i]++
		s.anyOwed = true
		return nil
	}
	return err
}

// flush posts the receives repost could not.
func (s *session) flush() error {
	if !s.anyOwed {
		return nil
	}
	s.anyOwed = false
	for i := range s.owed {
		for s.owed[i] > 0 {
			err := s.postRecv(i)
			if errors.Is(err, fabric.ErrAgain) {
				s.anyOwed = true
				break
			}
			if err != nil {
				return err
			}
			s.owed[i]--
		}
	}
	return nil
}

// postRecv posts one receive to endpoint i, its index the context.
func (s *session) postRecv(i int) error {
	return s.eps[i].Recv(s.buf[:s.recvLen], s.mr.Desc(), fabric.AddrUnspec, uint64(i))
}

// transport sums the counters of the session's queue pairs.
func (s *session) transport() Transport {
	var t Transport
	for _, ep := range s.eps {
		st := ep.Stats()
		t.Retransmits += st.Retransmits
		t.Timeouts += st.Timeouts
		t.Probes += st.Probes
		t.SeqNAKs += st.SeqNAKs
	}
	return t
}

// qpStats describes endpoint i's counters, for failure messages.
func (s *session) qpStats(i int) string {
	if i < 0 || i >= len(s.eps) {
		return "unknown"
	}
	st := s.eps[i].Stats()
	return fmt.Sprintf("QP %d: tx %d rx %d retransmits %d timeouts %d probes %d seq NAKs %d RNR NAKs %d dropped %d",
		s.eps[i].QPInfo().QPN, st.TxPackets, st.RxPackets, st.Retransmits, st.Timeouts, st.Probes, st.SeqNAKs, st.RNRNAKs, st.Dropped)
}
