package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
)

// Run is ucmatose's client (-s SERVER): it makes cfg.Connections
// connections to cfg.Server at once, waits for Count messages on each,
// answers each with Count messages, and waits for the server to
// disconnect them. It prints what cmatose prints, its last lines too;
// a connection that fails prints the rdma_cm event ("cmatose: event:
// RDMA_CM_EVENT_REJECTED, error: 8") and returns a *CMError.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return err
	}
	return client("cmatose", cfg.Server, stdout, stderr, func(o *out) error { return runClient(ctx, cfg, o) })
}

// client runs a tool's client (name: cmatose, udaddy) against server
// between the lines the tool prints first and last.
func client(name string, server netip.Addr, stdout, stderr io.Writer, run func(*out) error) error {
	if !server.IsValid() || server.IsUnspecified() {
		return errors.New("the client needs the server's address (-s)")
	}
	o := &out{stdout: stdout, stderr: stderr}
	o.printf("%s: starting client", name)
	err := run(o)
	o.printf("test complete")
	o.printf("return status %d", status(err))
	return err
}

func runClient(ctx context.Context, cfg Config, o *out) error {
	d, err := openDomain(ctx, cfg.Provider, cfg.Iface, cfg.Port, cfg.Bind, max(cfg.Count, 1))
	if err != nil {
		return err
	}
	defer d.Close()
	eq, err := d.Fab.EQ(4*cfg.Connections + 16)
	if err != nil {
		return fmt.Errorf("creating an event channel: %w", err)
	}
	defer eq.Close()
	dctx, cancelData := context.WithCancel(ctx)
	defer cancelData()
	ev := watch(ctx, eq, cfg.Connections, cancelData)
	defer ev.stop()

	// rdma_resolve_addr on every id at once; each sets its node up
	// (route_handler: init_node, post_recvs) and connects.
	o.printf("cmatose: connecting")
	server := netip.AddrPortFrom(cfg.Server, cfg.Port)
	nodes := make([]*node, cfg.Connections)
	defer func() { closeAll(nodes) }()
	first := connectAll(ctx, cfg.ConnectTimeout, o, "cmatose", len(nodes), func(cctx context.Context, i int) error {
		n, err := newNode(d, &d.Info, eq, cfg, i, clientRetryCount)
		if err != nil {
			return err
		}
		nodes[i] = n
		if err := n.ep.Connect(cctx, server, nil); err != nil {
			return cmError(ctx, server, cfg.ConnectTimeout, err)
		}
		n.connected = true
		return nil
	})
	if first != nil {
		shutdownAll(nodes)
		return first
	}

	if cfg.Count > 0 {
		o.printf("receiving data transfers")
		if err := pollAll(dctx, nodes, recvCQ, cfg.Count); err != nil {
			if ctx.Err() == nil && errors.Is(err, context.Canceled) {
				err = fmt.Errorf("the server disconnected before the data transfers completed: %w", err)
			}
			shutdownAll(nodes)
			return err
		}
		o.printf("sending replies")
		for _, n := range nodes {
			if err := n.postSends(cfg.Count); err != nil {
				shutdownAll(nodes)
				return err
			}
		}
		o.printf("data transfers complete")
	}
	if cfg.Migrate {
		o.printf("migrating to new event channel")
	}
	// disconnect_events: the server disconnects every connection.
	for left := cfg.Connections; left > 0; left-- {
		select {
		case <-ev.gone:
		case <-ctx.Done():
			shutdownAll(nodes)
			return fmt.Errorf("waiting for the server to disconnect (%d of %d connections left): %w", left, cfg.Connections, ctx.Err())
		}
	}
	for _, n := range nodes {
		n.connected = false // rdma_disconnect answers a disconnect: nothing more to send
	}
	return nil
}

// connectAll is connect_events after rdma_resolve_addr on every id at
// once: connect sets node i up and connects it, all at once, within
// timeout. The first failure is returned, its rdma_cm event printed as
// the tool (name) prints it ("cmatose: event: RDMA_CM_EVENT_REJECTED,
// error: 8"), and the others give up.
func connectAll(ctx context.Context, timeout time.Duration, o *out, name string, nodes int,
	connect func(ctx context.Context, i int) error) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make(chan error, nodes)
	for i := range nodes {
		go func() { errs <- connect(cctx, i) }()
	}
	var first error
	for range nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
			var ce *CMError
			if errors.As(err, &ce) {
				o.printf("%s: event: %s, error: %d", name, ce.Event, ce.Status)
			}
			cancel()
		}
	}
	return first
}
