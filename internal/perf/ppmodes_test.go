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

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/device"
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
	srv := UDPingPong{Iters: 300, WireGID: testWire, ParseWireGID: testParse}
	addr, ctx, wait := ppServer(t, srv.Serve, b)
	cl := UDPingPong{Iters: 300, WireGID: testWire, ParseWireGID: testParse}
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
		pp.WireGID, pp.ParseWireGID = testWire, testParse
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
			srv := SRQPingPong{QPs: tc.qps, Iters: tc.iters, WireGID: testWire, ParseWireGID: testParse}
			addr, ctx, wait := ppServer(t, srv.Serve, b)
			cl := SRQPingPong{QPs: tc.qps, Iters: tc.iters, WireGID: testWire, ParseWireGID: testParse}
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
	srv := SRQPingPong{QPs: 2, Iters: 10, WireGID: testWire, ParseWireGID: testParse}
	addr, ctx, wait := ppServer(t, srv.Serve, b)
	cl := SRQPingPong{QPs: 4, Iters: 10, WireGID: testWire, ParseWireGID: testParse}
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
//	char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
//	sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, gid);  /* gid_to_wire_gid */
//	write(sockfd, msg, sizeof msg);
//
// sizeof msg is 51 characters and the NUL: 52 bytes, the NUL last. On
// RoCE the LID is 0. gid_to_wire_gid prints the GID's 16 bytes in order as
// 32 lowercase hex digits (see ctrl.TestWireGIDVector), so the IPv4-mapped
// GID of 198.18.0.1 is 00000000000000000000ffffc6120001. Without -g the
// tools send memset-zero GIDs: 32 zeros.
func TestPPAddrVectors(t *testing.T) {
	gid := netip.MustParseAddr("198.18.0.1")
	for _, tc := range []struct {
		a    PPAddr
		want string
	}{
		{PPAddr{QPN: 0x11, PSN: 0xabcdef, GID: gid}, "0000:000011:abcdef:00000000000000000000ffffc6120001\x00"},
		{PPAddr{LID: 0x1a, QPN: 0xfffffe, PSN: 0x000001, GID: netip.MustParseAddr("fd00:198:18::2")}, "001a:fffffe:000001:fd000198001800000000000000000002\x00"},
		// srq_pingpong's unused slots (memset(my_dest, 0, ...)) and a
		// tool run without -g.
		{PPAddr{}, "0000:000000:000000:00000000000000000000000000000000\x00"},
	} {
		got := encodePPAddr(ctrl.WireGID, tc.a)
		if string(got) != tc.want || len(got) != 52 {
			t.Errorf("encode %+v = %q (%d bytes), want %q", tc.a, got, len(got), tc.want)
		}
		back, err := decodePPAddr(ctrl.ParseWireGID, got)
		wantGID := tc.a.GID
		if !wantGID.IsValid() {
			wantGID = netip.IPv6Unspecified()
		}
		if err != nil || back.LID != tc.a.LID || back.QPN != tc.a.QPN || back.PSN != tc.a.PSN || back.GID.Unmap() != wantGID.Unmap() {
			t.Errorf("decode %q = %+v, %v", got, back, err)
		}
	}
	// sscanf's %x takes upper case too.
	if a, err := decodePPAddr(ctrl.ParseWireGID, []byte("0000:00ABCD:0000FF:00000000000000000000FFFFC6120001\x00")); err != nil || a.QPN != 0xabcd || a.PSN != 0xff || a.GID.Unmap() != gid {
		t.Errorf("upper case: %+v, %v", a, err)
	}
	if string(ppDone) != "done\x00" { // write(sockfd, "done", sizeof "done")
		t.Errorf("done = %q", ppDone)
	}
}

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
		Local:  []PPAddr{{QPN: 0x11, PSN: 0xabcdef, GID: netip.AddrFrom16(netip.MustParseAddr("198.18.0.1").As16())}},
		Remote: []PPAddr{{QPN: 0x12, PSN: 0x000042}}}
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
	srv := SRQPingPong{QPs: 3, Iters: 1, WireGID: ctrl.WireGID, ParseWireGID: ctrl.ParseWireGID}
	addr, _, wait := ppServer(t, func(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // no peer QPs behind the messages
		defer cancel()
		return srv.Serve(ctx, d, l)
	}, b)
	var msgs []string
	for i := 0; i < SRQMaxQP; i++ {
		m := "0000:000000:000000:" + zeroWireGID
		if i < 3 {
			m = "0000:00010" + string(rune('0'+i)) + ":00000" + string(rune('0'+i)) + ":" + cGID
		}
		msgs = append(msgs, m)
	}
	got := cPeer(t, addr, msgs, SRQMaxQP*ppMsgSize)
	_, err := wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("server: %v, want the deadline (its peer QPs do not exist)", err)
	}
	zero := "0000:000000:000000:" + zeroWireGID + "\x00"
	for i := 0; i < SRQMaxQP; i++ {
		m := string(got[i*ppMsgSize : (i+1)*ppMsgSize])
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
	srv := UDPingPong{Iters: 1, WireGID: ctrl.WireGID, ParseWireGID: ctrl.ParseWireGID}
	addr, _, wait := ppServer(t, func(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		return srv.Serve(ctx, d, l)
	}, b)
	got := cPeer(t, addr, []string{"0000:000abc:000001:" + cGID}, ppMsgSize)
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
	if _, err := nc.Write([]byte("0000:000abc:000001:" + zeroWireGID + "\x00")); err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); err == nil || !strings.Contains(err.Error(), "-g") {
		t.Fatalf("zero GID: %v", err)
	}
}
