package fabric_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// memHost numbers in-process devices apart across tests.
var memHost atomic.Uint32

// memAddr returns a fresh in-process device address in 198.18.0.0/15.
func memAddr() string {
	n := memHost.Add(1)
	return fmt.Sprintf("198.18.%d.%d", 100+n/250, 1+n%250)
}

// host is one side of a test: a fabric, domain, CQ, EQ, AV.
type host struct {
	t    testing.TB
	info fabric.Info
	fab  *fabric.Fabric
	dom  *fabric.Domain
	cq   *fabric.CQ
	eq   *fabric.EQ
	av   *fabric.AV
	addr string
}

type hostOpts struct {
	typ       fabric.EPType
	progress  fabric.Progress
	threading fabric.Threading
	caps      fabric.Caps
	service   uint16
	node      string // a real device's address; "" for an in-process one
}

func newHost(t testing.TB, o hostOpts) *host {
	t.Helper()
	return newHostHints(t, o, nil)
}

func (h *host) close() {
	domains.Delete(h.dom)
	for _, c := range []interface{ Close() error }{h.av, h.eq, h.cq, h.dom, h.fab} {
		if err := c.Close(); err != nil {
			h.t.Errorf("closing %T: %v", c, err)
		}
	}
}

// ep opens, binds and enables an endpoint of the host's type.
func (h *host) ep(info *fabric.Info) *fabric.Endpoint {
	h.t.Helper()
	if info == nil {
		info = &h.info
	}
	ep, err := h.dom.Endpoint(info)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := ep.Bind(h.cq, 0); err != nil {
		h.t.Fatal(err)
	}
	if err := ep.Bind(h.eq, 0); err != nil {
		h.t.Fatal(err)
	}
	if info.EP.Type != fabric.EPMsg {
		if err := ep.Bind(h.av, 0); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := ep.Enable(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = ep.Close() })
	return ep
}

// mr registers n bytes.
func (h *host) mr(n int) *fabric.MR {
	h.t.Helper()
	m, err := h.dom.RegisterMemory(make([]byte, n), 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = m.Close() })
	return m
}

// domains are the open test domains: waiting drives them all, as the
// peer processes of a real run would drive theirs with manual progress.
var domains sync.Map

// driveAll drives every open domain with manual progress once.
func driveAll() {
	domains.Range(func(k, _ any) bool {
		k.(*fabric.Domain).Progress()
		return true
	})
}

// wait reads one completion from cq within 10 s.
func wait(t testing.TB, cq *fabric.CQ) fabric.Completion {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var c [1]fabric.Completion
	for cq.Read(c[:]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no completion in 10 s")
		}
		driveAll()
	}
	return c[0]
}

// waitOK reads one completion and fails the test on an error status.
func waitOK(t testing.TB, cq *fabric.CQ) fabric.Completion {
	t.Helper()
	c := wait(t, cq)
	if err := c.Err(); err != nil {
		t.Fatalf("completion %#x (%v): %v", c.Context, c.Flags, err)
	}
	return c
}

// connect makes a connected MSG endpoint pair: a on client, b on server.
func connect(t testing.TB, client, server *host) (a, b *fabric.Endpoint) {
	t.Helper()
	pep, err := server.fab.PassiveEndpoint(&server.info)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pep.Close() })
	if err := pep.Bind(server.eq); err != nil {
		t.Fatal(err)
	}
	if err := pep.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a = client.ep(nil)
	errc := make(chan error, 1)
	go func() { errc <- a.Connect(ctx, pep.Addr(), []byte("hello")) }()
	ev, err := server.eq.Read(ctx)
	if err != nil || ev.Kind != fabric.EventConnReq {
		t.Fatalf("server EQ: %v %v", ev.Kind, err)
	}
	if string(ev.Data) != "hello" {
		t.Fatalf("private data %q", ev.Data)
	}
	b = server.ep(ev.Info)
	if err := b.Accept(ctx, []byte("welcome")); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, h := range []*host{client, server} {
		ev, err := h.eq.Read(ctx)
		if err != nil || ev.Kind != fabric.EventConnected {
			t.Fatalf("EQ: %v %v", ev.Kind, err)
		}
		if h == client && string(ev.Data) != "welcome" {
			t.Fatalf("reply private data %q", ev.Data)
		}
	}
	return a, b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// retry posts until the post does not fail with ErrAgain, reading the CQ
// in between (which drives manual progress).
func retry(t testing.TB, cq *fabric.CQ, post func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := post()
		if !errors.Is(err, fabric.ErrAgain) {
			must(t, err)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("post: still ErrAgain after 10 s")
		}
		cq.Read(nil)
		driveAll()
	}
}

var _ = netip.Addr{}
