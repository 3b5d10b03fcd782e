package ucmatose

import (
	"context"
	"fmt"
	"sync"

	"github.com/softfabric/softfabric/fabric"
)

// node is one of cmatose's connections (struct cmatest_node): its
// endpoint, its send and receive CQs and its message buffer.
type node struct {
	id        int
	ep        *fabric.Endpoint
	cq        [2]*fabric.CQ // sendCQ, recvCQ: cmatose's cq[SEND_CQ_INDEX], cq[RECV_CQ_INDEX]
	mr        *fabric.MR    // the receive buffer, then the send buffer: Size bytes each
	size      int
	connected bool
	comps     [8]fabric.Completion // cmatose polls 8 at a time
}

const (
	sendCQ = iota
	recvCQ
)

// newNode sets a connection up as cmatose's init_node and post_recvs
// do: two CQs of max(count, 1) entries, an RC endpoint on info (the
// domain's offer, or a connection request's) bound to eq, the message
// buffer, and count receives posted. retry is the connection's
// retry_count (0: fabric's default, 7, which rdma_accept's defaults
// give the server).
func newNode(d *domain, info *fabric.Info, eq *fabric.EQ, cfg Config, id, retry int) (n *node, err error) {
	n = &node{id: id, size: cfg.Size}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	depth := max(cfg.Count, 1)
	for i := range n.cq {
		if n.cq[i], err = d.Dom.CQ(depth); err != nil {
			return n, fmt.Errorf("cmatose: unable to create CQ: %w", err)
		}
	}
	if n.ep, err = d.Dom.Endpoint(info); err != nil {
		return n, fmt.Errorf("cmatose: unable to create QP: %w", err)
	}
	steps := []func() error{
		func() error { return n.ep.Bind(n.cq[sendCQ], fabric.FlagSend) },
		func() error { return n.ep.Bind(n.cq[recvCQ], fabric.FlagRecv) },
		func() error { return n.ep.Bind(eq, 0) },
	}
	if retry > 0 {
		steps = append(steps, func() error { return n.ep.SetOption(fabric.OptRetryCount, retry) })
	}
	if cfg.AckTimeout > 0 {
		steps = append(steps, func() error { return n.ep.SetOption(fabric.OptTimeout, cfg.AckTimeout) })
	}
	for _, step := range append(steps, n.ep.Enable) {
		if err = step(); err != nil {
			return n, fmt.Errorf("cmatose: unable to create QP: %w", err)
		}
	}
	n.mr, err = postRecvs(d, n.ep, cfg.Count, cfg.Size)
	return n, err
}

// postRecvs is create_message and post_recvs: the message buffer, and
// count receives of size bytes posted on ep (none, and no buffer, when
// count is 0). cmatose and udaddy receive into and send from one buffer;
// softfabric's transport may read a send's buffer again (a
// retransmission) while a receive lands, so each has its own half here.
// The wire is the same.
func postRecvs(d *domain, ep *fabric.Endpoint, count, size int) (*fabric.MR, error) {
	if count == 0 {
		return nil, nil
	}
	m, err := d.Dom.RegisterMemory(make([]byte, 2*size), fabric.AccessSend|fabric.AccessRecv)
	if err != nil {
		return nil, fmt.Errorf("failed to reg MR: %w", err)
	}
	for range count {
		if err = ep.Recv(m.Bytes()[:size], m.Desc(), fabric.AddrUnspec, 0); err != nil {
			return m, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return m, nil
}

// close closes the endpoint (flushing what is posted) and the rest.
func (n *node) close() {
	if n.ep != nil {
		_ = n.ep.Close()
	}
	if n.mr != nil {
		_ = n.mr.Close()
	}
	for _, q := range n.cq {
		if q != nil {
			_ = q.Close()
		}
	}
}

// postSends posts count sends of the message, as post_sends does
// (signaled: cmatose sets sq_sig_all).
func (n *node) postSends(count int) error {
	if !n.connected || count == 0 {
		return nil
	}
	b := n.mr.Bytes()[n.size:]
	for range count {
		if err := n.ep.Send(b, n.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
			return fmt.Errorf("failed to post sends: connection %d: %w", n.id, err)
		}
	}
	return nil
}

// poll waits for count completions on the node's CQ index, as
// poll_cqs does for one node. cmatose does not look at their status;
// this does, and fails on an error.
func (n *node) poll(ctx context.Context, index, count int) error {
	what := [...]string{"send", "receive"}[index]
	for done := 0; done < count; {
		want := n.comps[:min(len(n.comps), count-done)]
		k, err := n.cq[index].ReadContext(ctx, want)
		if err != nil {
			k = n.cq[index].Read(want) // what completed before the peer went
		}
		if k == 0 && err != nil {
			return fmt.Errorf("cmatose: failed polling CQ: connection %d, %d of %d %ss complete: %w",
				n.id, done, count, what, err)
		}
		for i := range k {
			if err := n.comps[i].Err(); err != nil {
				return fmt.Errorf("connection %d: %s %d of %d failed: %w", n.id, what, done+i+1, count, err)
			}
		}
		done += k
	}
	return nil
}

// pollAll is poll_cqs: every connected node's count completions on
// index, one node after the other.
func pollAll(ctx context.Context, nodes []*node, index, count int) error {
	for _, n := range nodes {
		if n == nil || !n.connected {
			continue
		}
		if err := n.poll(ctx, index, count); err != nil {
			return err
		}
	}
	return nil
}

// closeAll closes every node.
func closeAll(nodes []*node) {
	for _, n := range nodes {
		if n != nil {
			n.close()
		}
	}
}

// shutdownAll disconnects every connected node at once (rdma_disconnect
// on each) and waits for the DREPs.
func shutdownAll(nodes []*node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n == nil || !n.connected {
			continue
		}
		n.connected = false
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.ep.Shutdown()
		}()
	}
	wg.Wait()
}

// events reads the run's event channel (cmatose has one for all its
// ids): connection requests go to reqs, and the end of a connection,
// its peer's disconnect, to gone (and ends the context the data
// transfers wait under, which only a failure lets a peer disconnect
// in).
type events struct {
	reqs   chan fabric.Event
	gone   chan *fabric.Endpoint
	cancel context.CancelFunc
	done   chan struct{}
}

func watch(ctx context.Context, eq *fabric.EQ, connections int, cancelData context.CancelFunc) *events {
	e := &events{reqs: make(chan fabric.Event, 64), gone: make(chan *fabric.Endpoint, connections), done: make(chan struct{})}
	ctx, e.cancel = context.WithCancel(ctx)
	go func() {
		defer close(e.done)
		for {
			ev, err := eq.Read(ctx)
			if err != nil {
				return
			}
			switch ev.Kind {
			case fabric.EventConnReq:
				select {
				case e.reqs <- ev:
				case <-ctx.Done():
					return
				}
			case fabric.EventShutdown:
				cancelData()
				select {
				case e.gone <- ev.EP:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return e
}

func (e *events) stop() {
	e.cancel()
	<-e.done
}
