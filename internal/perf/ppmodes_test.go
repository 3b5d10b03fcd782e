package perf

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/rdmacore"
)

// ppServer runs serve on b in the background; the returned function waits
// for it.
func ppServer(t *testing.T, serve func(context.Context, *Device, net.Listener) (PingPongResult, error), b *device.Device) (string, context.Context, func() (PingPongResult, error)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	type out struct {
		r   PingPongResult
		err error
	}
	c := make(chan out, 1)
	go func() {
		r, err := serve(ctx, OnDevice(b), ln)
		c <- out{r, err}
	}()
	return ln.Addr().String(), ctx, func() (PingPongResult, error) { o := <-c; return o.r, o.err }
}

func checkPair(t *testing.T, c, s PingPongResult, size, iters, qps int, mode string) {
	t.Helper()
	for _, r := range []PingPongResult{c, s} {
		if r.Iters != iters || r.Bytes != int64(size)*int64(iters)*2 || r.Mode != mode || len(r.Local) != qps || len(r.Remote) != qps {
			t.Fatalf("result %+v", r)
		}
		if !strings.Contains(r.String(), " bytes in ") || !strings.Contains(r.String(), "usec/iter") {
			t.Fatalf("result text %q", r)
		}
	}
	for i := range c.Local {
		if c.Local[i] != s.Remote[i] || s.Local[i] != c.Remote[i] {
			t.Fatalf("QP %d: client %+v / %+v, server %+v / %+v", i, c.Local[i], c.Remote[i], s.Local[i], s.Remote[i])
		}
	}
}

func TestUDPingPong(t *testing.T) {
	a, b := pair(t, memlink.Faults{})
	// Size 0 takes ibv_ud_pingpong's default, 1024: the largest a 1500-byte
	// link allows, exactly.
	srv := UDPingPong{Iters: 300}
	addr, ctx, wait := ppServer(t, srv.Serve, b)
	cl := UDPingPong{Iters: 300}
	c, err := cl.Run(ctx, OnDevice(a), addr)
	s, serr := wait()
	if err != nil || serr != nil {
		t.Fatalf("client: %v; server: %v", err, serr)
	}
	checkPair(t, c, s, 1024, 300, 1, "ud")
	if !strings.Contains(c.AddressLines(), "PSN 0x") {
		t.Fatalf("address lines %q", c.AddressLines())
	}
}

// TestUDPingPongMTU: as ibv_ud_pingpong, a message larger than the port's
// active MTU (or -m) is refused before the exchange.
func TestUDPingPongMTU(t *testing.T) {
	a, _ := pair(t, memlink.Faults{})
	for _, pp := range []UDPingPong{{Size: 2048}, {Size: 1024, MTU: 512}} {
		_, err := pp.Run(context.Background(), OnDevice(a), "127.0.0.1:1")
		if err == nil || !strings.Contains(err.Error(), "larger than port MTU") {
			t.Fatalf("size %d, MTU %d: %v", pp.Size, pp.MTU, err)
		}
	}
}

func TestSRQPingPong(t *testing.T) {
	for _, tc := range []struct {
		name   string
		qps    int
		iters  int
		faults memlink.Faults
	}{
		{"4qps", 4, 500, memlink.Faults{}},
		{"1qp", 1, 200, memlink.Faults{}},
		// The default 16 QPs over a link that loses, reorders and
		// duplicates: RC recovers; the SRQ feeds every QP.
		{"lossy", 0, 600, memlink.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, tc.faults)
			srv := SRQPingPong{QPs: tc.qps, Iters: tc.iters}
			addr, ctx, wait := ppServer(t, srv.Serve, b)
			cl := SRQPingPong{QPs: tc.qps, Iters: tc.iters}
			c, err := cl.Run(ctx, OnDevice(a), addr)
			s, serr := wait()
			if err != nil || serr != nil {
				t.Fatalf("client: %v; server: %v", err, serr)
			}
			qps := tc.qps
			if qps == 0 {
				qps = 16
			}
			checkPair(t, c, s, 4096, tc.iters, qps, "srq")
		})
	}
}

// TestSRQPingPongQPMismatch: the exchange does not carry the QP count;
// ends run with different -q notice the empty or extra slots.
func TestSRQPingPongQPMismatch(t *testing.T) {
	a, b := pair(t, memlink.Faults{})
	srv := SRQPingPong{QPs: 2, Iters: 10}
	addr, ctx, wait := ppServer(t, srv.Serve, b)
	cl := SRQPingPong{QPs: 4, Iters: 10}
	_, err := cl.Run(ctx, OnDevice(a), addr)
	_, serr := wait()
	if serr == nil || !strings.Contains(serr.Error(), "more than 2 QPs") {
		t.Fatalf("server: %v", serr)
	}
	if err == nil {
		t.Fatal("client: no error")
	}
}

func TestSRQPingPongBadParams(t *testing.T) {
	for _, pp := range []SRQPingPong{{QPs: 256}, {QPs: -1}, {Size: -5}, {MTU: 1500}} {
		pp.defaults()
		if err := pp.check(); err == nil {
			t.Errorf("%+v accepted", pp)
		}
	}
}

// The exchange's bytes, derived from rdma-core's libibverbs/examples:
//
// TestPPOutputVectors: the result lines are the tools'
//
//	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1000000., bytes * 8. / usec);
//	printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec / 1000000., usec / iters);
//
// with bytes = size * iters * 2 (srq_pingpong too: iters counts all QPs),
// and the address lines ud_pingpong's
//
//	"  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %s\n"
//	"  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n"
//
// (srq_pingpong has a comma before the local GID too), the GID from
// inet_ntop(AF_INET6).
func TestPPOutputVectors(t *testing.T) {
	r := PingPongResult{Bytes: 1024 * 1000 * 2, Iters: 1000, Elapsed: 1500 * time.Millisecond, Mode: "ud",
		Local:  []PPAddr{{QPInfo: fabric.QPInfo{QPN: 0x11, PSN: 0xabcdef, GID: netip.AddrFrom16(netip.MustParseAddr("198.18.0.1").As16())}}},
		Remote: []PPAddr{{QPInfo: fabric.QPInfo{QPN: 0x12, PSN: 0x000042}}}}
	if got, want := r.String(), "2048000 bytes in 1.50 seconds = 10.92 Mbit/sec\n1000 iters in 1.50 seconds = 1500.00 usec/iter\n"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	want := "  local address:  LID 0x0000, QPN 0x000011, PSN 0xabcdef: GID ::ffff:198.18.0.1\n" +
		"  remote address: LID 0x0000, QPN 0x000012, PSN 0x000042, GID ::\n"
	if got := r.AddressLines(); got != want {
		t.Errorf("ud address lines %q, want %q", got, want)
	}
	r.Mode = "srq"
	if got := r.AddressLines(); !strings.HasPrefix(got, "  local address:  LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:198.18.0.1\n") {
		t.Errorf("srq address lines %q", got)
	}
}

// cPeer plays an unmodified C tool's side of the exchange, byte by byte,
// against our server, and returns what the server wrote.
func cPeer(t *testing.T, addr string, msgs []string, reply int) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	for _, m := range msgs { // one write(sockfd, msg, sizeof msg) each
		if _, err := nc.Write(append([]byte(m), 0)); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, reply)
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatalf("reading the server's %d bytes: %v", reply, err)
	}
	if _, err := nc.Write([]byte("done\x00")); err != nil {
		t.Fatal(err)
	}
	return got
}

const cGID = "00000000000000000000ffff7f000001" // 127.0.0.1, where pair's devices live

// TestSRQExchangeBytes: our srq server reads ibv_srq_pingpong's 256
// messages and answers with exactly 256 of its own: its QPs, then zero
// slots.
func TestSRQExchangeBytes(t *testing.T) {
	_, b := pair(t, memlink.Faults{})
	srv := SRQPingPong{QPs: 3, Iters: 1}
	addr, _, wait := ppServer(t, func(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // no peer QPs behind the messages
		defer cancel()
		return srv.Serve(ctx, d, l)
	}, b)
	var msgs []string
	for i := 0; i < SRQMaxQP; i++ {
		m := "0000:000000:000000:" + rdmacore.ZeroWireGID
		if i < 3 {
			m = "0000:00010" + string(rune('0'+i)) + ":00000" + string(rune('0'+i)) + ":" + cGID
		}
		msgs = append(msgs, m)
	}
	got := cPeer(t, addr, msgs, rdmacore.SRQMaxQP*rdmacore.MsgSize)
	_, err := wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("server: %v, want the deadline (its peer QPs do not exist)", err)
	}
	zero := "0000:000000:000000:" + rdmacore.ZeroWireGID + "\x00"
	for i := 0; i < SRQMaxQP; i++ {
		m := string(got[i*rdmacore.MsgSize : (i+1)*rdmacore.MsgSize])
		if i >= 3 && m != zero {
			t.Fatalf("slot %d: %q, want %q", i, m, zero)
		}
		if i < 3 && (!strings.HasPrefix(m, "0000:") || !strings.HasSuffix(m, ":"+cGID+"\x00") || m[5:11] == "000000") {
			t.Fatalf("slot %d: %q", i, m)
		}
	}
}

// TestUDExchangeBytes: our UD server answers ibv_ud_pingpong's one message
// with one of 52 bytes, and refuses a peer that sent no GID (run without
// -g), which RoCE cannot address.
func TestUDExchangeBytes(t *testing.T) {
	_, b := pair(t, memlink.Faults{})
	srv := UDPingPong{Iters: 1}
	addr, _, wait := ppServer(t, func(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return srv.Serve(ctx, d, l)
	}, b)
	got := cPeer(t, addr, []string{"0000:000abc:000001:" + cGID}, rdmacore.MsgSize)
	if _, err := wait(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("server: %v", err)
	}
	if !strings.HasPrefix(string(got), "0000:") || !strings.HasSuffix(string(got), ":"+cGID+"\x00") || bytes.Count(got, []byte(":")) != 3 {
		t.Fatalf("server's message %q", got)
	}

	addr, _, wait = ppServer(t, srv.Serve, b)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("0000:000abc:000001:" + rdmacore.ZeroWireGID + "\x00")); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err == nil || !strings.Contains(err.Error(), "-g") {
		t.Fatalf("zero GID: %v", err)
	}
}
