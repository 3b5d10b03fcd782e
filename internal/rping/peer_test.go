package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// rawPeer is an rping server written from rping.c, on the fabric API
// alone, that decodes the client's infos itself and writes back data
// that differs from what it read: the client's -V must catch it.
type rawPeer struct {
	t   *testing.T
	ctx context.Context
	cq  *fabric.CQ
	ep  *fabric.Endpoint
	ctl *fabric.MR
	buf *fabric.MR
}

func (p *rawPeer) must(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

// wait reads completions until one with context want, skipping sends.
func (p *rawPeer) wait(want uint64) fabric.Completion {
	p.t.Helper()
	var c [1]fabric.Completion
	for {
		if _, err := p.cq.ReadContext(p.ctx, c[:]); err != nil {
			p.t.Fatal(err)
		}
		if err := c[0].Err(); err != nil {
			p.t.Fatalf("completion %d: %v", c[0].Context, err)
		}
		if c[0].Context == want {
			return c[0]
		}
	}
}

// recvInfo waits for a 16-byte rping_rdma_info and decodes it.
func (p *rawPeer) recvInfo() (addr uint64, rkey uint32, size uint32) {
	p.t.Helper()
	c := p.wait(1)
	if c.Len != 16 {
		p.t.Fatalf("the client sent %d bytes, want sizeof(struct rping_rdma_info) = 16", c.Len)
	}
	b := p.ctl.Bytes()
	addr, rkey, size = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
	p.must(p.ep.Recv(b[:16], p.ctl.Desc(), fabric.AddrUnspec, 1))
	return addr, rkey, size
}

func (p *rawPeer) goAhead() {
	p.must(p.ep.Send(p.ctl.Bytes()[16:32], p.ctl.Desc(), fabric.AddrUnspec, 2))
}

func TestValidateCatchesBadData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sa, ca := addrs()
	infos, err := fabric.GetInfo(ctx, &fabric.Hints{Provider: fabric.ProviderMem, Node: sa.String(), EPType: fabric.EPMsg, Service: DefaultPort})
	if err != nil {
		t.Fatal(err)
	}
	info := &infos[0]
	fab, err := fabric.OpenFabric(info)
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	dom, err := fab.Domain(info)
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	eq, err := fab.EQ(8)
	if err != nil {
		t.Fatal(err)
	}
	defer eq.Close()
	pep, err := fab.PassiveEndpoint(info)
	if err != nil {
		t.Fatal(err)
	}
	defer pep.Close()
	p := &rawPeer{t: t, ctx: ctx}
	p.must(pep.Bind(eq))
	p.must(pep.Listen())

	var out, errb syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Ping(ctx, Config{Provider: fabric.ProviderMem, Addr: sa, Source: ca, Count: 3, Validate: true, Verbose: true}, &out, &errb)
	}()
	ev, err := eq.Read(ctx)
	if err != nil || ev.Kind != fabric.EventConnReq || len(ev.Data) != 0 {
		t.Fatalf("connection request: %v %v, private data %q (rping sends none)", ev.Kind, err, ev.Data)
	}
	if p.cq, err = dom.CQ(1024); err != nil {
		t.Fatal(err)
	}
	defer p.cq.Close()
	if p.ep, err = dom.Endpoint(ev.Info); err != nil {
		t.Fatal(err)
	}
	defer p.ep.Close()
	p.must(p.ep.Bind(p.cq, 0))
	p.must(p.ep.Enable())
	if p.ctl, err = dom.RegisterMemory(make([]byte, 32), 0); err != nil {
		t.Fatal(err)
	}
	defer p.ctl.Close()
	if p.buf, err = dom.RegisterMemory(make([]byte, DefaultSize), 0); err != nil {
		t.Fatal(err)
	}
	defer p.buf.Close()
	p.must(p.ep.Recv(p.ctl.Bytes()[:16], p.ctl.Desc(), fabric.AddrUnspec, 1))
	p.must(p.ep.Accept(ctx, nil))

	// Ping 0: read the start buffer, check it, write back something else.
	addr, rkey, size := p.recvInfo()
	if size != DefaultSize {
		t.Fatalf("the client's info says size %d, want %d", size, DefaultSize)
	}
	b := p.buf.Bytes()
	p.must(p.ep.Read(b[:size], p.buf.Desc(), fabric.AddrUnspec, addr, uint64(rkey), 3))
	p.wait(3)
	if want := wantData(0, DefaultSize) + "\x00"; string(b) != want {
		t.Fatalf("read %q, want %q", b, want)
	}
	p.goAhead()
	sink, sinkKey, sinkSize := p.recvInfo()
	if sink == addr || sinkSize != DefaultSize {
		t.Fatalf("the sink info: addr %#x (start %#x) size %d", sink, addr, sinkSize)
	}
	b[20] ^= 1
	p.must(p.ep.Write(b, p.buf.Desc(), fabric.AddrUnspec, sink, uint64(sinkKey), 4))
	p.wait(4)
	p.goAhead()

	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the client did not end")
	}
	if err == nil || !strings.Contains(err.Error(), "data mismatch") || errb.String() != "data mismatch!\n" || out.String() != "" {
		t.Fatalf("client: %v, stdout %q, stderr %q", err, out.String(), errb.String())
	}
	if !bytes.Equal(p.ctl.Bytes()[16:32], make([]byte, 16)) {
		t.Fatal("the go-ahead is not 16 zero bytes")
	}
}
