package ud_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

const qkey = 0x11111111

type fixture struct {
	p      *transporttest.Pair
	qa, qb *ud.QP
	ma, mb *mr.Region
	ah     *verbs.AddressHandle // A → B
}

func newUDQP(t *testing.T, h *transporttest.Host, qpn uint32, mtu int) *ud.QP {
	t.Helper()
	q, err := ud.New(ud.Config{QPN: qpn, MRs: h.MRs, SendCQ: h.SendCQ, RecvCQ: h.RecvCQ, RQ: verbs.NewRecvQueue(256)})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		a    verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, QKey: qkey, PKey: wire.DefaultPKey}, verbs.AttrState | verbs.AttrQKey | verbs.AttrPKey},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: mtu}, verbs.AttrState | verbs.AttrPathMTU},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: 100}, verbs.AttrState | verbs.AttrSQPSN},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Node.Attach(q); err != nil {
		t.Fatal(err)
	}
	return q
}

func newFixture(t *testing.T, ipv6 bool) *fixture {
	p := transporttest.NewPair(memlink.Config{})
	if ipv6 {
		p.A.IP = netip.MustParseAddr("2001:2::a")
		p.B.IP = netip.MustParseAddr("2001:2::b")
	}
	f := &fixture{p: p}
	f.qa = newUDQP(t, p.A, 0x21, 1024)
	f.qb = newUDQP(t, p.B, 0x42, 1024)
	var err error
	if f.ma, err = p.A.Buffer(1<<16, mr.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if f.mb, err = p.B.Buffer(1<<16, mr.LocalWrite); err != nil {
		t.Fatal(err)
	}
	f.ah, err = verbs.NewAddressHandle(wire.PathFields{SrcMAC: p.A.MAC, DstMAC: p.B.MAC, Src: p.A.IP, Dst: p.B.IP, SrcPort: wire.SourcePort(0x21, 0x42)}, 0x42, qkey)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) wait(t *testing.T, cq *verbs.CQ, n int) []verbs.Completion {
	t.Helper()
	if err := f.p.RunUntil(func() bool { return cq.Len() >= n }, 10000); err != nil {
		t.Fatalf("waiting for %d completions: %v", n, err)
	}
	out := make([]verbs.Completion, n)
	cq.Poll(out)
	return out
}

func TestDatagram(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		f := newFixture(t, ipv6)
		for i, n := range []int{0, 1, 100, 1024} {
			payload := f.ma.Bytes()[:n]
			for j := range payload {
				payload[j] = byte(i*7 + j)
			}
			if err := f.qb.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []mr.SGE{transporttest.SGE(f.mb, 0, ud.GRHSize+1024)}}); err != nil {
				t.Fatal(err)
			}
			op := []verbs.Opcode{verbs.OpSend, verbs.OpSendImm}[i%2]
			wr := verbs.SendWR{ID: uint64(i), Op: op, Flags: verbs.Signaled, Imm: 0xcafe, Dest: f.ah, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, n)}}
			if err := f.qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if c := f.wait(t, f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success || c.ByteLen != uint32(n) {
				t.Fatalf("send completion %+v", c)
			}
			c := f.wait(t, f.p.B.RecvCQ, 1)[0]
			if c.Status != verbs.Success || c.ByteLen != uint32(ud.GRHSize+n) || c.SrcQP != 0x21 || c.Flags&verbs.GRH == 0 {
				t.Fatalf("receive completion %+v", c)
			}
			if got := netip.AddrFrom16(c.SrcGID).Unmap(); got != f.p.A.IP {
				t.Fatalf("source GID %v, want %v", got, f.p.A.IP)
			}
			if (op == verbs.OpSendImm) != (c.Flags&verbs.WithImm != 0) || op == verbs.OpSendImm && c.Imm != 0xcafe {
				t.Fatalf("immediate: %+v", c)
			}
			if !bytes.Equal(f.mb.Bytes()[ud.GRHSize:ud.GRHSize+n], payload) {
				t.Fatal("payload differs")
			}
			grh := f.mb.Bytes()[:ud.GRHSize]
			if ipv6 {
				if grh[0]>>4 != 6 || !bytes.Equal(grh[8:24], f.p.A.IP.AsSlice()) {
					t.Fatalf("GRH is not the IPv6 header: % x", grh)
				}
			} else if !bytes.Equal(grh[:20], make([]byte, 20)) || grh[20]>>4 != 4 || !bytes.Equal(grh[32:36], f.p.A.IP.AsSlice()) {
				t.Fatalf("GRH area is not 20 zero bytes and the IPv4 header: % x", grh)
			}
		}
	}
}

func TestQKeyViolation(t *testing.T) {
	f := newFixture(t, false)
	bad := *f.ah
	bad.QKey = qkey + 1
	if err := f.qb.PostRecv(&verbs.RecvWR{ID: 1, SGL: []mr.SGE{transporttest.SGE(f.mb, 0, 2000)}}); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.PostSend(&verbs.SendWR{ID: 1, Op: verbs.OpSend, Flags: verbs.Signaled, Dest: &bad, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 10)}}); err != nil {
		t.Fatal(err)
	}
	f.wait(t, f.p.A.SendCQ, 1)
	for i := 0; i < 100 && f.p.Step(); i++ {
	}
	if f.p.B.RecvCQ.Len() != 0 || f.qb.Stats().QKeyViolations != 1 {
		t.Fatalf("datagram with the wrong Q_Key delivered (stats %+v)", f.qb.Stats())
	}
	// A Q_Key with the high bit set in the work request uses the QP's own.
	own := *f.ah
	own.QKey = 0x80000000
	if err := f.qa.PostSend(&verbs.SendWR{ID: 2, Op: verbs.OpSend, Dest: &own, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 10)}}); err != nil {
		t.Fatal(err)
	}
	if c := f.wait(t, f.p.B.RecvCQ, 1)[0]; c.Status != verbs.Success {
		t.Fatalf("receive %+v", c)
	}
}

func TestNoReceiveAndTooLong(t *testing.T) {
	f := newFixture(t, false)
	send := func(n int) {
		if err := f.qa.PostSend(&verbs.SendWR{Op: verbs.OpSend, Dest: f.ah, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	send(10)
	for i := 0; i < 100 && f.p.Step(); i++ {
	}
	if f.qb.Stats().NoRecv != 1 {
		t.Fatalf("stats %+v: a datagram with no receive posted must be dropped and counted", f.qb.Stats())
	}
	if err := f.qb.PostRecv(&verbs.RecvWR{ID: 7, SGL: []mr.SGE{transporttest.SGE(f.mb, 0, ud.GRHSize+5)}}); err != nil {
		t.Fatal(err)
	}
	send(10)
	if c := f.wait(t, f.p.B.RecvCQ, 1)[0]; c.Status != verbs.LocLenErr || c.WRID != 7 {
		t.Fatalf("receive %+v, want a local length error", c)
	}
	if err := f.qa.PostSend(&verbs.SendWR{Op: verbs.OpSend, Dest: f.ah, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 1025)}}); err == nil {
		t.Fatal("datagram over the path MTU accepted")
	}
	if err := f.qa.PostSend(&verbs.SendWR{Op: verbs.OpWrite, Dest: f.ah}); err == nil {
		t.Fatal("RDMA write on a UD QP accepted")
	}
	if err := f.qa.PostSend(&verbs.SendWR{Op: verbs.OpSend}); err == nil {
		t.Fatal("datagram without an address handle accepted")
	}
}
