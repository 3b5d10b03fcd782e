package fabric_test

import (
	"testing"

	"github.com/softfabric/softfabric/fabric"
)

// pingPair connects two MSG endpoints for benchmarks and allocation
// checks: manual progress on one goroutine, no locks.
func pingPair(tb testing.TB, th fabric.Threading) (cli, srv *host, a, b *fabric.Endpoint) {
	cli = newHost(tb, hostOpts{typ: fabric.EPMsg, progress: fabric.ProgressManual, threading: th})
	srv = newHost(tb, hostOpts{typ: fabric.EPMsg, progress: fabric.ProgressManual, threading: th})
	a, b = connect(tb, cli, srv)
	return
}

// exchange sends one 64-byte message a→b and reads both completions.
func exchange(tb testing.TB, cli, srv *host, a, b *fabric.Endpoint, sm, rm *fabric.MR, out []fabric.Completion) {
	if err := b.Recv(rm.Bytes()[:64], rm.Desc(), fabric.AddrUnspec, 1); err != nil {
		tb.Fatal(err)
	}
	if err := a.Send(sm.Bytes()[:64], sm.Desc(), fabric.AddrUnspec, 2); err != nil {
		tb.Fatal(err)
	}
	for got := 0; got < 2; {
		got += cli.cq.Read(out)
		got += srv.cq.Read(out)
	}
}

// TestPostCompleteAllocs: posting and completing allocate nothing.
func TestPostCompleteAllocs(t *testing.T) {
	for _, th := range []fabric.Threading{fabric.ThreadSafe, fabric.ThreadDomain} {
		cli, srv, a, b := pingPair(t, th)
		sm, rm := cli.mr(4096), srv.mr(4096)
		out := make([]fabric.Completion, 16)
		exchange(t, cli, srv, a, b, sm, rm, out)
		if n := testing.AllocsPerRun(200, func() { exchange(t, cli, srv, a, b, sm, rm, out) }); n != 0 {
			t.Errorf("%v: %.1f allocations per message", th, n)
		}
		if n := testing.AllocsPerRun(200, func() {
			must(t, b.Recv(rm.Bytes()[:64], rm.Desc(), fabric.AddrUnspec, 1))
			must(t, a.Write(sm.Bytes()[:64], sm.Desc(), fabric.AddrUnspec, rm.Addr(), rm.Key(), 3))
			for cli.cq.Read(out) == 0 {
				srv.cq.Read(out)
			}
		}); n != 0 {
			t.Errorf("%v: %.1f allocations per write", th, n)
		}
	}
}

// BenchmarkMsgPingPong64: a 64-byte send and its receive through the
// whole API and transport, both ends on one goroutine.
func BenchmarkMsgPingPong64(b *testing.B) {
	for _, th := range []fabric.Threading{fabric.ThreadSafe, fabric.ThreadDomain} {
		b.Run(th.String(), func(b *testing.B) {
			cli, srv, ea, eb := pingPair(b, th)
			sm, rm := cli.mr(4096), srv.mr(4096)
			out := make([]fabric.Completion, 16)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				exchange(b, cli, srv, ea, eb, sm, rm, out)
			}
		})
	}
}
