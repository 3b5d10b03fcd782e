package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/softfabric/softfabric/fabric"
)

// Server is ucmatose's server (no -s), listening.
type Server struct {
	cfg Config
	o   *out
	d   *domain
	eq  *fabric.EQ
	pep *fabric.PassiveEndpoint
}

// Listen opens the device of cfg (the one with address cfg.Bind, if
// given) and listens there on cfg.Port, as run_server's rdma_bind_addr
// and rdma_listen do; it prints "cmatose: starting server" first, as
// cmatose does. Serve runs the test.
func Listen(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, o: &out{stdout: stdout, stderr: stderr}}
	s.o.printf("cmatose: starting server")
	var err error
	if s.d, err = openDomain(ctx, cfg.Provider, cfg.Iface, cfg.Port, cfg.Bind, max(cfg.Count, 1)); err != nil {
		s.end(err)
		return nil, err
	}
	// One event channel for the listener and every connection, as
	// cmatose has: requests, establishments and disconnects.
	s.eq, s.pep, err = s.d.Listen(4*cfg.Connections+64, nil)
	if err != nil {
		err = fmt.Errorf("cmatose: failure trying to listen on %v: %w", netip.AddrPortFrom(s.d.Info.Src, cfg.Port), err)
		s.Close()
		s.end(err)
		return nil, err
	}
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() netip.AddrPort { return s.pep.Addr() }

// Close stops listening and closes the device.
func (s *Server) Close() {
	if s.pep != nil {
		_ = s.pep.Close()
	}
	if s.eq != nil {
		_ = s.eq.Close()
	}
	if s.d != nil {
		s.d.Close()
		s.d = nil
	}
}

// end prints cmatose's last lines.
func (s *Server) end(err error) {
	s.o.printf("test complete")
	s.o.printf("return status %d", status(err))
}

// Serve is run_server from rdma_listen on: it accepts cfg.Connections
// requests, sends each Count messages, waits for its sends and then for
// Count messages from each, and disconnects them all. It prints what
// cmatose prints, its last lines too.
func (s *Server) Serve(ctx context.Context) error {
	err := s.serve(ctx)
	s.end(err)
	return err
}

func (s *Server) serve(ctx context.Context) error {
	cfg := s.cfg
	dctx, cancelData := context.WithCancel(ctx)
	defer cancelData()
	ev := watch(ctx, s.eq, cfg.Connections, cancelData)
	defer ev.stop()
	nodes := make([]*node, 0, cfg.Connections)
	defer func() { closeAll(nodes) }()

	// connect_events: each request accepted in turn, until every
	// connection is established.
	for len(nodes) < cfg.Connections {
		var req fabric.Event
		select {
		case req = <-ev.reqs:
		case <-ctx.Done():
			return fmt.Errorf("waiting for connection %d of %d: %w", len(nodes)+1, cfg.Connections, ctx.Err())
		}
		n, err := s.accept(ctx, req, len(nodes))
		if n != nil {
			nodes = append(nodes, n)
		}
		if err != nil {
			return err
		}
	}
	// Later requests: cmatose has no node left for them.
	stop, rejecting := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(rejecting)
		for {
			select {
			case req := <-ev.reqs:
				s.o.printf("cmatose: failing connection request")
				_ = s.pep.Reject(req.Info, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-rejecting
	}()

	if cfg.Count > 0 {
		s.o.printf("initiating data transfers")
		for _, n := range nodes {
			if err := n.postSends(cfg.Count); err != nil {
				return err
			}
		}
		s.o.printf("completing sends")
		if err := pollAll(dctx, nodes, sendCQ, cfg.Count); err != nil {
			return s.early(ctx, err)
		}
		s.o.printf("receiving data transfers")
		if err := pollAll(dctx, nodes, recvCQ, cfg.Count); err != nil {
			return s.early(ctx, err)
		}
		s.o.printf("data transfers complete")
	}
	if cfg.Migrate {
		s.o.printf("migrating to new event channel")
	}
	s.o.printf("cmatose: disconnecting")
	shutdownAll(nodes)
	s.o.printf("disconnected")
	return nil
}

// early explains a transfer cut short: by the run's end, or by a client
// that disconnected.
func (s *Server) early(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("a client disconnected before the data transfers completed: %w", err)
	}
	return err
}

// accept is connect_handler: a node for the request, its receives
// posted, then rdma_accept (no private data, rdma_accept's defaults).
// It returns the node once the connection is established.
func (s *Server) accept(ctx context.Context, req fabric.Event, id int) (*node, error) {
	n, err := newNode(s.d, req.Info, s.eq, s.cfg, id, 0)
	if err != nil {
		s.o.printf("cmatose: failing connection request")
		_ = s.pep.Reject(req.Info, nil)
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	if err := n.ep.Accept(actx, nil); err != nil {
		n.close()
		s.o.printf("cmatose: failing connection request")
		return nil, fmt.Errorf("cmatose: failure accepting %v: %w", req.Info.Dst, err)
	}
	n.connected = true
	return n, nil
}
