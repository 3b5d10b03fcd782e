package fabric_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// TestSIDR: a DGRAM passive endpoint hears a SIDR request as an
// EventConnReq and accepts it with an endpoint; the requester's AV holds
// that endpoint's queue pair, and datagrams flow both ways, with the
// Q_Key the SIDR reply named.
func TestSIDR(t *testing.T) {
	for _, p := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
		t.Run(p.String(), func(t *testing.T) {
			srv := newHost(t, hostOpts{typ: fabric.EPDgram, progress: p, service: 4000})
			cli := newHost(t, hostOpts{typ: fabric.EPDgram, progress: p, service: 4001})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pep, err := srv.fab.PassiveEndpoint(&srv.info)
			must(t, err)
			defer pep.Close()
			must(t, pep.Bind(srv.eq))
			must(t, pep.Listen())

			a := cli.ep(nil)
			type result struct {
				x    fabric.Addr
				data []byte
				err  error
			}
			res := make(chan result, 1)
			go func() {
				x, data, err := cli.av.InsertCM(ctx, netip.MustParseAddrPort(srv.addr+":7174"), []byte("who"))
				res <- result{x, data, err}
			}()
			// Nobody listens on 7174 yet: refused.
			r := <-res
			if !errors.Is(r.err, fabric.ErrRejected) {
				t.Fatalf("resolving an unlistened port: %v", r.err)
			}
			go func() {
				x, data, err := cli.av.InsertCM(ctx, netip.MustParseAddrPort(srv.addr+":4000"), []byte("who"))
				res <- result{x, data, err}
			}()
			ev := readEvent(t, ctx, srv.eq)
			if ev.Kind != fabric.EventConnReq || string(ev.Data) != "who" || ev.Info.Dst.Addr().String() != cli.addr {
				t.Fatalf("request %v %q from %v", ev.Kind, ev.Data, ev.Info.Dst)
			}
			b, err := srv.dom.Endpoint(ev.Info)
			must(t, err)
			must(t, b.SetOption(fabric.OptQKey, 0x5555))
			must(t, b.Bind(srv.cq, 0))
			must(t, b.Bind(srv.av, 0))
			must(t, b.Enable())
			defer b.Close()
			must(t, b.Accept(ctx, []byte("me")))
			r = <-res
			must(t, r.err)
			if string(r.data) != "me" {
				t.Errorf("reply private data %q", r.data)
			}
			if got, _ := cli.av.Lookup(r.x); got.QPN != b.Name().QPN {
				t.Fatalf("resolved %v, endpoint is %v", got, b.Name())
			}
			// Client to server: the send uses Q_Key 0x5555 (the endpoint's
			// own is the default, which the server's QP would drop). A
			// datagram that comes before the worker took the receive is
			// dropped, as UD does: send until one arrives.
			rm := srv.mr(64)
			rb := rm.Bytes()
			must(t, b.Recv(rb, rm.Desc(), fabric.AddrUnspec, 2))
			buf := cli.mr(64)
			copy(buf.Bytes(), "ping")
			var got [1]fabric.Completion
			for try := 0; srv.cq.Read(got[:]) == 0; try++ {
				if try == 100 {
					t.Fatal("no datagram arrived in 100 tries")
				}
				retry(t, cli.cq, func() error { return a.SendData(buf.Bytes()[:4], buf.Desc(), 0x77, r.x, 1) })
				sc := wait(t, cli.cq)
				must(t, sc.Err())
				time.Sleep(20 * time.Millisecond)
				driveAll()
			}
			if c := got[0]; c.Context != 2 || c.Err() != nil || string(rb[:c.Len]) != "ping" || c.Data != 0x77 {
				t.Fatalf("server got %+v: %q", c, rb[:min(c.Len, len(rb))])
			}
			// Refusal by the application.
			go func() {
				_, _, err := cli.av.InsertCM(ctx, netip.MustParseAddrPort(srv.addr+":4000"), nil)
				res <- result{err: err}
			}()
			ev = readEvent(t, ctx, srv.eq)
			must(t, pep.Reject(ev.Info, nil))
			if r := <-res; !errors.Is(r.err, fabric.ErrRejected) {
				t.Fatalf("refused: %v", r.err)
			}
		})
	}
}

func readEvent(t testing.TB, ctx context.Context, eq *fabric.EQ) fabric.Event {
	t.Helper()
	ev, err := eq.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestSIDRNoHost: nobody has the address: ErrAddrNotAvail at once; bad
// arguments: ErrInvalid.
func TestSIDRNoHost(t *testing.T) {
	cli := newHost(t, hostOpts{typ: fabric.EPDgram, progress: fabric.ProgressAuto})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := cli.av.InsertCM(ctx, netip.MustParseAddrPort(memAddr()+":7174"), nil); !errors.Is(err, fabric.ErrAddrNotAvail) {
		t.Fatalf("resolving nobody: %v", err)
	}
	if _, _, err := cli.av.InsertCM(ctx, netip.AddrPort{}, nil); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("resolving no address: %v", err)
	}
	if _, _, err := cli.av.InsertCM(ctx, netip.MustParseAddrPort(cli.addr+":1"), make([]byte, 200)); !errors.Is(err, fabric.ErrInvalid) {
		t.Fatalf("too much private data: %v", err)
	}
}
