package fabric_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// TestRDMACMNoListener: a connection request to a host whose domain runs
// but listens on nothing is rejected at once (Invalid Service ID, as
// Linux's CM answers), and the endpoint's EQ says so.
func TestRDMACMNoListener(t *testing.T) {
	for _, p := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
		t.Run(p.String(), func(t *testing.T) {
			srv := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
			cli := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ep := cli.ep(nil)
			start := time.Now()
			err := ep.Connect(ctx, netip.MustParseAddrPort(srv.addr+":7000"), []byte("hi"))
			if !errors.Is(err, fabric.ErrRejected) {
				t.Fatalf("connect to no listener: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("rejected after %v", d)
			}
			if ev, err := cli.eq.Read(ctx); err != nil || ev.Kind != fabric.EventRejected {
				t.Fatalf("EQ: %v %v", ev.Kind, err)
			}
		})
	}
}

// TestRDMACMNoHost: nobody has the address: Connect fails at once with
// ErrAddrNotAvail, as rdma_resolve_addr does.
func TestRDMACMNoHost(t *testing.T) {
	cli := newHost(t, hostOpts{typ: fabric.EPMsg, progress: fabric.ProgressAuto})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cli.ep(nil).Connect(ctx, netip.MustParseAddrPort(memAddr()+":7000"), nil)
	if !errors.Is(err, fabric.ErrAddrNotAvail) {
		t.Fatalf("connect to nobody: %v", err)
	}
}

// TestCMOption: OptCM picks the connection manager; a passive endpoint
// answers both, and the private data arrives as sent either way.
func TestCMOption(t *testing.T) {
	for _, cm := range []int{fabric.CMRDMA, fabric.CMTCP} {
		srv := newHost(t, hostOpts{typ: fabric.EPMsg, progress: fabric.ProgressAuto})
		cli := newHost(t, hostOpts{typ: fabric.EPMsg, progress: fabric.ProgressAuto})
		pep := listen(t, srv)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a := cli.ep(nil)
		must(t, a.SetOption(fabric.OptCM, cm))
		if v, err := a.GetOption(fabric.OptCM); err != nil || v != cm {
			t.Fatalf("OptCM reads %d %v, want %d", v, err, cm)
		}
		errc := make(chan error, 1)
		go func() { errc <- a.Connect(ctx, pep.Addr(), []byte("ask")) }()
		ev, err := srv.eq.Read(ctx)
		if err != nil || ev.Kind != fabric.EventConnReq || string(ev.Data) != "ask" {
			t.Fatalf("cm %d: request %v %q %v", cm, ev.Kind, ev.Data, err)
		}
		b := srv.ep(ev.Info)
		must(t, b.Accept(ctx, []byte("answer")))
		must(t, <-errc)
		if ev, err := cli.eq.Read(ctx); err != nil || ev.Kind != fabric.EventConnected || string(ev.Data) != "answer" {
			t.Fatalf("cm %d: connected %v %q %v", cm, ev.Kind, ev.Data, err)
		}
		must(t, a.Shutdown())
		if ev, err := srv.eq.Read(ctx); err != nil || ev.Kind != fabric.EventConnected {
			t.Fatalf("cm %d: server's connected event %v %v", cm, ev.Kind, err)
		}
		if ev, err := srv.eq.Read(ctx); err != nil || ev.Kind != fabric.EventShutdown {
			t.Fatalf("cm %d: server's shutdown event %v %v", cm, ev.Kind, err)
		}
		cancel()
	}
	ep := newHost(t, hostOpts{typ: fabric.EPMsg, progress: fabric.ProgressAuto}).ep(nil)
	isErr(t, "OptCM 7", ep.SetOption(fabric.OptCM, 7), fabric.ErrInvalid)
}

// TestListenBeforeDomain: fabtests' server order (fi_fabric, fi_eq_open,
// fi_passive_ep, fi_listen, then fi_domain from the connection request's
// info): the passive endpoint listens on RDMA-CM through a domain it
// opens itself, and the application's Domain call takes that one over.
// A passive endpoint closed before any Domain call gives its domain back,
// so the fabric closes.
func TestListenBeforeDomain(t *testing.T) {
	for _, p := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
		t.Run(p.String(), func(t *testing.T) {
			addr := memAddr()
			infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{Provider: fabric.ProviderMem, Node: addr,
				EPType: fabric.EPMsg, Service: 7300, Domain: fabric.DomainAttr{Progress: p}})
			must(t, err)
			info := infos[0]
			fab, err := fabric.OpenFabric(&info)
			must(t, err)
			eq, err := fab.EQ(16)
			must(t, err)
			pep, err := fab.PassiveEndpoint(&info)
			must(t, err)
			must(t, pep.Bind(eq))
			must(t, pep.Listen())

			cli := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			a := cli.ep(nil) // RDMA-CM, the default
			errc := make(chan error, 1)
			go func() { errc <- a.Connect(ctx, pep.Addr(), []byte("hello")) }()
			ev, err := eq.Read(ctx)
			if err != nil || ev.Kind != fabric.EventConnReq || string(ev.Data) != "hello" {
				t.Fatalf("request: %v %q %v", ev.Kind, ev.Data, err)
			}
			dom, err := fab.Domain(ev.Info)
			must(t, err)
			cq, err := dom.CQ(1024)
			must(t, err)
			b, err := dom.Endpoint(ev.Info)
			must(t, err)
			must(t, b.Bind(cq, 0))
			must(t, b.Bind(eq, 0))
			must(t, b.Enable())
			buf := make([]byte, 64)
			m, err := dom.RegisterMemory(buf, 0)
			must(t, err)
			must(t, b.Recv(buf, m.Desc(), fabric.AddrUnspec, 1))
			must(t, b.Accept(ctx, nil))
			must(t, <-errc)
			if ev, err := eq.Read(ctx); err != nil || ev.Kind != fabric.EventConnected {
				t.Fatalf("server connected: %v %v", ev.Kind, err)
			}
			src := cli.mr(64)
			copy(src.Bytes(), "over rdma-cm")
			must(t, a.Send(src.Bytes()[:12], src.Desc(), fabric.AddrUnspec, 2))
			waitOK(t, cli.cq)
			if c := waitOK(t, cq); string(buf[:c.Len]) != "over rdma-cm" {
				t.Fatalf("received %q", buf[:c.Len])
			}
			// fabtests closes the passive endpoint once connected: the
			// connection and the domain (now the application's) stay.
			must(t, pep.Close())
			must(t, a.Shutdown())
			if ev, err := eq.Read(ctx); err != nil || ev.Kind != fabric.EventShutdown {
				t.Fatalf("server shutdown: %v %v", ev.Kind, err)
			}
			for _, c := range []interface{ Close() error }{b, m, cq, dom, eq, fab} {
				must(t, c.Close())
			}

			// Listening, then closing without a Domain call: the domain
			// opened for it goes with it.
			fab, err = fabric.OpenFabric(&info)
			must(t, err)
			eq, err = fab.EQ(16)
			must(t, err)
			pep, err = fab.PassiveEndpoint(&info)
			must(t, err)
			must(t, pep.Bind(eq))
			must(t, pep.Listen())
			for _, c := range []interface{ Close() error }{pep, eq, fab} {
				must(t, c.Close())
			}
			// and the device is free for a domain again
			fab, err = fabric.OpenFabric(&info)
			must(t, err)
			dom, err = fab.Domain(&info)
			must(t, err)
			must(t, dom.Close())
			must(t, fab.Close())
		})
	}
}
