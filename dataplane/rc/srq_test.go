package rc_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// TestSRQ: several queue pairs consume receives from one shared receive
// queue; each completion names the queue pair the message came in on.
func TestSRQ(t *testing.T) {
	p := transporttest.NewPair(memlink.Config{})
	srq := verbs.NewSRQ(64)
	src, err := p.A.Buffer(1<<16, all)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := p.B.Buffer(1<<16, all)
	if err != nil {
		t.Fatal(err)
	}
	var senders, receivers [3]uint32
	for i := range senders {
		qa, qb, err := p.ConnectRC(transporttest.RCOptions{BRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		senders[i], receivers[i] = qa.QPN(), qb.QPN()
		if i == 0 {
			if err := qb.PostRecv(&verbs.RecvWR{}); err != nil || srq.Len() != 1 {
				t.Fatalf("posting through a QP of the SRQ: %v, %d queued", err, srq.Len())
			}
			srq.Pop()
		}
		fill(src.Bytes()[i*1000:i*1000+1000], uint64(i))
		if err := qa.PostSend(&verbs.SendWR{ID: uint64(i), Op: verbs.OpSend, Flags: verbs.Signaled, SGL: sge(src, i*1000, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := srq.Post(&verbs.RecvWR{ID: uint64(100 + i), SGL: sge(dst, i*2000, 2000)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RunUntil(func() bool { return p.B.RecvCQ.Len() == 3 && p.A.SendCQ.Len() == 3 }, 10000); err != nil {
		t.Fatal(err)
	}
	cs := make([]verbs.Completion, 3)
	p.B.RecvCQ.Poll(cs)
	seen := map[uint32]bool{}
	for _, c := range cs {
		if c.Status != verbs.Success || c.ByteLen != 1000 {
			t.Fatalf("completion %+v", c)
		}
		k := -1
		for i, q := range receivers {
			if q == c.QPN {
				k = i
			}
		}
		if k < 0 || seen[c.QPN] {
			t.Fatalf("completion names QP %d, not one of %v once", c.QPN, receivers)
		}
		seen[c.QPN] = true
		slot := int(c.WRID - 100)
		if !bytes.Equal(dst.Bytes()[slot*2000:slot*2000+1000], src.Bytes()[k*1000:k*1000+1000]) {
			t.Fatalf("message from QP %d landed wrong", c.QPN)
		}
	}
	if srq.Len() != 0 {
		t.Fatalf("%d receives left on the SRQ", srq.Len())
	}
}

// TestIPv6AndVLAN runs the RC operations over IPv6 and over an 802.1Q tag.
func TestIPv6AndVLAN(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		vlan bool
	}{{"ipv6", true, false}, {"vlan", false, true}, {"ipv6+vlan", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := transporttest.NewPair(memlink.Config{})
			if tc.v6 {
				p.A.IP = netip.MustParseAddr("2001:2::1")
				p.B.IP = netip.MustParseAddr("2001:2::2")
			}
			p.A.VLAN, p.B.VLAN = tc.vlan, tc.vlan
			qa, qb, err := p.ConnectRC(transporttest.RCOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f := &fixture{t: t, p: p, qa: qa, qb: qb}
			if f.ma, err = p.A.Buffer(1<<16, all); err != nil {
				t.Fatal(err)
			}
			if f.mb, err = p.B.Buffer(1<<16, all); err != nil {
				t.Fatal(err)
			}
			fill(f.ma.Bytes()[:5000], 1)
			f.postRecv(1, 0, 8000)
			f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpSend, SGL: sge(f.ma, 0, 5000)})
			f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: sge(f.ma, 0, 5000), RemoteAddr: f.mb.Addr() + 10000, RKey: f.mb.RKey()})
			f.postSend(verbs.SendWR{ID: 3, Op: verbs.OpRead, SGL: sge(f.ma, 20000, 5000), RemoteAddr: f.mb.Addr() + 10000, RKey: f.mb.RKey()})
			for _, c := range f.wait(p.A.SendCQ, 3) {
				if c.Status != verbs.Success {
					t.Fatalf("completion %+v", c)
				}
			}
			if !bytes.Equal(f.mb.Bytes()[:5000], f.ma.Bytes()[:5000]) || !bytes.Equal(f.ma.Bytes()[20000:25000], f.ma.Bytes()[:5000]) {
				t.Fatal("data differs")
			}
			if s := p.A.Node.Stats(); s.Malformed+s.BadICRC+s.UnknownQP != 0 {
				t.Fatalf("engine dropped frames: %+v", s)
			}
		})
	}
}
