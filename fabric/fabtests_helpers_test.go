package fabric_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// Helpers of the fabtests conformance suite (fabtests_unit_test.go,
// fabtests_func_test.go), on top of helpers_test.go's.

// newHostHints is newHost with the hints adjusted by mod before GetInfo.
func newHostHints(t testing.TB, o hostOpts, mod func(*fabric.Hints)) *host {
	t.Helper()
	h := &host{t: t}
	hints := &fabric.Hints{EPType: o.typ, Caps: o.caps, Service: o.service,
		Domain: fabric.DomainAttr{Progress: o.progress, Threading: o.threading}}
	if o.node == "" {
		h.addr = memAddr()
		hints.Provider, hints.Node = fabric.ProviderMem, h.addr
	} else {
		h.addr, hints.Node = o.node, o.node
	}
	if mod != nil {
		mod(hints)
	}
	infos, err := fabric.GetInfo(context.Background(), hints)
	if err != nil {
		t.Fatal(err)
	}
	h.info = infos[0]
	if h.fab, err = fabric.OpenFabric(&h.info); err != nil {
		t.Fatal(err)
	}
	if h.dom, err = h.fab.Domain(&h.info); err != nil {
		t.Fatal(err)
	}
	domains.Store(h.dom, true)
	if h.cq, err = h.dom.CQ(4096); err != nil {
		t.Fatal(err)
	}
	if h.eq, err = h.fab.EQ(64); err != nil {
		t.Fatal(err)
	}
	if h.av, err = h.dom.AV(16); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

// rawEP opens an endpoint and binds nothing; it is closed at cleanup.
func (h *host) rawEP(info *fabric.Info) *fabric.Endpoint {
	h.t.Helper()
	if info == nil {
		info = &h.info
	}
	ep, err := h.dom.Endpoint(info)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = ep.Close() })
	return ep
}

// cq opens another CQ on the host, closed at cleanup.
func (h *host) newCQ(size int) *fabric.CQ {
	h.t.Helper()
	q, err := h.dom.CQ(size)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = q.Close() })
	return q
}

// counter opens a counter, closed at cleanup.
func (h *host) counter() *fabric.Counter {
	h.t.Helper()
	c, err := h.dom.Counter()
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

// pair makes two hosts of type typ with one endpoint each that know each
// other (DGRAM, RDM): a's AV index of b is ab, b's of a is ba.
func pair(t *testing.T, typ fabric.EPType, p fabric.Progress, mod func(*fabric.Hints)) (ha, hb *host, a, b *fabric.Endpoint, ab, ba fabric.Addr) {
	t.Helper()
	ha = newHostHints(t, hostOpts{typ: typ, progress: p}, mod)
	hb = newHostHints(t, hostOpts{typ: typ, progress: p}, mod)
	a, b = ha.ep(nil), hb.ep(nil)
	var err error
	if ab, err = ha.av.Insert(b.Name()); err != nil {
		t.Fatal(err)
	}
	if ba, err = hb.av.Insert(a.Name()); err != nil {
		t.Fatal(err)
	}
	return
}

// msgPair makes two MSG hosts and a connection between them.
func msgPair(t *testing.T, p fabric.Progress, mod func(*fabric.Hints)) (hc, hs *host, a, b *fabric.Endpoint) {
	t.Helper()
	hc = newHostHints(t, hostOpts{typ: fabric.EPMsg, progress: p}, mod)
	hs = newHostHints(t, hostOpts{typ: fabric.EPMsg, progress: p}, mod)
	a, b = connect(t, hc, hs)
	return
}

// listen opens a passive endpoint on the server's EQ.
func listen(t testing.TB, server *host) *fabric.PassiveEndpoint {
	t.Helper()
	pep, err := server.fab.PassiveEndpoint(&server.info)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pep.Close() })
	must(t, pep.Bind(server.eq))
	must(t, pep.Listen())
	return pep
}

// connectVia connects a new endpoint of client to pep's server; open makes
// the server's endpoint from the request (nil: server.ep).
func connectVia(t testing.TB, client, server *host, pep *fabric.PassiveEndpoint, open func(*fabric.Info) *fabric.Endpoint) (a, b *fabric.Endpoint) {
	t.Helper()
	if open == nil {
		open = server.ep
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a = client.ep(nil)
	errc := make(chan error, 1)
	go func() { errc <- a.Connect(ctx, pep.Addr(), nil) }()
	ev, err := server.eq.Read(ctx)
	if err != nil || ev.Kind != fabric.EventConnReq {
		t.Fatalf("server EQ: %v %v", ev.Kind, err)
	}
	b = open(ev.Info)
	must(t, b.Accept(ctx, nil))
	must(t, <-errc)
	for _, h := range []*host{client, server} {
		if ev, err := h.eq.Read(ctx); err != nil || ev.Kind != fabric.EventConnected {
			t.Fatalf("EQ: %v %v", ev.Kind, err)
		}
	}
	return a, b
}

// pattern fills b with bytes that depend on seed and the position.
func pattern(b []byte, seed int) []byte {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + 1)
	}
	return b
}

// quiet drives every domain for d and fails on any completion on cq.
func quiet(t testing.TB, cq *fabric.CQ, d time.Duration) {
	t.Helper()
	var c [1]fabric.Completion
	for end := time.Now().Add(d); time.Now().Before(end); {
		if cq.Read(c[:]) > 0 {
			t.Fatalf("unexpected completion %+v", c[0])
		}
		driveAll()
		time.Sleep(50 * time.Microsecond)
	}
}

// waitCount waits until counter reaches n, driving every domain.
func waitCount(t testing.TB, c *fabric.Counter, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Read() < n {
		if time.Now().After(deadline) {
			t.Fatalf("counter at %d, want %d", c.Read(), n)
		}
		driveAll()
	}
}

// isErr fails unless err matches want.
func isErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// sizes of the functional tests' messages.
func msgSizes(max int) []int {
	var out []int
	for _, n := range []int{0, 1, 7, 64, 65, 1000, 4096, 4097, 16 << 10, 64 << 10, 256 << 10} {
		if n <= max {
			out = append(out, n)
		}
	}
	return out
}

// settle returns once the receives posted on eps are on their queue
// pairs: a datagram that finds none is dropped, as on any UD queue pair.
// Manual progress submits them when h's domain is driven; automatic
// progress on the worker's pass after the one that runs an exec (Stats).
func settle(h *host, eps ...*fabric.Endpoint) {
	h.dom.Progress()
	for _, ep := range eps {
		ep.Stats()
		ep.Stats()
	}
}
