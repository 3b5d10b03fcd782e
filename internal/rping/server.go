package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"

	"github.com/softfabric/softfabric/fabric"
)

// Server is rping's server (-s), listening.
type Server struct {
	cfg Config
	o   *out
	d   *domain
	eq  *fabric.EQ
	pep *fabric.PassiveEndpoint
}

// Listen opens the device of cfg (the one with address cfg.Addr, if
// given) and listens there on cfg.Port, as rping's rdma_bind_addr and
// rdma_listen do. Its output goes to stdout and stderr, as rping's.
func Listen(ctx context.Context, cfg Config, stdout, stderr io.Writer) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, o: &out{stdout: stdout, stderr: stderr, debug: cfg.Debug}}
	var err error
	if s.d, err = openDomain(ctx, cfg, cfg.Addr); err != nil {
		return nil, err
	}
	s.eq, s.pep, err = s.d.Listen(16, func() {
		s.o.debugf("rdma_bind_addr successful")
		s.o.debugf("rdma_listen")
	})
	if err != nil {
		at := netip.AddrPortFrom(s.d.Info.Src, cfg.Port)
		s.Close()
		return nil, fmt.Errorf("rdma_listen on %v: %w", at, err)
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

// Serve serves one client until it disconnects (rping's success), then
// stops listening; a persistent server serves every client, each on its
// own connection at once, until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	if !s.cfg.Persistent {
		c, err := s.accept(ctx)
		if err != nil {
			return err
		}
		defer c.close()
		_ = s.pep.Close() // later clients are refused
		if err := c.serve(s.cfg); err != nil && !errors.Is(err, errDisconnected) {
			return err
		}
		return nil
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := s.accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, fabric.ErrClosed) {
				return err
			}
			s.o.errorf("%v", err) // rping's persistent server goes on
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.close()
			if err := c.serve(s.cfg); err != nil && !errors.Is(err, errDisconnected) {
				s.o.errorf("rping server failed: %v", err)
			}
		}()
	}
}

// accept waits for a connection request and accepts it on a connection
// set up as rping sets one up (receive posted first).
func (s *Server) accept(ctx context.Context) (*conn, error) {
	var ev fabric.Event
	for ev.Kind != fabric.EventConnReq {
		var err error
		if ev, err = s.eq.Read(ctx); err != nil {
			return nil, err
		}
	}
	s.o.debugf("cma_event type RDMA_CM_EVENT_CONNECT_REQUEST (parent)")
	c, err := newConn(ctx, s.d, ev.Info, s.cfg.Size, true, s.o)
	if err != nil {
		_ = s.pep.Reject(ev.Info, nil)
		return nil, fmt.Errorf("setup_qp failed: %w", err)
	}
	s.o.debugf("accepting client connection request")
	actx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	if err := c.ep.Accept(actx, nil); err != nil {
		c.close()
		return nil, fmt.Errorf("connect error: accepting %v: %w", ev.Info.Dst, err)
	}
	c.state = stateConnected
	return c, nil
}

// serve is rping_test_server: it reads each ping's data from the client,
// then writes it back, until the client disconnects.
func (c *conn) serve(cfg Config) error {
	buf := c.rdma.Bytes()
	for {
		if err := c.expect(stateReadAdv); err != nil {
			return err
		}
		c.o.debugf("server received sink adv")
		src := c.peer
		if int(src.size) > len(buf) {
			return fmt.Errorf("the client's ping data is %d bytes, more than this server's %d (-S)", src.size, len(buf))
		}
		if err := c.post(func() error {
			return c.ep.Read(buf[:src.size], c.rdma.Desc(), fabric.AddrUnspec, src.addr, uint64(src.rkey), opRead)
		}, func() {}); err != nil {
			return err
		}
		c.o.debugf("server posted rdma read req ")
		if err := c.expect(stateReadComplete); err != nil {
			return err
		}
		c.o.debugf("server received read complete")
		if cfg.Verbose {
			c.o.printf("server ping data: %s", cstring(buf))
		}
		if err := c.sendInfo(info{}); err != nil { // go ahead
			return err
		}
		c.o.debugf("server posted go ahead")

		if err := c.expect(stateWriteAdv); err != nil {
			return err
		}
		c.o.debugf("server received sink adv")
		sink := c.peer
		// rping writes strlen(rdma_buf) + 1 bytes; never more than the
		// sink holds.
		n := min(len(cstring(buf))+1, len(buf), int(sink.size))
		c.o.debugf("rdma write from lkey %x laddr %x len %d", c.rdma.Key(), c.rdma.Addr(), n)
		if err := c.post(func() error {
			return c.ep.Write(buf[:n], c.rdma.Desc(), fabric.AddrUnspec, sink.addr, uint64(sink.rkey), opWrite)
		}, func() {}); err != nil {
			return err
		}
		if err := c.expect(stateWriteComplete); err != nil {
			return err
		}
		c.o.debugf("server rdma write complete ")
		if err := c.sendInfo(info{}); err != nil { // go ahead
			return err
		}
		c.o.debugf("server posted go ahead")
	}
}
