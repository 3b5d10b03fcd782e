package rc_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

const all = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic

type fixture struct {
	t      *testing.T
	p      *transporttest.Pair
	qa, qb *rc.QP
	ma, mb *mr.Region // 2 MiB each, all access
}

func newFixture(t *testing.T, cfg memlink.Config, o transporttest.RCOptions) *fixture {
	t.Helper()
	p := transporttest.NewPair(cfg)
	qa, qb, err := p.ConnectRC(o)
	if err != nil {
		t.Fatal(err)
	}
	ma, err := p.A.Buffer(2<<20, all)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := p.B.Buffer(2<<20, all)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, p: p, qa: qa, qb: qb, ma: ma, mb: mb}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// wait runs until cq holds n completions and returns them.
func (f *fixture) wait(cq *verbs.CQ, n int) []verbs.Completion {
	f.t.Helper()
	if err := f.p.RunUntil(func() bool { return cq.Len() >= n }, 1_000_000); err != nil {
		f.t.Fatalf("waiting for %d completions (have %d): %v", n, cq.Len(), err)
	}
	out := make([]verbs.Completion, n)
	if got := cq.Poll(out); got != n {
		f.t.Fatalf("polled %d, want %d", got, n)
	}
	return out
}

func (f *fixture) postSend(wr verbs.SendWR) {
	f.t.Helper()
	wr.Flags |= verbs.Signaled
	if err := f.qa.PostSend(&wr); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) postRecv(id uint64, off, n int) {
	f.t.Helper()
	if err := f.qb.PostRecv(&verbs.RecvWR{ID: id, SGL: []mr.SGE{transporttest.SGE(f.mb, off, n)}}); err != nil {
		f.t.Fatal(err)
	}
}

var sizes = []int{0, 1, 3, 255, 256, 1023, 1024, 1025, 4096, 65536, 1 << 20}

func TestSend(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: mtu})
		for i, n := range sizes {
			fill(f.ma.Bytes()[:n], uint64(i))
			clear(f.mb.Bytes())
			f.postRecv(uint64(100+i), 0, 1<<20)
			op := []verbs.Opcode{verbs.OpSend, verbs.OpSendImm}[i%2]
			f.postSend(verbs.SendWR{ID: uint64(i), Op: op, Imm: 0xdeadbeef, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, n)}})
			sc := f.wait(f.p.A.SendCQ, 1)[0]
			rcv := f.wait(f.p.B.RecvCQ, 1)[0]
			if sc.Status != verbs.Success || sc.WRID != uint64(i) || sc.Opcode != verbs.CompSend {
				t.Fatalf("mtu %d size %d: send completion %+v", mtu, n, sc)
			}
			if rcv.Status != verbs.Success || rcv.WRID != uint64(100+i) || rcv.ByteLen != uint32(n) || rcv.Opcode != verbs.CompRecv {
				t.Fatalf("mtu %d size %d: recv completion %+v", mtu, n, rcv)
			}
			if (op == verbs.OpSendImm) != (rcv.Flags&verbs.WithImm != 0) || op == verbs.OpSendImm && rcv.Imm != 0xdeadbeef {
				t.Fatalf("mtu %d size %d: immediate %+v", mtu, n, rcv)
			}
			if !bytes.Equal(f.mb.Bytes()[:n], f.ma.Bytes()[:n]) {
				t.Fatalf("mtu %d size %d: data differs", mtu, n)
			}
		}
	}
}

func TestWriteRead(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		f := newFixture(t, memlink.Config{}, transporttest.RCOptions{MTU: mtu})
		for i, n := range sizes {
			src := f.ma.Bytes()[:n]
			fill(src, uint64(i))
			f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, n)}, RemoteAddr: f.mb.Addr() + 7, RKey: f.mb.RKey()})
			if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success || c.Opcode != verbs.CompWrite || c.ByteLen != uint32(n) {
				t.Fatalf("write %d: %+v", n, c)
			}
			if !bytes.Equal(f.mb.Bytes()[7:7+n], src) {
				t.Fatalf("mtu %d: write of %d bytes differs", mtu, n)
			}
			// Read it back into another part of A's buffer.
			dst := f.ma.Bytes()[1<<20 : 1<<20+n]
			clear(dst)
			f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpRead, SGL: []mr.SGE{transporttest.SGE(f.ma, 1<<20, n)}, RemoteAddr: f.mb.Addr() + 7, RKey: f.mb.RKey()})
			if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success || c.Opcode != verbs.CompRead || c.ByteLen != uint32(n) {
				t.Fatalf("read %d: %+v", n, c)
			}
			if !bytes.Equal(dst, src) {
				t.Fatalf("mtu %d: read of %d bytes differs", mtu, n)
			}
		}
	}
}

func TestWriteImm(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	f.postRecv(9, 0, 0)
	fill(f.ma.Bytes()[:5000], 3)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpWriteImm, Imm: 0x01020304, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 5000)}, RemoteAddr: f.mb.Addr() + 100, RKey: f.mb.RKey()})
	f.wait(f.p.A.SendCQ, 1)
	c := f.wait(f.p.B.RecvCQ, 1)[0]
	if c.Status != verbs.Success || c.Opcode != verbs.CompRecvWriteImm || c.Imm != 0x01020304 || c.Flags&verbs.WithImm == 0 || c.WRID != 9 || c.ByteLen != 5000 {
		t.Fatalf("completion %+v", c)
	}
	if !bytes.Equal(f.mb.Bytes()[100:5100], f.ma.Bytes()[:5000]) {
		t.Fatal("data differs")
	}
}

func TestSendInvalidate(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	target, err := f.p.B.Buffer(64, all)
	if err != nil {
		t.Fatal(err)
	}
	f.postRecv(1, 0, 64)
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpSendInv, Imm: target.RKey(), SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 10)}})
	f.wait(f.p.A.SendCQ, 1)
	c := f.wait(f.p.B.RecvCQ, 1)[0]
	if c.Status != verbs.Success || c.Flags&verbs.WithInv == 0 || c.Imm != target.RKey() {
		t.Fatalf("completion %+v", c)
	}
	if _, err := f.p.B.MRs.Remote(target.RKey(), target.Addr(), 8, mr.RemoteWrite); err == nil {
		t.Fatal("rkey still valid after SEND_WITH_INV")
	}
	// A write with the invalidated rkey now fails with a remote access error.
	f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 8)}, RemoteAddr: target.Addr(), RKey: target.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.RemAccessErr {
		t.Fatalf("write to invalidated rkey: %+v", c)
	}
}

func TestAtomics(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	word := f.mb.Bytes()[64:72]
	binary.NativeEndian.PutUint64(word, 40)
	res := func() uint64 { return binary.NativeEndian.Uint64(f.ma.Bytes()[8:16]) }
	f.postSend(verbs.SendWR{ID: 1, Op: verbs.OpFetchAdd, CompareAdd: 2, SGL: []mr.SGE{transporttest.SGE(f.ma, 8, 8)}, RemoteAddr: f.mb.Addr() + 64, RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success || c.Opcode != verbs.CompFetchAdd || res() != 40 {
		t.Fatalf("fetch-add: %+v, result %d", c, res())
	}
	f.postSend(verbs.SendWR{ID: 2, Op: verbs.OpCmpSwap, CompareAdd: 42, Swap: 7, SGL: []mr.SGE{transporttest.SGE(f.ma, 8, 8)}, RemoteAddr: f.mb.Addr() + 64, RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success || res() != 42 {
		t.Fatalf("cmp-swap hit: %+v, result %d", c, res())
	}
	f.postSend(verbs.SendWR{ID: 3, Op: verbs.OpCmpSwap, CompareAdd: 42, Swap: 9, SGL: []mr.SGE{transporttest.SGE(f.ma, 8, 8)}, RemoteAddr: f.mb.Addr() + 64, RKey: f.mb.RKey()})
	if c := f.wait(f.p.A.SendCQ, 1)[0]; c.Status != verbs.Success || res() != 7 {
		t.Fatalf("cmp-swap miss: %+v, result %d", c, res())
	}
	if v := binary.NativeEndian.Uint64(word); v != 7 {
		t.Fatalf("remote word %d, want 7", v)
	}
}

// TestOrderingAndFence: completions come in posting order; a fenced send
// waits for the read before it.
func TestOrderingAndFence(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	for i := 0; i < 50; i++ {
		f.postRecv(uint64(i), i*1000, 1000)
	}
	for i := 0; i < 50; i++ {
		var wr verbs.SendWR
		switch i % 3 {
		case 0:
			wr = verbs.SendWR{Op: verbs.OpSend, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 900)}}
		case 1:
			wr = verbs.SendWR{Op: verbs.OpRead, SGL: []mr.SGE{transporttest.SGE(f.ma, 1<<20, 3000)}, RemoteAddr: f.mb.Addr(), RKey: f.mb.RKey()}
		case 2:
			wr = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Fence, SGL: []mr.SGE{transporttest.SGE(f.ma, 0, 2000)}, RemoteAddr: f.mb.Addr() + 1<<20, RKey: f.mb.RKey()}
		}
		wr.ID = uint64(i)
		f.postSend(wr)
	}
	cs := f.wait(f.p.A.SendCQ, 50)
	for i, c := range cs {
		if c.WRID != uint64(i) || c.Status != verbs.Success {
			t.Fatalf("completion %d: %+v", i, c)
		}
	}
}

// TestUnsignaled: only signaled requests complete, but all take effect.
func TestUnsignaled(t *testing.T) {
	f := newFixture(t, memlink.Config{}, transporttest.RCOptions{})
	for i := 0; i < 10; i++ {
		wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, SGL: []mr.SGE{transporttest.SGE(f.ma, i, 1)}, RemoteAddr: f.mb.Addr() + uint64(i), RKey: f.mb.RKey()}
		if i == 9 {
			wr.Flags = verbs.Signaled
		}
		f.ma.Bytes()[i] = byte(i + 1)
		if err := f.qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	cs := f.wait(f.p.A.SendCQ, 1)
	if cs[0].WRID != 9 || f.p.A.SendCQ.Len() != 0 {
		t.Fatalf("completions %+v, %d more", cs, f.p.A.SendCQ.Len())
	}
	if !bytes.Equal(f.mb.Bytes()[:10], f.ma.Bytes()[:10]) {
		t.Fatal("writes missing")
	}
}

func TestStateMachine(t *testing.T) {
	mrs := mr.NewTable(4)
	q, err := rc.New(rc.Config{QPN: 5, MRs: mrs, SendCQ: verbs.NewCQ(8), RecvCQ: verbs.NewCQ(8), RQ: verbs.NewRecvQueue(8)})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PostSend(&verbs.SendWR{}); err == nil {
		t.Fatal("post send in RESET accepted")
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState); err == nil {
		t.Fatal("RESET to RTS accepted")
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.StateInit}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState); err == nil {
		t.Fatal("INIT to RTR without path accepted")
	}
	bad := verbs.QPAttr{PathMTU: 3000}
	if err := q.Modify(&bad, verbs.AttrPathMTU); err == nil {
		t.Fatal("path MTU 3000 accepted")
	}
	if err := q.Modify(&verbs.QPAttr{RetryCnt: 8}, verbs.AttrRetryCnt); err == nil {
		t.Fatal("retry count 8 accepted")
	}
}
