package rping

import (
	"context"
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/fabric"
)

// state is rping's test_state, numbered as rping numbers it: its
// messages print the number ("wait for RDMA_READ_ADV state 10").
type state int

const (
	stateIdle state = iota + 1
	stateConnectRequest
	stateAddrResolved
	stateRouteResolved
	stateConnected
	stateReadAdv
	stateReadComplete
	stateWriteAdv
	stateWriteComplete
	stateDisconnected
	stateError
)

var stateNames = [...]string{"?", "IDLE", "CONNECT_REQUEST", "ADDR_RESOLVED", "ROUTE_RESOLVED", "CONNECTED",
	"RDMA_READ_ADV", "RDMA_READ_COMPLETE", "RDMA_WRITE_ADV", "RDMA_WRITE_COMPLETE", "DISCONNECTED", "ERROR"}

func (s state) String() string { return stateNames[min(int(s), len(stateNames)-1)] }

// errDisconnected ends a run whose peer disconnected: rping's success
// (its loops return 0 in state DISCONNECTED).
var errDisconnected = errors.New("disconnected")

// Operation contexts; each send slot has its own.
const (
	opRecv = iota
	opRead
	opWrite
	opSend
)

// sendSlots is how many infos may be in flight: one slot per send queue
// entry, so that a buffer is never rewritten before its send completed.
const sendSlots = sqDepth

// wake is what rping's completion handler wakes its main loop for: a
// receive (with the info it carried), an RDMA read or write completion,
// a failed completion, a disconnect.
type wake struct {
	st  state // stateReadComplete, stateWriteComplete, stateError, stateDisconnected; 0: a receive
	in  info
	err error
}

// conn is one rping connection: its endpoint, queues and buffers, and
// rping's state.
type conn struct {
	o      *out
	server bool
	ep     *fabric.Endpoint
	cq     *fabric.CQ
	eq     *fabric.EQ
	ctl    *fabric.MR // the receive buffer, then sendSlots send buffers: infoSize bytes each
	rdma   *fabric.MR // rdma_buf: the server's read target and write source, the client's write target
	start  *fabric.MR // start_buf (client): the server's read source

	state   state
	peer    info // the last info received
	err     error
	pending []wake
	sending [sendSlots]bool
	sent    int
	dead    bool // a disconnect or failure was seen: post nothing more

	// ctx ends when the peer disconnects (gone closed first) or the
	// run ends; watched is closed when the EQ watcher returned.
	ctx      context.Context
	cancel   context.CancelFunc
	gone     chan struct{}
	watched  chan struct{}
	watching bool
	one      [1]fabric.Completion
}

// newConn opens an endpoint for info (the domain's offer, or a
// connection request's), registers rping's buffers of size bytes and
// posts the receive, as rping sets up before it connects or accepts.
func newConn(ctx context.Context, d *domain, info *fabric.Info, size int, server bool, o *out) (c *conn, err error) {
	c = &conn{o: o, server: server, state: stateIdle, gone: make(chan struct{}), watched: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.cq, err = d.Dom.CQ(4 * (sqDepth + rqDepth)); err != nil {
		return c, fmt.Errorf("ibv_create_cq failed: %w", err)
	}
	if c.eq, err = d.Fab.EQ(8); err != nil {
		return c, fmt.Errorf("creating an event queue: %w", err)
	}
	if c.ep, err = d.Dom.Endpoint(info); err != nil {
		return c, fmt.Errorf("rdma_create_qp: %w", err)
	}
	// rping's conn_param: retry_count 7, rnr_retry_count 7 (fabric's
	// default: for ever).
	for _, step := range []func() error{
		func() error { return c.ep.Bind(c.cq, 0) },
		func() error { return c.ep.Bind(c.eq, 0) },
		func() error { return c.ep.SetOption(fabric.OptRetryCount, 7) },
		c.ep.Enable,
	} {
		if err = step(); err != nil {
			return c, fmt.Errorf("rdma_create_qp: %w", err)
		}
	}
	o.debugf("created qp %#x", c.ep.QPInfo().QPN)
	if c.ctl, err = d.Dom.RegisterMemory(make([]byte, (1+sendSlots)*infoSize), fabric.AccessSend|fabric.AccessRecv); err != nil {
		return c, fmt.Errorf("recv_buf reg_mr failed: %w", err)
	}
	rw := fabric.AccessRead | fabric.AccessWrite | fabric.AccessRemoteRead | fabric.AccessRemoteWrite
	if c.rdma, err = d.Dom.RegisterMemory(make([]byte, size), rw); err != nil {
		return c, fmt.Errorf("rdma_buf reg_mr failed: %w", err)
	}
	if !server {
		if c.start, err = d.Dom.RegisterMemory(make([]byte, size), rw); err != nil {
			return c, fmt.Errorf("start_buf reg_mr failed: %w", err)
		}
	}
	o.debugf("allocated & registered buffers...")
	if err = c.postRecv(); err != nil {
		return c, err
	}
	c.watching = true
	go c.watch()
	return c, nil
}

// close disconnects (if connected) and closes everything newConn opened.
func (c *conn) close() {
	c.cancel()
	if c.ep != nil {
		_ = c.ep.Close()
	}
	if c.watching {
		<-c.watched
	}
	for _, m := range []*fabric.MR{c.ctl, c.rdma, c.start} {
		if m != nil {
			_ = m.Close()
		}
	}
	if c.cq != nil {
		_ = c.cq.Close()
	}
	if c.eq != nil {
		_ = c.eq.Close()
	}
}

// watch reports the connection's events as rping's CM thread does, and
// ends the connection's context when the peer disconnects.
func (c *conn) watch() {
	defer close(c.watched)
	role, id := "client", "parent"
	if c.server {
		role, id = "server", "child"
	}
	for {
		ev, err := c.eq.Read(c.ctx)
		if err != nil {
			return
		}
		switch ev.Kind {
		case fabric.EventConnected:
			c.o.debugf("cma_event type RDMA_CM_EVENT_ESTABLISHED (%s)", id)
			c.o.debugf("ESTABLISHED")
		case fabric.EventShutdown:
			c.o.debugf("cma_event type RDMA_CM_EVENT_DISCONNECTED (%s)", id)
			c.o.errorf("%s DISCONNECT EVENT...", role)
			close(c.gone)
			c.cancel()
			return
		}
	}
}

func (c *conn) isGone() bool {
	select {
	case <-c.gone:
		return true
	default:
		return false
	}
}

func (c *conn) postRecv() error {
	if err := c.ep.Recv(c.ctl.Bytes()[:infoSize], c.ctl.Desc(), fabric.AddrUnspec, opRecv); err != nil {
		return fmt.Errorf("post recv error: %w", err)
	}
	return nil
}

// poll handles one completion (waiting for it), queueing what wakes the
// main loop. A receive's info is read and its buffer posted again at once,
// as rping's completion handler does.
func (c *conn) poll() {
	n, err := c.cq.ReadContext(c.ctx, c.one[:])
	switch {
	case err != nil && c.isGone():
		c.fail(wake{st: stateDisconnected})
		return
	case err != nil:
		c.fail(wake{st: stateError, err: err})
		return
	case n == 0:
		return
	}
	comp := &c.one[0]
	if err := comp.Err(); err != nil {
		if c.isGone() || errors.Is(err, fabric.ErrCanceled) && c.dead {
			c.fail(wake{st: stateDisconnected})
			return
		}
		c.fail(wake{st: stateError, err: fmt.Errorf("cq completion failed: %w", err)})
		return
	}
	switch op := comp.Context; {
	case op >= opSend:
		c.o.debugf("send completion")
		c.sending[op-opSend] = false
	case op == opRead:
		c.o.debugf("rdma read completion")
		c.pending = append(c.pending, wake{st: stateReadComplete})
	case op == opWrite:
		c.o.debugf("rdma write completion")
		c.pending = append(c.pending, wake{st: stateWriteComplete})
	case op == opRecv:
		c.o.debugf("recv completion")
		if comp.Len != infoSize {
			c.fail(wake{st: stateError, err: fmt.Errorf("received bogus data, size %d", comp.Len)})
			return
		}
		in := parseInfo(c.ctl.Bytes())
		if err := c.postRecv(); err != nil {
			c.fail(wake{st: stateError, err: err})
			return
		}
		c.pending = append(c.pending, wake{in: in})
	}
}

// fail queues the wake that ends the connection: nothing is posted after.
func (c *conn) fail(w wake) {
	if !c.dead {
		c.dead = true
		c.pending = append(c.pending, w)
	}
}

// next waits for what wakes rping's main loop next and moves to the state
// it leads to, as rping's completion and CM handlers do.
func (c *conn) next() state {
	for len(c.pending) == 0 {
		c.poll()
	}
	w := c.pending[0]
	c.pending = c.pending[1:]
	switch {
	case w.st == stateError:
		c.err = w.err
		c.state = stateError
	case w.st != 0:
		c.state = w.st
	case c.server:
		c.peer = w.in
		c.o.debugf("Received rkey %x addr %x len %d from peer", w.in.rkey, w.in.addr, w.in.size)
		if c.state <= stateConnected || c.state == stateWriteComplete {
			c.state = stateReadAdv
		} else {
			c.state = stateWriteAdv
		}
	case c.state == stateReadAdv:
		c.state = stateWriteAdv
	default:
		c.state = stateWriteComplete
	}
	return c.state
}

// expect waits for the main loop's next state, which must be want. A
// disconnect instead prints rping's complaint and returns
// errDisconnected; a failure returns its error.
func (c *conn) expect(want state) error {
	got := c.next()
	switch got {
	case want:
		return nil
	case stateDisconnected:
		c.o.errorf("wait for %v state %d", want, got)
		return errDisconnected
	case stateError:
		return fmt.Errorf("wait for %v: %w", want, c.err)
	}
	return fmt.Errorf("wait for %v state %d (%v): the peer does not follow rping's exchange", want, got, got)
}

// sendInfo sends in from the next send slot, once that slot's previous
// send completed.
func (c *conn) sendInfo(in info) error {
	slot := c.sent % sendSlots
	for c.sending[slot] && !c.dead {
		c.poll()
	}
	if c.dead {
		return nil // the next wait reports why
	}
	b := c.ctl.Bytes()[(1+slot)*infoSize : (2+slot)*infoSize]
	in.put(b)
	return c.post(func() error {
		return c.ep.Send(b, c.ctl.Desc(), fabric.AddrUnspec, uint64(opSend+slot))
	}, func() { c.sending[slot] = true; c.sent++ })
}

// post posts an operation, reading completions while the send queue is
// full, and runs done once it is posted.
func (c *conn) post(op func() error, done func()) error {
	for !c.dead {
		err := op()
		if err == nil {
			done()
			return nil
		}
		if !errors.Is(err, fabric.ErrAgain) {
			return fmt.Errorf("post send error: %w", err)
		}
		c.poll()
	}
	return nil
}
