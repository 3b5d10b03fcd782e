package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// MessageSize is the size of rdma_server's and rdma_client's messages
// (send_msg[16], recv_msg[16]).
const MessageSize = 16

// RDMAConfig is one rdma_server or rdma_client run.
type RDMAConfig struct {
	// Provider is the fabric provider (empty: fabric.ProviderSoftfabric).
	Provider string
	// Iface is the softfabric device (empty: the one with Addr's or
	// Source's address, or the only one up).
	Iface string
	// Addr is -s: the address the server binds to (invalid or
	// unspecified: the device's, as rdma_server's 0.0.0.0), the
	// client's server.
	Addr netip.Addr
	// Source is the client's local address (rdma_client has no option
	// for it; invalid: the device's). Tests name in-process devices
	// with it.
	Source netip.Addr
	// Port is -p (0: DefaultPort).
	Port uint16
	// Timeout bounds the whole run (0: none): rdma_server and
	// rdma_client wait for ever.
	Timeout time.Duration
}

// rdmaEP is rdma_create_ep's id: an endpoint with one send and one
// receive of MessageSize bytes, their CQ, and an event queue whose
// disconnect ends ctx.
type rdmaEP struct {
	ep       *fabric.Endpoint
	cq       *fabric.CQ
	eq       *fabric.EQ
	mr       *fabric.MR // recv_msg, then send_msg
	ctx      context.Context
	cancel   context.CancelFunc
	gone     chan struct{}
	watched  chan struct{}
	watching bool
	one      [1]fabric.Completion
}

// newRDMAEP sets the endpoint up and posts its receive (rdma_post_recv
// before rdma_connect or rdma_accept, as both tools do). Its retry_count
// is fabric's default, 7, what rdma_connect and rdma_accept take when
// given no conn_param.
func newRDMAEP(ctx context.Context, d *domain, info *fabric.Info) (r *rdmaEP, err error) {
	r = &rdmaEP{gone: make(chan struct{}), watched: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.cq, err = d.Dom.CQ(2); err != nil {
		return r, fmt.Errorf("rdma_create_ep: %w", err)
	}
	if r.eq, err = d.Fab.EQ(8); err != nil {
		return r, fmt.Errorf("rdma_create_ep: %w", err)
	}
	if r.ep, err = d.Dom.Endpoint(info); err != nil {
		return r, fmt.Errorf("rdma_create_ep: %w", err)
	}
	for _, step := range []func() error{
		func() error { return r.ep.Bind(r.cq, 0) },
		func() error { return r.ep.Bind(r.eq, 0) },
		r.ep.Enable,
	} {
		if err = step(); err != nil {
			return r, fmt.Errorf("rdma_create_ep: %w", err)
		}
	}
	if r.mr, err = d.Dom.RegisterMemory(make([]byte, 2*MessageSize), fabric.AccessSend|fabric.AccessRecv); err != nil {
		return r, fmt.Errorf("rdma_reg_msgs for recv_msg: %w", err)
	}
	if err = r.ep.Recv(r.mr.Bytes()[:MessageSize], r.mr.Desc(), fabric.AddrUnspec, 0); err != nil {
		return r, fmt.Errorf("rdma_post_recv: %w", err)
	}
	r.watching = true
	go r.watch()
	return r, nil
}

// watch ends the endpoint's context when the peer disconnects.
func (r *rdmaEP) watch() {
	defer close(r.watched)
	for {
		ev, err := r.eq.Read(r.ctx)
		if err != nil {
			return
		}
		if ev.Kind == fabric.EventShutdown {
			close(r.gone)
			r.cancel()
			return
		}
	}
}

func (r *rdmaEP) close() {
	r.cancel()
	if r.ep != nil {
		_ = r.ep.Close()
	}
	if r.watching {
		<-r.watched
	}
	if r.mr != nil {
		_ = r.mr.Close()
	}
	if r.cq != nil {
		_ = r.cq.Close()
	}
	if r.eq != nil {
		_ = r.eq.Close()
	}
}

// send is rdma_post_send of send_msg and rdma_get_send_comp.
func (r *rdmaEP) send() error {
	if err := r.ep.Send(r.mr.Bytes()[MessageSize:], r.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	return r.wait(1, "rdma_get_send_comp")
}

// wait waits for the completion of the operation whose context is op
// (0: the receive, 1: the send).
func (r *rdmaEP) wait(op uint64, what string) error {
	for {
		n, err := r.cq.ReadContext(r.ctx, r.one[:])
		if err != nil {
			// The peer may disconnect as soon as it has what it
			// wanted: take what completed before then.
			n = r.cq.Read(r.one[:])
		}
		if n == 0 && err != nil {
			select {
			case <-r.gone:
				return fmt.Errorf("%s: the peer disconnected first: %w", what, err)
			default:
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		if n == 0 {
			continue
		}
		if err := r.one[0].Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if r.one[0].Context == op {
			return nil
		}
	}
}

func (c RDMAConfig) withDefaults() RDMAConfig {
	if c.Provider == "" {
		c.Provider = fabric.ProviderSoftfabric
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	return c
}

// runCtx bounds ctx by c.Timeout.
func (c RDMAConfig) runCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.Timeout > 0 {
		return context.WithTimeout(ctx, c.Timeout)
	}
	return context.WithCancel(ctx)
}

// endStatus is the status rdma_server and rdma_client print at their
// end: 0, or -1 (their failing calls return -1 and set errno).
func endStatus(err error) int {
	if err != nil {
		return -1
	}
	return 0
}

// RDMAServer is librdmacm's rdma_server: it listens on cfg.Port, takes
// the first connection request (rdma_get_request), posts its receive
// and accepts, waits for the client's 16 bytes, answers with 16, waits
// for that send to complete and disconnects. It prints "rdma_server:
// start" and "rdma_server: end STATUS", as rdma_server does.
func RDMAServer(ctx context.Context, cfg RDMAConfig, stdout, stderr io.Writer) error {
	o := &out{stdout: stdout, stderr: stderr}
	o.printf("rdma_server: start")
	err := rdmaServer(ctx, cfg.withDefaults())
	o.printf("rdma_server: end %d", endStatus(err))
	return err
}

func rdmaServer(ctx context.Context, cfg RDMAConfig) error {
	ctx, cancel := cfg.runCtx(ctx)
	defer cancel()
	d, err := openDomain(ctx, cfg.Provider, cfg.Iface, cfg.Port, cfg.Addr, 1)
	if err != nil {
		return err
	}
	defer d.Close()
	eq, pep, err := d.Listen(16, nil)
	if err != nil {
		return fmt.Errorf("rdma_listen on %v: %w", netip.AddrPortFrom(d.Info.Src, cfg.Port), err)
	}
	defer eq.Close()
	defer pep.Close()
	var req fabric.Event
	for req.Kind != fabric.EventConnReq {
		if req, err = eq.Read(ctx); err != nil {
			return fmt.Errorf("rdma_get_request: %w", err)
		}
	}
	r, err := newRDMAEP(ctx, d, req.Info)
	if err != nil {
		_ = pep.Reject(req.Info, nil)
		return err
	}
	defer r.close()
	if err := r.ep.Accept(ctx, nil); err != nil {
		return fmt.Errorf("rdma_accept: %v: %w", req.Info.Dst, err)
	}
	err = r.wait(0, "rdma_get_recv_comp")
	if err == nil {
		err = r.send()
	}
	_ = r.ep.Shutdown() // rdma_disconnect, after a failure too
	return err
}

// RDMAClient is librdmacm's rdma_client: it posts its receive, connects
// to cfg.Addr port cfg.Port, sends 16 bytes, waits for that send to
// complete and for the server's 16 bytes, and disconnects. It prints
// "rdma_client: start" and "rdma_client: end STATUS", as rdma_client
// does.
func RDMAClient(ctx context.Context, cfg RDMAConfig, stdout, stderr io.Writer) error {
	o := &out{stdout: stdout, stderr: stderr}
	o.printf("rdma_client: start")
	err := rdmaClient(ctx, cfg.withDefaults())
	o.printf("rdma_client: end %d", endStatus(err))
	return err
}

func rdmaClient(ctx context.Context, cfg RDMAConfig) error {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return errors.New("the client needs the server's address (-s)")
	}
	ctx, cancel := cfg.runCtx(ctx)
	defer cancel()
	d, err := openDomain(ctx, cfg.Provider, cfg.Iface, cfg.Port, cfg.Source, 1)
	if err != nil {
		return err
	}
	defer d.Close()
	r, err := newRDMAEP(ctx, d, &d.Info)
	if err != nil {
		return err
	}
	defer r.close()
	server := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	cctx, ccancel := context.WithTimeout(ctx, DefaultConnectTimeout)
	err = r.ep.Connect(cctx, server, nil)
	ccancel()
	if err != nil {
		return fmt.Errorf("rdma_connect: %w", cmError(ctx, server, DefaultConnectTimeout, err))
	}
	err = r.send()
	if err == nil {
		err = r.wait(0, "rdma_get_recv_comp")
	}
	_ = r.ep.Shutdown() // rdma_disconnect
	return err
}
