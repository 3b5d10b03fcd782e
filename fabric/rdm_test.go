package fabric_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/fabric/internal/amo"
)

// rdmPair makes two RDM endpoints that know each other: a's AV index of
// b is ab, b's of a is ba.
func rdmPair(t *testing.T, p fabric.Progress) (ha, hb *host, a, b *fabric.Endpoint, ab, ba fabric.Addr) {
	ha = newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
	hb = newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
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

// TestRDM is fabtests' fi_rdm: messages between unconnected reliable
// endpoints, the connection made on first use, both ways, data verified,
// with remote CQ data and the source reported.
func TestRDM(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ha, hb, a, b, ab, ba := rdmPair(t, p)
		sm, rm := ha.mr(8192), hb.mr(8192)
		for i := range sm.Bytes() {
			sm.Bytes()[i] = byte(i*13 + 1)
		}
		// Sends posted before the connection exists wait for it.
		for i := 0; i < 8; i++ {
			must(t, a.SendData(sm.Bytes()[i*100:i*100+100+i], sm.Desc(), uint64(i), ab, uint64(100+i)))
		}
		for i := 0; i < 8; i++ {
			must(t, b.Recv(rm.Bytes()[i*1000:(i+1)*1000], rm.Desc(), fabric.AddrUnspec, uint64(200+i)))
		}
		for i := 0; i < 8; i++ {
			c := waitOK(t, hb.cq)
			if c.Context != uint64(200+i) || c.Len != 100+i || c.Data != uint64(i) || c.Src != ba ||
				c.Flags != fabric.FlagRecv|fabric.FlagMsg|fabric.FlagRemoteCQData || !bytes.Equal(c.Buf, sm.Bytes()[i*100:i*100+100+i]) {
				t.Fatalf("recv %d: %+v", i, c)
			}
		}
		for i := 0; i < 8; i++ {
			if c := waitOK(t, ha.cq); c.Context != uint64(100+i) {
				t.Fatalf("send %d completed as %#x", i, c.Context)
			}
		}
		// The other way, on the connection b makes.
		must(t, a.Recv(sm.Bytes()[:64], sm.Desc(), fabric.AddrUnspec, 1))
		must(t, b.Send(rm.Bytes()[:10], rm.Desc(), ba, 2))
		waitOK(t, hb.cq)
		if c := waitOK(t, ha.cq); c.Len != 10 || c.Src != ab {
			t.Fatalf("reverse: %+v", c)
		}
		// RMA through the RDM endpoint.
		must(t, a.Write(sm.Bytes()[:300], sm.Desc(), ab, rm.Addr()+5000, rm.Key(), 3))
		waitOK(t, ha.cq)
		if !bytes.Equal(rm.Bytes()[5000:5300], sm.Bytes()[:300]) {
			t.Fatal("RDM write")
		}
		// An unknown address is refused at once.
		if err := a.Send(sm.Bytes()[:1], sm.Desc(), 99, 4); !errors.Is(err, fabric.ErrAddrNotAvail) {
			t.Fatalf("send to an unknown address: %v", err)
		}
	})
}

// TestRDMTagged covers fi_rdm_tagged_peek, unexpected_msg and recv_cancel:
// tags with ignore masks, messages that arrive before their receives,
// PEEK/CLAIM/DISCARD, and a cancelled receive.
func TestRDMTagged(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ha, hb, a, b, ab, _ := rdmPair(t, p)
		sm, rm := ha.mr(4096), hb.mr(4096)
		// Unexpected: five tagged messages before any receive.
		for i := 0; i < 5; i++ {
			sm.Bytes()[i] = byte('a' + i)
			must(t, a.TSend(sm.Bytes()[i:i+1], sm.Desc(), ab, uint64(0x100+i), uint64(i)))
		}
		for i := 0; i < 5; i++ {
			waitOK(t, ha.cq)
		}
		// Peek finds 0x102 without taking it; a miss is ErrNoMsg.
		m := fabric.Msg{Addr: fabric.AddrUnspec, Tag: 0x102, Context: 50}
		must(t, b.TRecvMsg(&m, fabric.FlagPeek))
		if c := waitOK(t, hb.cq); c.Tag != 0x102 || c.Len != 1 || c.Context != 50 {
			t.Fatalf("peek: %+v", c)
		}
		m = fabric.Msg{Addr: fabric.AddrUnspec, Tag: 0x999, Context: 51}
		must(t, b.TRecvMsg(&m, fabric.FlagPeek))
		if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrNoMsg) {
			t.Fatalf("peek miss: %+v", c)
		}
		// Claim 0x103, then receive it by its context.
		m = fabric.Msg{Addr: fabric.AddrUnspec, Tag: 0x103, Context: 52}
		must(t, b.TRecvMsg(&m, fabric.FlagPeek|fabric.FlagClaim))
		waitOK(t, hb.cq)
		m = fabric.Msg{IOV: [][]byte{rm.Bytes()[:16]}, Desc: []fabric.Desc{rm.Desc()}, Addr: fabric.AddrUnspec, Context: 52}
		must(t, b.TRecvMsg(&m, fabric.FlagClaim))
		if c := waitOK(t, hb.cq); c.Tag != 0x103 || string(c.Buf) != "d" {
			t.Fatalf("claim: %+v", c)
		}
		// Discard 0x104 by peek.
		m = fabric.Msg{Addr: fabric.AddrUnspec, Tag: 0x104, Context: 53}
		must(t, b.TRecvMsg(&m, fabric.FlagPeek|fabric.FlagDiscard))
		waitOK(t, hb.cq)
		// Ignore mask: 0x1f0 ignoring the low byte takes the oldest: 0x100.
		must(t, b.TRecv(rm.Bytes()[100:116], rm.Desc(), fabric.AddrUnspec, 0x1f0, 0xff, 60))
		if c := waitOK(t, hb.cq); c.Tag != 0x100 || string(c.Buf) != "a" || c.Flags != fabric.FlagRecv|fabric.FlagTagged {
			t.Fatalf("ignore mask: %+v", c)
		}
		for _, want := range []string{"b", "c"} {
			must(t, b.TRecv(rm.Bytes()[200:216], rm.Desc(), fabric.AddrUnspec, 0, ^uint64(0), 61))
			if c := waitOK(t, hb.cq); string(c.Buf) != want {
				t.Fatalf("remaining: got %q want %q", c.Buf, want)
			}
		}
		// Nothing is left: a receive waits, and cancel completes it.
		must(t, b.TRecv(rm.Bytes()[300:316], rm.Desc(), fabric.AddrUnspec, 0x777, 0, 70))
		must(t, b.Cancel(70))
		if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrCanceled) || c.Context != 70 {
			t.Fatalf("cancel: %+v", c)
		}
		if err := b.Cancel(70); !errors.Is(err, fabric.ErrNoMsg) {
			t.Fatalf("second cancel: %v", err)
		}
		// A later message still matches a later receive.
		must(t, b.TRecv(rm.Bytes()[400:416], rm.Desc(), fabric.AddrUnspec, 0x777, 0, 71))
		must(t, a.TSend([]byte{}, fabric.Desc{}, ab, 0x777, 9))
		if c := waitOK(t, hb.cq); c.Context != 71 || c.Len != 0 {
			t.Fatalf("after cancel: %+v", c)
		}
	})
}

// TestRDMMultiRecv is fabtests' multi_recv: one buffer takes several
// messages, each reported with its part; the last reports FlagMultiRecv.
func TestRDMMultiRecv(t *testing.T) {
	ha, hb, a, b, ab, _ := rdmPair(t, fabric.ProgressAuto)
	must(t, b.SetOption(fabric.OptMinMultiRecv, 101))
	sm, rm := ha.mr(4096), hb.mr(1000)
	m := fabric.Msg{IOV: [][]byte{rm.Bytes()}, Desc: []fabric.Desc{rm.Desc()}, Addr: fabric.AddrUnspec, Context: 5}
	must(t, b.RecvMsg(&m, fabric.FlagMultiRecv))
	for i := 0; i < 4; i++ {
		for j := 0; j < 300; j++ {
			sm.Bytes()[i*300+j] = byte(i + 1)
		}
		must(t, a.Send(sm.Bytes()[i*300:i*300+300], sm.Desc(), ab, uint64(i)))
	}
	off := 0
	for i := 0; i < 3; i++ {
		c := waitOK(t, hb.cq)
		if c.Len != 300 || c.Context != 5 || c.Buf[0] != byte(i+1) || &c.Buf[0] != &rm.Bytes()[off] {
			t.Fatalf("part %d: %+v", i, c)
		}
		if (i == 2) != (c.Flags&fabric.FlagMultiRecv != 0) {
			t.Fatalf("part %d flags %v", i, c.Flags)
		}
		off += 300
	}
	// The fourth waits for another buffer.
	must(t, b.Recv(rm.Bytes()[900:1000], rm.Desc(), fabric.AddrUnspec, 6))
	if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrTruncated) || c.Context != 6 {
		t.Fatalf("fourth: %+v", c)
	}
}

// TestRDMAtomic is fabtests' rdm_atomic -o all: every op on every type in
// every form, the target memory and fetched values checked against the
// same op done locally.
func TestRDMAtomic(t *testing.T) {
	ha, hb, a, _, ab, _ := rdmPair(t, fabric.ProgressAuto)
	target := hb.mr(4096)
	buf := ha.mr(4096)
	tested := 0
	for op := fabric.AtomicOp(0); op < fabric.NumAtomicOps; op++ {
		for dt := fabric.Datatype(0); dt < fabric.NumDatatypes; dt++ {
			for k := fabric.AtomicBase; k <= fabric.AtomicCompare; k++ {
				count, _, err := a.AtomicValid(op, dt, k)
				if err != nil {
					continue
				}
				n := min(count, 3) * dt.Size()
				tgt := target.Bytes()[:n]
				operand, cmp, res := buf.Bytes()[:n], buf.Bytes()[1024:1024+n], buf.Bytes()[2048:2048+n]
				for i := 0; i < n; i++ {
					tgt[i] = byte(i*5 + 3)
					operand[i] = byte(i*7 + 1)
					cmp[i] = tgt[i]
					if i%3 == 0 {
						cmp[i] ^= 1
					}
				}
				wantTgt, wantRes := refAtomic(op, dt, k, tgt, operand, cmp)
				switch k {
				case fabric.AtomicBase:
					must(t, a.Atomic(op, dt, operand, buf.Desc(), ab, target.Addr(), target.Key(), 1))
				case fabric.AtomicFetch:
					must(t, a.FetchAtomic(op, dt, operand, buf.Desc(), res, buf.Desc(), ab, target.Addr(), target.Key(), 1))
				case fabric.AtomicCompare:
					must(t, a.CompareAtomic(op, dt, operand, buf.Desc(), cmp, buf.Desc(), res, buf.Desc(), ab, target.Addr(), target.Key(), 1))
				}
				c := waitOK(t, ha.cq)
				if c.Flags&fabric.FlagAtomic == 0 {
					t.Fatalf("%v %v %d: flags %v", op, dt, k, c.Flags)
				}
				if !bytes.Equal(tgt, wantTgt) {
					t.Fatalf("%v %v kind %d: target %x, want %x", op, dt, k, tgt, wantTgt)
				}
				if k != fabric.AtomicBase && !bytes.Equal(res, wantRes) {
					t.Fatalf("%v %v kind %d: result %x, want %x", op, dt, k, res, wantRes)
				}
				tested++
			}
		}
	}
	if tested < 250 {
		t.Fatalf("only %d combinations tested", tested)
	}
	// A bad key: the target refuses, the requester sees ErrRemoteAccess.
	must(t, a.FetchAtomic(fabric.AtomicMin, fabric.Int32, buf.Bytes()[:4], buf.Desc(), buf.Bytes()[8:12], buf.Desc(), ab, target.Addr(), target.Key()^1, 2))
	if c := wait(t, ha.cq); !errors.Is(c.Err(), fabric.ErrRemoteAccess) {
		t.Fatalf("bad key: %+v", c)
	}
}

// refAtomic computes an atomic's effect on copies (amo's own tests check
// it against typed Go arithmetic; here it stands for the target).
func refAtomic(op fabric.AtomicOp, dt fabric.Datatype, k fabric.AtomicKind, tgt, operand, cmp []byte) (newTgt, res []byte) {
	newTgt = bytes.Clone(tgt)
	res = make([]byte, len(tgt))
	var c []byte
	if k == fabric.AtomicCompare {
		c = cmp
	}
	o := operand
	if op == fabric.AtomicRead {
		o = nil
	}
	if err := amo.Apply(amo.Op(op), amo.Datatype(dt), amo.Kind(k), newTgt, o, c, res); err != nil {
		panic(err)
	}
	return newTgt, res
}
