package fabric

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
)

// The domain's General Services Interface: queue pair 1, where
// communication-management MADs from RDMA-CM peers arrive and from where
// ours leave, as UD datagrams with IBA's well-known GSI Q_Key. It lives
// on worker 0 like any UD queue pair; the worker copies what arrives into
// a bounded queue for the connection manager's goroutine, and posts what
// that goroutine queued. MADs are control traffic, a few per connection:
// a lock per MAD is fine here, and a full queue drops (and counts) what a
// flood brings.

const (
	gsiRecvs = 64  // receive slots
	gsiSends = 64  // send slots
	gsiInMax = 256 // MADs waiting for the connection manager
	gsiSlot  = ud.GRHSize + mad.Size
)

// gsiMAD is a MAD that arrived, with its sender's GID.
type gsiMAD struct {
	from netip.Addr
	mad  [mad.Size]byte
}

// gsiOut is a MAD to send.
type gsiOut struct {
	ah  *verbs.AddressHandle
	mad [mad.Size]byte
}

type gsi struct {
	d        *Domain
	w        *worker
	qp       *ud.QP
	scq, rcq *verbs.CQ
	buf      []byte // gsiRecvs receive slots, then gsiSends send slots
	mr       *mr.Region
	next     int // the next send slot
	inflight int // sends posted and not completed

	mu      sync.Mutex
	in      []gsiMAD
	out     []gsiOut
	pending atomic.Bool   // out is not empty
	ready   chan struct{} // signalled when in is not empty

	// dropped counts MADs that found the queue full, short counts
	// datagrams too short to be a MAD.
	dropped, short atomic.Uint64

	vc  [gsiRecvs]verbs.Completion
	sge [1]mr.SGE
}

// openGSI creates queue pair 1 on worker 0 and posts its receives.
func (d *Domain) openGSI() (*gsi, error) {
	g := &gsi{d: d, w: d.workers[0], scq: verbs.NewCQ(gsiSends + 1), rcq: verbs.NewCQ(gsiRecvs + 1),
		buf: make([]byte, (gsiRecvs+gsiSends)*gsiSlot), ready: make(chan struct{}, 1),
		in: make([]gsiMAD, 0, gsiInMax)}
	var err error
	if g.mr, err = d.dev.MRs().Register(g.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	err = d.exec(g.w, func() error {
		q, err := d.dev.NewUD(device.QPConfig{SendCQ: g.scq, RecvCQ: g.rcq, RQ: verbs.NewRecvQueue(gsiRecvs),
			SQDepth: gsiSends, Worker: g.w.id, QPN: engine.GSIQPN}, mad.GSIQKey)
		if err != nil {
			return err
		}
		g.qp = q
		for i := range gsiRecvs {
			g.repost(uint64(i))
		}
		g.w.addEP(g)
		return nil
	})
	if err != nil {
		_ = d.dev.MRs().Deregister(g.mr)
		return nil, fmt.Errorf("opening queue pair 1 for RDMA-CM: %w", qpnErr(err))
	}
	return g, nil
}

// close destroys the queue pair.
func (g *gsi) close() {
	_ = g.d.exec(g.w, func() error {
		g.w.removeEP(g)
		a := verbs.QPAttr{State: verbs.StateErr}
		_ = g.qp.Modify(&a, verbs.AttrState)
		g.d.dev.Destroy(g.qp)
		return nil
	})
	_ = g.d.dev.MRs().Deregister(g.mr)
}

func (g *gsi) repost(i uint64) {
	g.sge[0] = mr.SGE{Addr: g.mr.Addr() + i*gsiSlot, Length: gsiSlot, LKey: g.mr.LKey()}
	wr := verbs.RecvWR{ID: i, SGL: g.sge[:]}
	_ = g.qp.PostRecv(&wr)
}

// send queues a MAD for the peer whose GSI the address handle names.
func (g *gsi) send(ah *verbs.AddressHandle, m []byte) {
	g.mu.Lock()
	if len(g.out) < gsiInMax {
		g.out = append(g.out, gsiOut{ah: ah})
		copy(g.out[len(g.out)-1].mad[:], m)
		g.pending.Store(true)
	} else {
		g.dropped.Add(1)
	}
	g.mu.Unlock()
	g.w.kick()
}

// receive moves the MADs that arrived into dst.
func (g *gsi) receive(dst []gsiMAD) []gsiMAD {
	g.mu.Lock()
	dst = append(dst, g.in...)
	g.in = g.in[:0]
	g.mu.Unlock()
	return dst
}

// addressHandle resolves the GSI of the node at gid.
func (g *gsi) addressHandle(ctx context.Context, gid netip.Addr) (*verbs.AddressHandle, error) {
	return g.d.dev.AddressHandle(ctx, gid, engine.GSIQPN, engine.GSIQPN, mad.GSIQKey)
}

// submit posts the queued MADs that fit the free send slots. It runs on
// the worker.
func (g *gsi) submit() bool {
	if !g.pending.Load() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for ; n < len(g.out) && g.inflight < gsiSends; n++ {
		o := &g.out[n]
		off := (gsiRecvs + g.next) * gsiSlot
		g.next = (g.next + 1) % gsiSends
		copy(g.buf[off:], o.mad[:])
		sge := [1]mr.SGE{{Addr: g.mr.Addr() + uint64(off), Length: mad.Size, LKey: g.mr.LKey()}}
		wr := verbs.SendWR{Op: verbs.OpSend, SGL: sge[:], Dest: o.ah}
		if g.qp.PostSend(&wr) != nil {
			g.dropped.Add(1)
			continue
		}
		g.inflight++
	}
	g.out = append(g.out[:0], g.out[n:]...)
	g.pending.Store(len(g.out) > 0)
	return n > 0
}

// service reaps the queue pair's completions: what arrived goes to the
// connection manager. It runs on the worker.
func (g *gsi) service() bool {
	did := g.submit()
	n := g.rcq.Poll(g.vc[:])
	got := false
	for i := range n {
		c := &g.vc[i]
		if c.Status == verbs.WRFlushErr {
			continue
		}
		if c.Status == verbs.Success && c.ByteLen >= gsiSlot {
			off := int(c.WRID)*gsiSlot + ud.GRHSize
			g.mu.Lock()
			if len(g.in) < gsiInMax {
				g.in = append(g.in, gsiMAD{from: netip.AddrFrom16(c.SrcGID)})
				copy(g.in[len(g.in)-1].mad[:], g.buf[off:off+mad.Size])
				got = true
			} else {
				g.dropped.Add(1)
			}
			g.mu.Unlock()
		} else {
			g.short.Add(1)
		}
		g.repost(c.WRID)
	}
	m := g.scq.Poll(g.vc[:])
	g.inflight -= m
	if got {
		select {
		case g.ready <- struct{}{}:
		default:
		}
	}
	return did || n > 0 || m > 0
}

func (g *gsi) posted() bool { return g.pending.Load() }
