package hfilink_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/hfilink"
)

// rma is one RC READ, WRITE or SEND (into a receive B posted) of size
// bytes between two modeled units (buffers off bytes past a page, filled
// at random), posted and not yet run: step p until done() reports its
// completion, or finish.
type rma struct {
	m          *hfidevice.ModelLinks
	p          *transporttest.Pair
	src, dst   []byte
	cs         []verbs.Completion
	size, data int // bytes, data packets (4 KiB MTU)
}

func newRMA(t *testing.T, cfg hfidevice.PairConfig, op verbs.Opcode, size, off int) *rma {
	t.Helper()
	m := newLinks(t, cfg)
	p := transporttest.NewLinkPair(m.Links[0][0], m.Links[1][0])
	qa, qb, err := p.ConnectRC(transporttest.RCOptions{MTU: 4096, SQDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	local, remote := pageBuf(size, off), pageBuf(size, off)
	x := &rma{m: m, p: p, src: remote, dst: local, cs: make([]verbs.Completion, 1), size: size, data: (size + 4095) / 4096}
	if op == verbs.OpWrite || op == verbs.OpSend {
		x.src, x.dst = local, remote
	}
	r := rand.New(rand.NewPCG(uint64(size), uint64(off)))
	for i := range x.src {
		x.src[i] = byte(r.Uint32())
	}
	access := mr.LocalWrite | mr.RemoteRead | mr.RemoteWrite
	la, err := p.A.MRs.Register(local, access)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := p.B.MRs.Register(remote, access)
	if err != nil {
		t.Fatal(err)
	}
	if op == verbs.OpSend {
		if err := qb.PostRecv(&verbs.RecvWR{ID: 2, SGL: []mr.SGE{transporttest.SGE(rb, 0, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	wr := verbs.SendWR{ID: 1, Op: op, Flags: verbs.Signaled, SGL: []mr.SGE{transporttest.SGE(la, 0, size)},
		RemoteAddr: rb.Addr(), RKey: rb.RKey()}
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	return x
}

func (x *rma) done() bool { return x.p.A.SendCQ.Poll(x.cs) == 1 }

// finish runs the operation to its completion and checks it byte for byte.
func (x *rma) finish(t *testing.T) {
	t.Helper()
	if err := x.p.RunUntil(x.done, 5_000_000); err != nil {
		t.Fatal(err)
	}
	if x.cs[0].Status != verbs.Success {
		t.Fatalf("completion %+v", x.cs[0])
	}
	if !bytes.Equal(x.src, x.dst) {
		i := 0
		for x.src[i] == x.dst[i] {
			i++
		}
		t.Fatalf("destination differs from byte %d of %d", i, x.size)
	}
}

func (x *rma) links() []*hfilink.Link { return []*hfilink.Link{x.m.Links[0][0], x.m.Links[1][0]} }
