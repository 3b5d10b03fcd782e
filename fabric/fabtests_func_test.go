package fabric_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// The functional half of the fabtests conformance suite
// (fabtests/functional and the threaded runs), over the in-process mem
// provider, data verified everywhere.

// TestFuncMsg mirrors fi_msg: connected send/receive at sizes 0..256 KiB
// both ways, gathered sends scattered into several receive buffers.
func TestFuncMsg(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		hc, hs, a, b := msgPair(t, p, nil)
		const max = 256 << 10
		sm, rm := hc.mr(2*max), hs.mr(2*max)
		for i, n := range msgSizes(max) {
			for dir, x := range [][2]*fabric.Endpoint{{a, b}, {b, a}} {
				sh, rh, s, r := hc, hs, sm, rm
				if dir == 1 {
					sh, rh, s, r = hs, hc, rm, sm
				}
				want := pattern(s.Bytes()[:n], i+dir)
				must(t, x[1].Recv(r.Bytes()[max:2*max], r.Desc(), fabric.AddrUnspec, uint64(i)))
				must(t, x[0].Send(want, s.Desc(), fabric.AddrUnspec, uint64(100+i)))
				if c := waitOK(t, sh.cq); c.Context != uint64(100+i) || c.Flags != fabric.FlagSend|fabric.FlagMsg {
					t.Fatalf("size %d dir %d: send %+v", n, dir, c)
				}
				c := waitOK(t, rh.cq)
				if c.Context != uint64(i) || c.Len != n || !bytes.Equal(c.Buf, want) {
					t.Fatalf("size %d dir %d: recv ctx %d len %d (data equal %v)", n, dir, c.Context, c.Len, bytes.Equal(c.Buf, want))
				}
			}
		}
		// Three pieces gathered, scattered into two buffers.
		pattern(sm.Bytes()[:3000], 9)
		m := fabric.Msg{IOV: [][]byte{sm.Bytes()[:1000], sm.Bytes()[1000:1500], sm.Bytes()[1500:3000]},
			Desc: []fabric.Desc{sm.Desc(), sm.Desc(), sm.Desc()}, Context: 7}
		r := fabric.Msg{IOV: [][]byte{rm.Bytes()[:2000], rm.Bytes()[5000:6000]}, Desc: []fabric.Desc{rm.Desc(), rm.Desc()}, Context: 8}
		must(t, b.RecvMsg(&r, 0))
		must(t, a.SendMsg(&m, 0))
		waitOK(t, hc.cq)
		if c := waitOK(t, hs.cq); c.Len != 3000 || !bytes.Equal(rm.Bytes()[:2000], sm.Bytes()[:2000]) || !bytes.Equal(rm.Bytes()[5000:6000], sm.Bytes()[2000:3000]) {
			t.Fatalf("scatter: %+v", c)
		}
	})
}

// TestFuncDgram mirrors fi_dgram: datagrams up to the path MTU, data and
// source verified, gathered sends, a datagram larger than its receive
// buffer truncated.
func TestFuncDgram(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ha, hb, a, b, ab, ba := pair(t, fabric.EPDgram, p, nil)
		mtu := ha.info.EP.MaxMsgSize
		sm, rm := ha.mr(2*mtu), hb.mr(2*mtu)
		for i, n := range append(msgSizes(mtu), mtu) {
			want := pattern(sm.Bytes()[:n], i)
			must(t, b.Recv(rm.Bytes()[:mtu], rm.Desc(), fabric.AddrUnspec, uint64(i)))
			settle(hb, b)
			must(t, a.Send(want, sm.Desc(), ab, uint64(100+i)))
			if c := waitOK(t, ha.cq); c.Context != uint64(100+i) || c.Flags != fabric.FlagSend|fabric.FlagMsg {
				t.Fatalf("size %d: send %+v", n, c)
			}
			c := waitOK(t, hb.cq)
			if c.Context != uint64(i) || c.Len != n || c.Src != ba || !bytes.Equal(c.Buf, want) {
				t.Fatalf("size %d: recv ctx %d len %d src %d", n, c.Context, c.Len, c.Src)
			}
		}
		// Gathered.
		pattern(sm.Bytes()[:300], 3)
		m := fabric.Msg{IOV: [][]byte{sm.Bytes()[:100], sm.Bytes()[100:300]}, Desc: []fabric.Desc{sm.Desc(), sm.Desc()}, Addr: ab, Context: 1}
		must(t, b.Recv(rm.Bytes()[:mtu], rm.Desc(), fabric.AddrUnspec, 2))
		settle(hb, b)
		must(t, a.SendMsg(&m, 0))
		waitOK(t, ha.cq)
		if c := waitOK(t, hb.cq); c.Len != 300 || !bytes.Equal(c.Buf, sm.Bytes()[:300]) {
			t.Fatalf("gathered: %+v", c)
		}
		// Truncated: the receive completes with ErrTruncated.
		must(t, b.Recv(rm.Bytes()[:10], rm.Desc(), fabric.AddrUnspec, 3))
		settle(hb, b)
		must(t, a.Send(sm.Bytes()[:100], sm.Desc(), ab, 4))
		waitOK(t, ha.cq)
		if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrTruncated) || c.Context != 3 {
			t.Fatalf("truncated: %+v", c)
		}
		// And the endpoint goes on.
		must(t, b.Recv(rm.Bytes()[:mtu], rm.Desc(), fabric.AddrUnspec, 5))
		settle(hb, b)
		must(t, a.Send(sm.Bytes()[:100], sm.Desc(), ab, 6))
		waitOK(t, ha.cq)
		if c := waitOK(t, hb.cq); c.Context != 5 || c.Len != 100 {
			t.Fatalf("after truncation: %+v", c)
		}
	})
}

// TestFuncRDM mirrors fi_rdm: reliable unconnected messages at sizes
// 0..RDMEagerSize both ways, data and source verified, a message longer
// than its receive buffer truncated without harm to the next.
func TestFuncRDM(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ha, hb, a, b, ab, ba := pair(t, fabric.EPRDM, p, nil)
		max := fabric.RDMEagerSize
		sm, rm := ha.mr(max), hb.mr(max)
		for i, n := range append(msgSizes(max), max) {
			for dir := 0; dir < 2; dir++ {
				sh, rh, s, r, se, re, dst, src := ha, hb, sm, rm, a, b, ab, ba
				if dir == 1 {
					sh, rh, s, r, se, re, dst, src = hb, ha, rm, sm, b, a, ba, ab
				}
				want := pattern(s.Bytes()[:n], i+dir)
				must(t, se.Send(want, s.Desc(), dst, uint64(100+i)))
				must(t, re.Recv(r.Bytes(), r.Desc(), fabric.AddrUnspec, uint64(i)))
				if c := waitOK(t, sh.cq); c.Context != uint64(100+i) {
					t.Fatalf("size %d: send %+v", n, c)
				}
				c := waitOK(t, rh.cq)
				if c.Context != uint64(i) || c.Len != n || c.Src != src || !bytes.Equal(c.Buf, want) {
					t.Fatalf("size %d dir %d: recv ctx %d len %d src %d", n, dir, c.Context, c.Len, c.Src)
				}
			}
		}
		// Directed receive: from a only.
		must(t, b.Recv(rm.Bytes()[:64], rm.Desc(), ba, 1))
		must(t, a.Send(sm.Bytes()[:5], sm.Desc(), ab, 2))
		waitOK(t, ha.cq)
		if c := waitOK(t, hb.cq); c.Src != ba || c.Len != 5 {
			t.Fatalf("directed: %+v", c)
		}
		// Truncated, then the next message is whole.
		must(t, b.Recv(rm.Bytes()[:10], rm.Desc(), fabric.AddrUnspec, 3))
		must(t, a.Send(pattern(sm.Bytes()[:100], 1), sm.Desc(), ab, 4))
		waitOK(t, ha.cq)
		if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrTruncated) || c.Context != 3 || !bytes.Equal(rm.Bytes()[:10], sm.Bytes()[:10]) {
			t.Fatalf("truncated: %+v", c)
		}
		must(t, b.Recv(rm.Bytes()[:100], rm.Desc(), fabric.AddrUnspec, 5))
		must(t, a.Send(pattern(sm.Bytes()[:100], 2), sm.Desc(), ab, 6))
		waitOK(t, ha.cq)
		if c := waitOK(t, hb.cq); c.Context != 5 || !bytes.Equal(c.Buf, sm.Bytes()[:100]) {
			t.Fatalf("after truncation: %+v", c)
		}
	})
}

// TestFuncRDMDeliveryComplete mirrors fi_rdm -U (and fi_msg's completion
// semantics): with FlagDeliveryComplete a send completes only once the
// receiver posted its buffer and the data is in it; with transmit
// completion (RDM's default) it completes as soon as the target has it.
func TestFuncRDMDeliveryComplete(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, dc := range []bool{true, false} {
			mod := func(h *fabric.Hints) {
				if dc {
					h.TX.Flags = fabric.FlagDeliveryComplete
				}
			}
			ha, hb, a, b, ab, _ := pair(t, fabric.EPRDM, p, mod)
			if got := ha.info.TX.Flags; (got == fabric.FlagDeliveryComplete) != dc {
				t.Fatalf("dc %v: offer flags %v", dc, got)
			}
			sm, rm := ha.mr(4096), hb.mr(4096)
			want := pattern(sm.Bytes()[:3000], 5)
			must(t, a.Send(want, sm.Desc(), ab, 1))
			if dc {
				quiet(t, ha.cq, 30*time.Millisecond)
				must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 2))
				waitOK(t, ha.cq)
				// Delivered means in the buffer already.
				if !bytes.Equal(rm.Bytes()[:3000], want) {
					t.Fatal("send completed before its data was delivered")
				}
				waitOK(t, hb.cq)
			} else {
				waitOK(t, ha.cq)
				must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 2))
				if c := waitOK(t, hb.cq); !bytes.Equal(c.Buf, want) {
					t.Fatal("data")
				}
			}
			// Per operation: FlagDeliveryComplete on SendMsg, and tagged.
			m := fabric.Msg{IOV: [][]byte{sm.Bytes()[:10]}, Desc: []fabric.Desc{sm.Desc()}, Addr: ab, Context: 3, Tag: 9}
			must(t, a.TSendMsg(&m, fabric.FlagDeliveryComplete))
			quiet(t, ha.cq, 20*time.Millisecond)
			must(t, b.TRecv(rm.Bytes()[:10], rm.Desc(), fabric.AddrUnspec, 9, 0, 4))
			if c := waitOK(t, ha.cq); c.Context != 3 || c.Flags != fabric.FlagSend|fabric.FlagTagged {
				t.Fatalf("tagged delivery complete: %+v", c)
			}
			waitOK(t, hb.cq)
		}
		// MSG endpoints are delivery-complete: a send waits for the
		// receiver's buffer (RNR) and completes once it is posted.
		hc, hs, a, b := msgPair(t, p, nil)
		sm, rm := hc.mr(64), hs.mr(64)
		must(t, a.Send(pattern(sm.Bytes(), 1), sm.Desc(), fabric.AddrUnspec, 1))
		quiet(t, hc.cq, 20*time.Millisecond)
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 2))
		waitOK(t, hc.cq)
		if c := waitOK(t, hs.cq); !bytes.Equal(c.Buf, sm.Bytes()) {
			t.Fatal("msg data")
		}
	})
}

// TestFuncCMData mirrors cm_data: connect/accept with private data both
// ways (up to MaxCMData), reject with private data (ErrRejected and
// EventRejected carrying it), a later connection to the same listener
// accepted, shutdown reported to the peer.
func TestFuncCMData(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		hc := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		hs := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		pep := listen(t, hs)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cdata := pattern(make([]byte, fabric.MaxCMData), 1)
		sdata := pattern(make([]byte, fabric.MaxCMData), 2)

		// Rejected, with data.
		a := hc.ep(nil)
		errc := make(chan error, 1)
		go func() { errc <- a.Connect(ctx, pep.Addr(), cdata[:10]) }()
		ev, err := hs.eq.Read(ctx)
		if err != nil || ev.Kind != fabric.EventConnReq || !bytes.Equal(ev.Data, cdata[:10]) || ev.Info == nil || !ev.Info.Dst.IsValid() {
			t.Fatalf("connreq: %+v %v", ev, err)
		}
		isErr(t, "reject with too much data", pep.Reject(ev.Info, make([]byte, fabric.MaxCMData+1)), fabric.ErrInvalid)
		isErr(t, "reject of no request", pep.Reject(&hs.info, nil), fabric.ErrInvalid)
		must(t, pep.Reject(ev.Info, []byte("go away")))
		isErr(t, "rejected connect", <-errc, fabric.ErrRejected)
		ev, err = hc.eq.Read(ctx)
		if err != nil || ev.Kind != fabric.EventRejected || string(ev.Data) != "go away" || ev.EP != a || !errors.Is(ev.Err, fabric.ErrRejected) {
			t.Fatalf("rejected event: %+v %v", ev, err)
		}

		// Accepted, with the most data each way.
		a = hc.ep(nil)
		go func() { errc <- a.Connect(ctx, pep.Addr(), cdata) }()
		ev, err = hs.eq.Read(ctx)
		if err != nil || ev.Kind != fabric.EventConnReq || !bytes.Equal(ev.Data, cdata) {
			t.Fatalf("connreq 2: %v %v", ev.Kind, err)
		}
		b := hs.ep(ev.Info)
		isErr(t, "accept with too much data", b.Accept(ctx, make([]byte, fabric.MaxCMData+1)), fabric.ErrInvalid)
		must(t, b.Accept(ctx, sdata))
		must(t, <-errc)
		if ev, err := hc.eq.Read(ctx); err != nil || ev.Kind != fabric.EventConnected || ev.EP != a || !bytes.Equal(ev.Data, sdata) {
			t.Fatalf("client connected: %+v %v", ev, err)
		}
		if ev, err := hs.eq.Read(ctx); err != nil || ev.Kind != fabric.EventConnected || ev.EP != b {
			t.Fatalf("server connected: %+v %v", ev, err)
		}
		// The connection works.
		sm, rm := hc.mr(64), hs.mr(64)
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 1))
		must(t, a.Send(pattern(sm.Bytes()[:33], 3), sm.Desc(), fabric.AddrUnspec, 2))
		waitOK(t, hc.cq)
		if c := waitOK(t, hs.cq); !bytes.Equal(c.Buf, sm.Bytes()[:33]) {
			t.Fatal("data over the accepted connection")
		}
		// Shutdown: the peer hears of it.
		must(t, a.Shutdown())
		if ev, err := hs.eq.Read(ctx); err != nil || ev.Kind != fabric.EventShutdown || ev.EP != b {
			t.Fatalf("shutdown: %+v %v", ev, err)
		}
		isErr(t, "send after shutdown", a.Send(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 3), fabric.ErrClosed)
	})
}

// TestFuncCQData mirrors cq_data (msg/rdm/dgram × senddata/writedata):
// remote CQ data reaches the receiver's completion with
// FlagRemoteCQData, through SendData, InjectData, SendMsg and (msg, rdm)
// WriteData, whose data lands too.
func TestFuncCQData(t *testing.T) {
	const data = 0xdeadbeef
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, typ := range []fabric.EPType{fabric.EPMsg, fabric.EPRDM, fabric.EPDgram} {
			var sh, rh *host
			var a, b *fabric.Endpoint
			dst, src := fabric.AddrUnspec, fabric.AddrUnspec
			if typ == fabric.EPMsg {
				sh, rh, a, b = msgPair(t, p, nil)
			} else {
				sh, rh, a, b, dst, src = pair(t, typ, p, nil)
			}
			sm, rm := sh.mr(4096), rh.mr(4096)
			posts := []func(i int) error{
				func(i int) error { return a.SendData(sm.Bytes()[:100+i], sm.Desc(), data+uint64(i), dst, uint64(i)) },
				func(i int) error { return a.InjectData(sm.Bytes()[:10+i], data+uint64(i), dst) },
				func(i int) error {
					m := fabric.Msg{IOV: [][]byte{sm.Bytes()[:20+i]}, Desc: []fabric.Desc{sm.Desc()}, Addr: dst, Context: uint64(i), Data: data + uint64(i)}
					return a.SendMsg(&m, fabric.FlagRemoteCQData)
				},
			}
			for i, post := range posts {
				pattern(sm.Bytes(), i)
				must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, uint64(10+i)))
				if typ == fabric.EPDgram {
					settle(rh, b)
				}
				must(t, post(i))
				c := waitOK(t, rh.cq)
				if c.Data != data+uint64(i) || c.Flags != fabric.FlagRecv|fabric.FlagMsg|fabric.FlagRemoteCQData ||
					c.Context != uint64(10+i) || !bytes.Equal(c.Buf, sm.Bytes()[:len(c.Buf)]) || c.Len < 10 || c.Src != src {
					t.Fatalf("%v post %d: %+v", typ, i, c)
				}
				if i != 1 {
					waitOK(t, sh.cq)
				}
			}
			if typ == fabric.EPDgram {
				continue
			}
			// WriteData: the data lands, the receiver's completion carries
			// the CQ data (MSG: consuming a posted receive).
			pattern(sm.Bytes()[:500], 7)
			if typ == fabric.EPMsg {
				must(t, b.Recv(nil, fabric.Desc{}, fabric.AddrUnspec, 20))
			}
			must(t, a.WriteData(sm.Bytes()[:500], sm.Desc(), data, dst, rm.Addr()+1000, rm.Key(), 21))
			waitOK(t, sh.cq)
			c := waitOK(t, rh.cq)
			if c.Data != data || c.Flags != fabric.FlagRMA|fabric.FlagRemoteWrite|fabric.FlagRemoteCQData || c.Src != src {
				t.Fatalf("%v writedata: %+v", typ, c)
			}
			if !bytes.Equal(rm.Bytes()[1000:1500], sm.Bytes()[:500]) {
				t.Fatalf("%v writedata: data", typ)
			}
			must(t, a.InjectWriteData(sm.Bytes()[:8], data+1, dst, rm.Addr(), rm.Key()))
			if typ == fabric.EPMsg {
				must(t, b.Recv(nil, fabric.Desc{}, fabric.AddrUnspec, 22))
			}
			if c := waitOK(t, rh.cq); c.Data != data+1 || !bytes.Equal(rm.Bytes()[:8], sm.Bytes()[:8]) {
				t.Fatalf("%v inject writedata: %+v", typ, c)
			}
		}
	})
}

// TestFuncAVXfer mirrors av_xfer (rdm, dgram): an address is removed and
// reinserted while transfers continue; sends to it are refused while it
// is out, its messages then come from AddrUnspec, and an operation
// posted before the removal and submitted after it fails with
// ErrAddrNotAvail.
func TestFuncAVXfer(t *testing.T) {
	for _, typ := range []fabric.EPType{fabric.EPRDM, fabric.EPDgram} {
		t.Run(typ.String(), func(t *testing.T) {
			progressModes(t, func(t *testing.T, p fabric.Progress) {
				ha, hb, a, b, ab, ba := pair(t, typ, p, nil)
				sm, rm := ha.mr(4096), hb.mr(4096)
				xfer := func(from, to *fabric.Endpoint, fh, th *host, dst, wantSrc fabric.Addr, seed int) {
					t.Helper()
					s, r := sm, rm
					if from == b {
						s, r = rm, sm
					}
					for i := 0; i < 4; i++ {
						must(t, to.Recv(r.Bytes()[2048+i*256:2048+i*256+256], r.Desc(), fabric.AddrUnspec, uint64(i)))
					}
					if typ == fabric.EPDgram {
						settle(th, to)
					}
					for i := 0; i < 4; i++ {
						must(t, from.Send(pattern(s.Bytes()[i*256:i*256+100+i], seed+i), s.Desc(), dst, uint64(i)))
					}
					for i := 0; i < 4; i++ {
						waitOK(t, fh.cq)
						c := waitOK(t, th.cq)
						if c.Context != uint64(i) || c.Src != wantSrc || !bytes.Equal(c.Buf, s.Bytes()[i*256:i*256+100+i]) {
							t.Fatalf("seed %d msg %d: ctx %d src %d (want %d) len %d", seed, i, c.Context, c.Src, wantSrc, c.Len)
						}
					}
				}
				for round := 0; round < 3; round++ {
					xfer(a, b, ha, hb, ab, ba, round*10)
					xfer(b, a, hb, ha, ba, ab, round*10+1)
					must(t, ha.av.Remove(ab))
					isErr(t, "send to a removed address", a.Send(sm.Bytes()[:1], sm.Desc(), ab, 9), fabric.ErrAddrNotAvail)
					// b goes on sending to a, which no longer knows it.
					xfer(b, a, hb, ha, ba, fabric.AddrUnspec, round*10+2)
					x, err := ha.av.Insert(b.Name())
					must(t, err)
					if x != ab {
						t.Fatalf("reinserted at %d, was %d", x, ab)
					}
					xfer(a, b, ha, hb, ab, ba, round*10+3)
					xfer(b, a, hb, ha, ba, ab, round*10+4)
				}
				if p != fabric.ProgressManual {
					return
				}
				// Manual progress submits at the next read: a send posted
				// to an address removed before then fails.
				must(t, a.Send(sm.Bytes()[:8], sm.Desc(), ab, 77))
				must(t, ha.av.Remove(ab))
				if c := wait(t, ha.cq); c.Context != 77 || !errors.Is(c.Err(), fabric.ErrAddrNotAvail) {
					t.Fatalf("send to an address removed after posting: %+v (%v)", c, c.Err())
				}
				_, err := ha.av.Insert(b.Name())
				must(t, err)
				xfer(a, b, ha, hb, ab, ba, 99)
			})
		})
	}
}

// peekUntil peeks for tag until a message is there (a peek reports only
// what has arrived: fabtests retries it too).
func peekUntil(t *testing.T, h *host, ep *fabric.Endpoint, tag uint64, f fabric.Flags, ctx uint64) fabric.Completion {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := fabric.Msg{Addr: fabric.AddrUnspec, Tag: tag, Context: ctx}
		must(t, ep.TRecvMsg(&m, fabric.FlagPeek|f))
		c := wait(t, h.cq)
		if !errors.Is(c.Err(), fabric.ErrNoMsg) {
			if err := c.Err(); err != nil || c.Context != ctx {
				t.Fatalf("peek %#x: %+v", tag, c)
			}
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("peek %#x: nothing in 10 s", tag)
		}
		driveAll() // the sender too, with manual progress
	}
}

// TestFuncRDMTaggedPeek mirrors rdm_tagged_peek: PEEK, PEEK|CLAIM then
// CLAIM, PEEK|DISCARD and CLAIM|DISCARD over queued messages, visited in
// order and out of order, data verified; a peek for nothing is ErrNoMsg.
func TestFuncRDMTaggedPeek(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ha, hb, a, b, ab, ba := pair(t, fabric.EPRDM, p, nil)
		sm, rm := ha.mr(32<<10), hb.mr(32<<10)
		const n = 8
		size := func(i int) int { return 1 + i*500 }
		for i := 0; i < n; i++ {
			must(t, a.TSendData(pattern(sm.Bytes()[i*4096:i*4096+size(i)], i), sm.Desc(), uint64(1000+i), ab, uint64(0x10+i), uint64(i)))
		}
		// In order: each peek sees its message and takes nothing.
		for i := 0; i < n; i++ {
			c := peekUntil(t, hb, b, uint64(0x10+i), 0, uint64(50+i))
			if c.Tag != uint64(0x10+i) || c.Len != size(i) || c.Data != uint64(1000+i) || c.Src != ba || c.Flags&fabric.FlagTagged == 0 {
				t.Fatalf("peek %d: %+v", i, c)
			}
		}
		// Out of order: claim 7, 6, 5, 4, receive them 4..7.
		for i := n - 1; i >= 4; i-- {
			peekUntil(t, hb, b, uint64(0x10+i), fabric.FlagClaim, uint64(100+i))
		}
		for i := 4; i < n; i++ {
			// A claimed message is no longer visible to peeks or receives.
			m := fabric.Msg{Addr: fabric.AddrUnspec, Tag: uint64(0x10 + i), Context: 60}
			must(t, b.TRecvMsg(&m, fabric.FlagPeek))
			if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrNoMsg) {
				t.Fatalf("peek of claimed %d: %+v", i, c)
			}
			m = fabric.Msg{IOV: [][]byte{rm.Bytes()[i*4096 : (i+1)*4096]}, Desc: []fabric.Desc{rm.Desc()}, Addr: fabric.AddrUnspec, Context: uint64(100 + i)}
			must(t, b.TRecvMsg(&m, fabric.FlagClaim))
			c := waitOK(t, hb.cq)
			if c.Tag != uint64(0x10+i) || c.Context != uint64(100+i) || !bytes.Equal(c.Buf, sm.Bytes()[i*4096:i*4096+size(i)]) {
				t.Fatalf("claimed %d: %+v", i, c)
			}
		}
		// Discard 3 by peek, 2 by claim.
		peekUntil(t, hb, b, 0x13, fabric.FlagDiscard, 70)
		peekUntil(t, hb, b, 0x12, fabric.FlagClaim, 71)
		m := fabric.Msg{Addr: fabric.AddrUnspec, Context: 71}
		must(t, b.TRecvMsg(&m, fabric.FlagClaim|fabric.FlagDiscard))
		waitOK(t, hb.cq)
		// A claim of nothing.
		m = fabric.Msg{IOV: [][]byte{rm.Bytes()[:16]}, Desc: []fabric.Desc{rm.Desc()}, Addr: fabric.AddrUnspec, Context: 71}
		must(t, b.TRecvMsg(&m, fabric.FlagClaim))
		if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrNoMsg) {
			t.Fatalf("claim of nothing: %+v", c)
		}
		// 0 and 1 remain, in order, for any tag.
		for i := 0; i < 2; i++ {
			must(t, b.TRecv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 0, ^uint64(0), uint64(80+i)))
			if c := waitOK(t, hb.cq); c.Tag != uint64(0x10+i) || !bytes.Equal(c.Buf, sm.Bytes()[i*4096:i*4096+size(i)]) {
				t.Fatalf("remaining %d: %+v", i, c)
			}
		}
		for _, tag := range []uint64{0x12, 0x13, 0x99} {
			m := fabric.Msg{Addr: fabric.AddrUnspec, Tag: tag, Context: 90}
			must(t, b.TRecvMsg(&m, fabric.FlagPeek))
			if c := wait(t, hb.cq); !errors.Is(c.Err(), fabric.ErrNoMsg) {
				t.Fatalf("peek %#x after all: %+v", tag, c)
			}
		}
		for i := 0; i < n; i++ {
			waitOK(t, ha.cq)
		}
	})
}

// TestFuncUnexpectedMsg mirrors unexpected_msg: many sends of various
// sizes arrive before their receives (RDM untagged and tagged, MSG),
// and each is delivered whole, in order or by tag.
func TestFuncUnexpectedMsg(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		sizes := []int{0, 1, 63, 64, 1000, 4096, 9000, fabric.RDMEagerSize}
		ha, hb, a, b, ab, _ := pair(t, fabric.EPRDM, p, nil)
		const n = 48
		sm := ha.mr(n * fabric.RDMEagerSize)
		rm := hb.mr(fabric.RDMEagerSize)
		msg := func(i int) []byte {
			return sm.Bytes()[i*fabric.RDMEagerSize : i*fabric.RDMEagerSize+sizes[i%len(sizes)]]
		}
		for i := 0; i < n; i++ {
			pattern(msg(i), i)
			if i%2 == 0 {
				must(t, a.Send(msg(i), sm.Desc(), ab, uint64(i)))
			} else {
				must(t, a.TSend(msg(i), sm.Desc(), ab, uint64(1000+i), uint64(i)))
			}
		}
		for i := 0; i < n; i++ {
			waitOK(t, ha.cq) // every message is at the target, unexpected
		}
		// Tagged ones in reverse order, by tag; untagged ones in order.
		for i := n - 1; i >= 0; i -= 2 {
			must(t, b.TRecv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, uint64(1000+i), 0, uint64(i)))
			if c := waitOK(t, hb.cq); c.Tag != uint64(1000+i) || !bytes.Equal(c.Buf, msg(i)) {
				t.Fatalf("tagged %d: len %d tag %d", i, c.Len, c.Tag)
			}
		}
		for i := 0; i < n; i += 2 {
			must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, uint64(i)))
			if c := waitOK(t, hb.cq); c.Len != len(msg(i)) || !bytes.Equal(c.Buf, msg(i)) {
				t.Fatalf("untagged %d: len %d", i, c.Len)
			}
		}
		// MSG: the sends wait for the receives (RNR), then all arrive.
		hc, hs, ma, mb := msgPair(t, p, nil)
		cm, srm := hc.mr(16*8192), hs.mr(16*8192)
		for i := 0; i < 16; i++ {
			retry(t, hc.cq, func() error {
				return ma.Send(pattern(cm.Bytes()[i*8192:i*8192+sizes[i%len(sizes)]%8192], i), cm.Desc(), fabric.AddrUnspec, uint64(i))
			})
		}
		quiet(t, hs.cq, 5*time.Millisecond)
		for i := 0; i < 16; i++ {
			must(t, mb.Recv(srm.Bytes()[i*8192:(i+1)*8192], srm.Desc(), fabric.AddrUnspec, uint64(i)))
		}
		for i := 0; i < 16; i++ {
			c := waitOK(t, hs.cq)
			if c.Context != uint64(i) || !bytes.Equal(c.Buf, cm.Bytes()[i*8192:i*8192+sizes[i%len(sizes)]%8192]) {
				t.Fatalf("msg %d: %+v", i, c.Context)
			}
			waitOK(t, hc.cq)
		}
	})
}

// TestFuncRecvCancel mirrors recv_cancel: a cancelled receive (tagged,
// untagged, multi-receive) completes with ErrCanceled, and the next
// message matches the next receive; cancelling twice is ErrNoMsg.
func TestFuncRecvCancel(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ha, hb, a, b, ab, _ := pair(t, fabric.EPRDM, p, nil)
		sm, rm := ha.mr(4096), hb.mr(4096)
		must(t, b.TRecv(rm.Bytes()[:100], rm.Desc(), fabric.AddrUnspec, 5, 0, 1))
		must(t, b.TRecv(rm.Bytes()[100:200], rm.Desc(), fabric.AddrUnspec, 5, 0, 2))
		must(t, b.Recv(rm.Bytes()[200:300], rm.Desc(), fabric.AddrUnspec, 3))
		must(t, b.Recv(rm.Bytes()[300:400], rm.Desc(), fabric.AddrUnspec, 4))
		mr := fabric.Msg{IOV: [][]byte{rm.Bytes()[1000:2000]}, Desc: []fabric.Desc{rm.Desc()}, Addr: fabric.AddrUnspec, Context: 5}
		must(t, b.RecvMsg(&mr, fabric.FlagMultiRecv))
		for _, ctx := range []uint64{1, 3, 5} {
			must(t, b.Cancel(ctx))
			c := wait(t, hb.cq)
			if c.Context != ctx || !errors.Is(c.Err(), fabric.ErrCanceled) {
				t.Fatalf("cancel %d: %+v", ctx, c)
			}
			if ctx == 5 && c.Flags&fabric.FlagMultiRecv == 0 {
				t.Fatalf("cancelled multi-receive without FlagMultiRecv: %v", c.Flags)
			}
			isErr(t, "cancel twice", b.Cancel(ctx), fabric.ErrNoMsg)
		}
		isErr(t, "cancel of nothing", b.Cancel(42), fabric.ErrNoMsg)
		must(t, a.TSend(pattern(sm.Bytes()[:50], 1), sm.Desc(), ab, 5, 10))
		must(t, a.Send(pattern(sm.Bytes()[50:90], 2), sm.Desc(), ab, 11))
		got := map[uint64]fabric.Completion{}
		for i := 0; i < 2; i++ {
			c := waitOK(t, hb.cq)
			got[c.Context] = c
		}
		if !bytes.Equal(got[2].Buf, sm.Bytes()[:50]) || !bytes.Equal(got[4].Buf, sm.Bytes()[50:90]) {
			t.Fatalf("after cancel: %+v", got)
		}
		// Other endpoint types do not cancel.
		_, _, da, _, _, _ := pair(t, fabric.EPDgram, p, nil)
		isErr(t, "cancel on DGRAM", da.Cancel(1), fabric.ErrNotSupported)
	})
}

// TestFuncMultiRecv mirrors multi_recv (msg, rdm): MSG refuses
// FlagMultiRecv with ErrNotSupported; on RDM a buffer takes messages until
// less than OptMinMultiRecv remains, the last one flagged FlagMultiRecv,
// and the next buffer takes over.
func TestFuncMultiRecv(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		_, hs, _, mb := msgPair(t, p, nil)
		rm0 := hs.mr(1024)
		m := fabric.Msg{IOV: [][]byte{rm0.Bytes()}, Desc: []fabric.Desc{rm0.Desc()}, Context: 1}
		isErr(t, "multi-receive on MSG", mb.RecvMsg(&m, fabric.FlagMultiRecv), fabric.ErrNotSupported)

		ha, hb, a, b, ab, ba := pair(t, fabric.EPRDM, p, nil)
		must(t, b.SetOption(fabric.OptMinMultiRecv, 64))
		sm, rm := ha.mr(40*50), hb.mr(2048)
		for k := 0; k < 2; k++ {
			m := fabric.Msg{IOV: [][]byte{rm.Bytes()[k*1024 : (k+1)*1024]}, Desc: []fabric.Desc{rm.Desc()}, Addr: fabric.AddrUnspec, Context: uint64(10 + k)}
			must(t, b.RecvMsg(&m, fabric.FlagMultiRecv))
		}
		for i := 0; i < 40; i++ {
			must(t, a.Send(pattern(sm.Bytes()[i*50:(i+1)*50], i), sm.Desc(), ab, uint64(i)))
		}
		for i := 0; i < 40; i++ {
			c := waitOK(t, hb.cq)
			k, j := i/20, i%20
			if c.Context != uint64(10+k) || c.Len != 50 || c.Src != ba || &c.Buf[0] != &rm.Bytes()[k*1024+j*50] || !bytes.Equal(c.Buf, sm.Bytes()[i*50:(i+1)*50]) {
				t.Fatalf("message %d: ctx %d len %d", i, c.Context, c.Len)
			}
			if last := j == 19; last != (c.Flags&fabric.FlagMultiRecv != 0) {
				t.Fatalf("message %d: flags %v", i, c.Flags)
			}
		}
		for i := 0; i < 40; i++ {
			waitOK(t, ha.cq)
		}
	})
}

// TestFuncInject mirrors inject_test (inject, sendmsg -N): an injected
// buffer is reusable as soon as the call returns, no completion is
// reported, and bound counters still count (sends and RMA writes).
func TestFuncInject(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, typ := range []fabric.EPType{fabric.EPMsg, fabric.EPRDM, fabric.EPDgram} {
			sh := newHost(t, hostOpts{typ: typ, progress: p})
			rh := newHost(t, hostOpts{typ: typ, progress: p})
			sent, wrote := sh.counter(), sh.counter()
			open := func(info *fabric.Info) *fabric.Endpoint {
				ep := sh.rawEP(info)
				must(t, ep.Bind(sh.cq, 0))
				must(t, ep.Bind(sh.eq, 0))
				must(t, ep.Bind(sent, fabric.FlagSend))
				if typ != fabric.EPDgram {
					must(t, ep.Bind(wrote, fabric.FlagWrite))
				}
				if typ != fabric.EPMsg {
					must(t, ep.Bind(sh.av, 0))
				}
				must(t, ep.Enable())
				return ep
			}
			var a, b *fabric.Endpoint
			dst := fabric.AddrUnspec
			if typ == fabric.EPMsg {
				// The injecting side is the accepting one.
				b, a = connectVia(t, rh, sh, listen(t, sh), open)
			} else {
				a, b = open(nil), rh.ep(nil)
				var err error
				dst, err = sh.av.Insert(b.Name())
				must(t, err)
			}
			rm := rh.mr(64 * 64)
			const n = 24
			for i := 0; i < n; i++ {
				must(t, b.Recv(rm.Bytes()[i*64:(i+1)*64], rm.Desc(), fabric.AddrUnspec, uint64(i)))
			}
			if typ == fabric.EPDgram {
				settle(rh, b)
			}
			buf := make([]byte, fabric.InjectSize) // not even registered
			for i := 0; i < n; i++ {
				size := i * fabric.InjectSize / (n - 1)
				pattern(buf[:size], i)
				switch i % 3 {
				case 0:
					must(t, a.Inject(buf[:size], dst))
				case 1:
					must(t, a.InjectData(buf[:size], uint64(i), dst))
				case 2:
					must(t, a.SendMsg(&fabric.Msg{IOV: [][]byte{buf[:size]}, Addr: dst, Context: 99}, fabric.FlagInject))
				}
				clear(buf) // reusable at once
			}
			for i := 0; i < n; i++ {
				c := waitOK(t, rh.cq)
				size := i * fabric.InjectSize / (n - 1)
				if c.Context != uint64(i) || c.Len != size || !bytes.Equal(c.Buf, pattern(make([]byte, size), i)) {
					t.Fatalf("%v inject %d: %+v", typ, i, c)
				}
			}
			waitCount(t, sent, n)
			if typ != fabric.EPDgram {
				// RMA inject: the data lands, the write counter counts.
				for i := 0; i < 4; i++ {
					pattern(buf, 50+i)
					must(t, a.InjectWrite(buf, dst, rm.Addr()+uint64(i*64), rm.Key()))
					clear(buf)
				}
				waitCount(t, wrote, 4)
				for i := 0; i < 4; i++ {
					if !bytes.Equal(rm.Bytes()[i*64:(i+1)*64], pattern(make([]byte, 64), 50+i)) {
						t.Fatalf("%v inject write %d", typ, i)
					}
				}
			}
			if typ == fabric.EPRDM {
				must(t, b.TRecv(rm.Bytes()[:64], rm.Desc(), fabric.AddrUnspec, 7, 0, 1))
				must(t, a.TInject(pattern(buf[:30], 3), dst, 7))
				clear(buf)
				if c := waitOK(t, rh.cq); !bytes.Equal(c.Buf, pattern(make([]byte, 30), 3)) {
					t.Fatalf("tagged inject: %+v", c)
				}
				waitCount(t, sent, n+1)
			}
			quiet(t, sh.cq, 5*time.Millisecond)
			if sent.ReadErr() != 0 || wrote.ReadErr() != 0 {
				t.Fatalf("%v: failed injects %d %d", typ, sent.ReadErr(), wrote.ReadErr())
			}
		}
	})
}

// TestFuncMultiEP mirrors multi_ep (-A shared AV, -Q shared CQ): several
// endpoints on each side share one CQ and one AV; every message reaches
// its own endpoint, with its own context and source.
func TestFuncMultiEP(t *testing.T) {
	const neps, nmsg = 4, 8
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, typ := range []fabric.EPType{fabric.EPMsg, fabric.EPRDM, fabric.EPDgram} {
			ha := newHost(t, hostOpts{typ: typ, progress: p})
			hb := newHost(t, hostOpts{typ: typ, progress: p})
			as, bs := make([]*fabric.Endpoint, neps), make([]*fabric.Endpoint, neps)
			dst, src := make([]fabric.Addr, neps), make([]fabric.Addr, neps)
			if typ == fabric.EPMsg {
				pep := listen(t, hb)
				for i := range as {
					as[i], bs[i] = connectVia(t, ha, hb, pep, nil)
					dst[i], src[i] = fabric.AddrUnspec, fabric.AddrUnspec
				}
			} else {
				for i := range as {
					as[i], bs[i] = ha.ep(nil), hb.ep(nil)
				}
				for i := range as {
					var err error
					dst[i], err = ha.av.Insert(bs[i].Name())
					must(t, err)
					src[i], err = hb.av.Insert(as[i].Name())
					must(t, err)
				}
			}
			sm, rm := ha.mr(neps*nmsg*64), hb.mr(neps*nmsg*64)
			for i := range bs {
				for j := 0; j < nmsg; j++ {
					k := i*nmsg + j
					must(t, bs[i].Recv(rm.Bytes()[k*64:(k+1)*64], rm.Desc(), fabric.AddrUnspec, uint64(i<<8|j)))
				}
			}
			if typ == fabric.EPDgram {
				settle(hb, bs...)
			}
			for j := 0; j < nmsg; j++ {
				for i := range as {
					k := i*nmsg + j
					msg := sm.Bytes()[k*64 : k*64+20]
					copy(msg, fmt.Sprintf("ep %d msg %d", i, j))
					must(t, as[i].Send(msg, sm.Desc(), dst[i], uint64(i<<8|j)))
				}
			}
			next := make([]int, neps)
			for k := 0; k < neps*nmsg; k++ {
				c := waitOK(t, hb.cq)
				i := int(c.Context >> 8)
				want := fmt.Sprintf("ep %d msg %d", i, next[i])
				if int(c.Context&0xff) != next[i] || string(bytes.TrimRight(c.Buf, "\x00")) != want || c.Src != src[i] {
					t.Fatalf("%v: completion ctx %#x src %d carries %q, want %q from %d", typ, c.Context, c.Src, c.Buf, want, src[i])
				}
				next[i]++
			}
			seen := map[uint64]bool{}
			for k := 0; k < neps*nmsg; k++ {
				c := waitOK(t, ha.cq)
				if seen[c.Context] {
					t.Fatalf("%v: send %#x completed twice", typ, c.Context)
				}
				seen[c.Context] = true
			}
		}
	})
}

// TestFuncMultiMR mirrors multi_mr (msg, rdm): RMA writes and reads
// across 32 regions on each side, each through its own key, data
// verified; one region's key does not open another.
func TestFuncMultiMR(t *testing.T) {
	const nmr = 32
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, typ := range []fabric.EPType{fabric.EPMsg, fabric.EPRDM} {
			var ha, hb *host
			var a *fabric.Endpoint
			dst := fabric.AddrUnspec
			if typ == fabric.EPMsg {
				ha, hb, a, _ = msgPair(t, p, nil)
			} else {
				ha, hb, a, _, dst, _ = pair(t, typ, p, nil)
			}
			local, remote, back := make([]*fabric.MR, nmr), make([]*fabric.MR, nmr), make([]*fabric.MR, nmr)
			for i := range local {
				size := 64 * (i + 1)
				local[i], remote[i], back[i] = ha.mr(size), hb.mr(size), ha.mr(size)
				pattern(local[i].Bytes(), i)
			}
			for i := range local {
				must(t, a.Write(local[i].Bytes(), local[i].Desc(), dst, remote[i].Addr(), remote[i].Key(), uint64(i)))
			}
			for i := 0; i < nmr; i++ {
				if c := waitOK(t, ha.cq); c.Context != uint64(i) || c.Flags != fabric.FlagRMA|fabric.FlagWrite {
					t.Fatalf("%v write %d: %+v", typ, i, c)
				}
			}
			for i := range remote {
				if !bytes.Equal(remote[i].Bytes(), local[i].Bytes()) {
					t.Fatalf("%v region %d: written data differ", typ, i)
				}
				must(t, a.Read(back[i].Bytes(), back[i].Desc(), dst, remote[i].Addr(), remote[i].Key(), uint64(100+i)))
			}
			for i := 0; i < nmr; i++ {
				if c := waitOK(t, ha.cq); c.Context != uint64(100+i) || c.Flags != fabric.FlagRMA|fabric.FlagRead {
					t.Fatalf("%v read %d: %+v", typ, i, c)
				}
			}
			for i := range back {
				if !bytes.Equal(back[i].Bytes(), local[i].Bytes()) {
					t.Fatalf("%v region %d: read data differ", typ, i)
				}
			}
			// The key of region 0 does not reach region 1 (the last
			// operation: an access error ends the connection).
			must(t, a.Write(local[0].Bytes()[:8], local[0].Desc(), dst, remote[1].Addr(), remote[0].Key(), 999))
			if c := wait(t, ha.cq); !errors.Is(c.Err(), fabric.ErrRemoteAccess) {
				t.Fatalf("%v: another region's key: %+v", typ, c)
			}
			// After it, a MSG endpoint's operations complete flushed; an
			// RDM endpoint connects to the peer again and goes on.
			must(t, a.Write(local[2].Bytes(), local[2].Desc(), dst, remote[3].Addr(), remote[3].Key(), 1000))
			c := wait(t, ha.cq)
			if typ == fabric.EPMsg {
				if c.Context != 1000 || !errors.Is(c.Err(), fabric.ErrCanceled) {
					t.Fatalf("msg: write after an access error: %+v", c)
				}
				continue
			}
			if c.Context != 1000 || c.Err() != nil || !bytes.Equal(remote[3].Bytes()[:len(local[2].Bytes())], local[2].Bytes()) {
				t.Fatalf("rdm: write after an access error: %+v (%v)", c, c.Err())
			}
		}
	})
}

// TestFuncFlood mirrors flood (rdm, msg, -T receiver delay): 2000
// messages with the receiver posting late; every one arrives once, in
// order, data verified.
func TestFuncFlood(t *testing.T) {
	const n, slot, rxSlots = 2000, 128, 256
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, typ := range []fabric.EPType{fabric.EPRDM, fabric.EPMsg} {
			var ha, hb *host
			var a, b *fabric.Endpoint
			dst := fabric.AddrUnspec
			if typ == fabric.EPMsg {
				ha, hb, a, b = msgPair(t, p, nil)
			} else {
				ha, hb, a, b, dst, _ = pair(t, typ, p, nil)
			}
			sm, rm := ha.mr(n*slot), hb.mr(rxSlots*slot)
			size := func(i int) int { return 8 + i%(slot-8) }
			for i := 0; i < n; i++ {
				binary.LittleEndian.PutUint64(pattern(sm.Bytes()[i*slot:(i+1)*slot], i), uint64(i))
			}
			var cs [64]fabric.Completion
			sent, sendDone, posted, got := 0, 0, 0, 0
			blocked := false
			start := time.Now()
			deadline := start.Add(20 * time.Second)
			for got < n || sendDone < n {
				if time.Now().After(deadline) {
					t.Fatalf("%v: sent %d (%d done), posted %d, received %d", typ, sent, sendDone, posted, got)
				}
				for sent < n {
					err := a.Send(sm.Bytes()[sent*slot:sent*slot+size(sent)], sm.Desc(), dst, uint64(sent))
					if errors.Is(err, fabric.ErrAgain) {
						blocked = true
						break
					}
					must(t, err)
					sent++
				}
				// The receiver starts late: once the sender is held up.
				if blocked && time.Since(start) > 5*time.Millisecond {
					for posted < n && posted-got < rxSlots {
						k := posted % rxSlots
						err := b.Recv(rm.Bytes()[k*slot:(k+1)*slot], rm.Desc(), fabric.AddrUnspec, uint64(k))
						if errors.Is(err, fabric.ErrAgain) {
							break
						}
						must(t, err)
						posted++
					}
				}
				k := ha.cq.Read(cs[:])
				for _, c := range cs[:k] {
					if c.Err() != nil || c.Context != uint64(sendDone) {
						t.Fatalf("%v: send completion %+v, want context %d", typ, c, sendDone)
					}
					sendDone++
				}
				k = hb.cq.Read(cs[:])
				for _, c := range cs[:k] {
					if err := c.Err(); err != nil {
						t.Fatalf("%v: receive %d: %v", typ, got, err)
					}
					want := sm.Bytes()[got*slot : got*slot+size(got)]
					if c.Context != uint64(got%rxSlots) || !bytes.Equal(c.Buf, want) {
						t.Fatalf("%v: receive %d: ctx %d len %d seq %d", typ, got, c.Context, c.Len, binary.LittleEndian.Uint64(c.Buf))
					}
					got++
				}
				driveAll()
			}
			quiet(t, hb.cq, time.Millisecond)
		}
	})
}

// TestFuncMsgAtomic mirrors rdm_atomic's native half on MSG endpoints:
// 64-bit fetch-add (and add, atomic read) and compare-swap go on the wire
// and are atomic across connections; every other op or type is
// ErrNotSupported on MSG, bad sizes and alignment ErrInvalid.
func TestFuncMsgAtomic(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		hs := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		pep := listen(t, hs)
		target := hs.mr(64)
		var cli [2]*host
		var eps [2]*fabric.Endpoint
		for i := range cli {
			cli[i] = newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
			eps[i], _ = connectVia(t, cli[i], hs, pep, nil)
		}
		a := eps[0]
		// What MSG endpoints do.
		for op := fabric.AtomicOp(0); op < fabric.NumAtomicOps; op++ {
			for dt := fabric.Datatype(0); dt < fabric.NumDatatypes; dt++ {
				for k := fabric.AtomicBase; k <= fabric.AtomicCompare; k++ {
					count, native, err := a.AtomicValid(op, dt, k)
					wantOK := (dt == fabric.Int64 || dt == fabric.Uint64) &&
						(k == fabric.AtomicBase && op == fabric.AtomicSum ||
							k == fabric.AtomicFetch && (op == fabric.AtomicSum || op == fabric.AtomicRead) ||
							k == fabric.AtomicCompare && op == fabric.AtomicCSwap)
					if wantOK != (err == nil) || wantOK && (count != 1 || !native) || !wantOK && !errors.Is(err, fabric.ErrNotSupported) {
						t.Fatalf("AtomicValid(%v, %v, %d) = %d %v %v", op, dt, k, count, native, err)
					}
				}
			}
		}
		buf := cli[0].mr(4096)
		b8 := func(off int, v uint64) []byte {
			binary.LittleEndian.PutUint64(buf.Bytes()[off:], v)
			return buf.Bytes()[off : off+8]
		}
		u64 := func(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
		isErr(t, "min on MSG", a.Atomic(fabric.AtomicMin, fabric.Uint64, b8(0, 1), buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 1), fabric.ErrNotSupported)
		isErr(t, "32-bit add on MSG", a.Atomic(fabric.AtomicSum, fabric.Int32, buf.Bytes()[:4], buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 1), fabric.ErrNotSupported)
		isErr(t, "two elements", a.Atomic(fabric.AtomicSum, fabric.Uint64, buf.Bytes()[:16], buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 1), fabric.ErrInvalid)
		isErr(t, "misaligned", a.Atomic(fabric.AtomicSum, fabric.Uint64, b8(0, 1), buf.Desc(), fabric.AddrUnspec, target.Addr()+4, target.Key(), 1), fabric.ErrInvalid)
		isErr(t, "result too short", a.FetchAtomic(fabric.AtomicSum, fabric.Uint64, b8(0, 1), buf.Desc(), buf.Bytes()[8:12], buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 1), fabric.ErrInvalid)

		// Add, fetch-add, read, compare-swap (hit and miss).
		tv := target.Bytes()[:8]
		binary.LittleEndian.PutUint64(tv, 100)
		must(t, a.Atomic(fabric.AtomicSum, fabric.Uint64, b8(0, 5), buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 1))
		if c := waitOK(t, cli[0].cq); c.Flags != fabric.FlagAtomic|fabric.FlagWrite || u64(tv) != 105 {
			t.Fatalf("add: %+v, target %d", c, u64(tv))
		}
		must(t, a.FetchAtomic(fabric.AtomicSum, fabric.Int64, b8(0, ^uint64(0)), buf.Desc(), buf.Bytes()[8:16], buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 2))
		if c := waitOK(t, cli[0].cq); c.Flags != fabric.FlagAtomic|fabric.FlagRead || u64(buf.Bytes()[8:]) != 105 || u64(tv) != 104 {
			t.Fatalf("fetch-add -1: %+v, old %d target %d", c, u64(buf.Bytes()[8:]), u64(tv))
		}
		must(t, a.FetchAtomic(fabric.AtomicRead, fabric.Uint64, nil, fabric.Desc{}, buf.Bytes()[16:24], buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 3))
		if waitOK(t, cli[0].cq); u64(buf.Bytes()[16:]) != 104 || u64(tv) != 104 {
			t.Fatalf("atomic read %d", u64(buf.Bytes()[16:]))
		}
		for _, tc := range []struct{ cmp, swap, want uint64 }{{104, 7, 7}, {104, 9, 7}} {
			old := u64(tv)
			must(t, a.CompareAtomic(fabric.AtomicCSwap, fabric.Uint64, b8(0, tc.swap), buf.Desc(), b8(32, tc.cmp), buf.Desc(),
				buf.Bytes()[40:48], buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 4))
			if waitOK(t, cli[0].cq); u64(tv) != tc.want || u64(buf.Bytes()[40:]) != old {
				t.Fatalf("cswap %+v: target %d old %d", tc, u64(tv), u64(buf.Bytes()[40:]))
			}
		}

		// Atomic across two connections: 2×100 fetch-adds of 1.
		binary.LittleEndian.PutUint64(tv, 0)
		const per = 100
		res := [2]*fabric.MR{cli[0].mr(per * 8), cli[1].mr(per * 8)}
		one := [2]*fabric.MR{cli[0].mr(8), cli[1].mr(8)}
		for i := range eps {
			binary.LittleEndian.PutUint64(one[i].Bytes(), 1)
			for j := 0; j < per; j++ {
				must(t, eps[i].FetchAtomic(fabric.AtomicSum, fabric.Uint64, one[i].Bytes(), one[i].Desc(),
					res[i].Bytes()[j*8:(j+1)*8], res[i].Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), uint64(j)))
			}
		}
		seen := map[uint64]bool{}
		for i := range eps {
			for j := 0; j < per; j++ {
				waitOK(t, cli[i].cq)
			}
			for j := 0; j < per; j++ {
				v := u64(res[i].Bytes()[j*8:])
				if seen[v] || v >= 2*per {
					t.Fatalf("fetched %d twice or out of range", v)
				}
				seen[v] = true
			}
		}
		if u64(tv) != 2*per {
			t.Fatalf("target %d after %d adds", u64(tv), 2*per)
		}
		// A bad key: ErrRemoteAccess (last: it ends the connection).
		must(t, a.Atomic(fabric.AtomicSum, fabric.Uint64, b8(0, 1), buf.Desc(), fabric.AddrUnspec, target.Addr(), target.Key()^1, 9))
		if c := wait(t, cli[0].cq); !errors.Is(c.Err(), fabric.ErrRemoteAccess) {
			t.Fatalf("bad key: %+v", c)
		}
	})
}

// TestFuncSharedRx mirrors shared_ctx (msg, +rx): MSG endpoints share one
// receive context; each message fills the next shared buffer and
// completes on the CQ of the endpoint it came to; the endpoints' own
// receive is refused; the context outlives no bound endpoint.
func TestFuncSharedRx(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		hs := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		_, err := hs.dom.SharedRx(0)
		isErr(t, "SharedRx(0)", err, fabric.ErrInvalid)
		srx, err := hs.dom.SharedRx(64)
		must(t, err)
		cqs := []*fabric.CQ{hs.newCQ(1024), hs.newCQ(1024)}
		pep := listen(t, hs)
		const nmsg = 10
		rm := hs.mr(2 * nmsg * 128)
		for k := 0; k < 2*nmsg; k++ {
			must(t, srx.Recv(rm.Bytes()[k*128:(k+1)*128], rm.Desc(), uint64(k)))
		}
		var clients [2]*host
		var as, bs [2]*fabric.Endpoint
		for i := range clients {
			clients[i] = newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
			as[i], bs[i] = connectVia(t, clients[i], hs, pep, func(info *fabric.Info) *fabric.Endpoint {
				ep := hs.rawEP(info)
				must(t, ep.Bind(cqs[i], 0))
				must(t, ep.Bind(hs.eq, 0))
				must(t, ep.Bind(srx, 0))
				must(t, ep.Enable())
				return ep
			})
		}
		isErr(t, "receive on an endpoint with a shared context", bs[0].Recv(rm.Bytes()[:8], rm.Desc(), fabric.AddrUnspec, 1), fabric.ErrInvalid)
		isErr(t, "closing a shared context in use", srx.Close(), fabric.ErrBusy)
		for j := 0; j < nmsg; j++ {
			for i, a := range as {
				sm := clients[i].mr(64)
				copy(sm.Bytes(), fmt.Sprintf("client %d msg %d", i, j))
				must(t, a.Send(sm.Bytes()[:20], sm.Desc(), fabric.AddrUnspec, uint64(j)))
			}
		}
		used := map[uint64]bool{}
		for i, q := range cqs {
			for j := 0; j < nmsg; j++ {
				c := waitOK(t, q)
				if want := fmt.Sprintf("client %d msg %d", i, j); string(bytes.TrimRight(c.Buf, "\x00")) != want || used[c.Context] {
					t.Fatalf("endpoint %d: %q in buffer %d, want %q", i, c.Buf, c.Context, want)
				}
				used[c.Context] = true
			}
			waitOK(t, clients[i].cq)
		}
		// An RDM endpoint takes no shared receive context.
		hr := newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
		rsrx, err := hr.dom.SharedRx(8)
		must(t, err)
		isErr(t, "a shared context on RDM", hr.rawEP(nil).Bind(rsrx, 0), fabric.ErrInvalid)
		must(t, rsrx.Close())
		for i := range as {
			must(t, as[i].Close())
			must(t, bs[i].Close())
		}
		must(t, srx.Close())
		must(t, srx.Close())
		isErr(t, "receive on a closed shared context", srx.Recv(rm.Bytes()[:8], rm.Desc(), 1), fabric.ErrClosed)
	})
}

// TestFuncThreading mirrors rdm_bw_mt -n 8 (and msg under
// threading=safe): 8 goroutines post on one endpoint at once while
// others read the CQs; every message arrives exactly once and each
// goroutine's messages in its order. Run with -race.
func TestFuncThreading(t *testing.T) {
	const nG, per, slot, rxSlots = 8, 100, 16, 128
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		for _, typ := range []fabric.EPType{fabric.EPRDM, fabric.EPMsg} {
			var ha, hb *host
			var a, b *fabric.Endpoint
			dst := fabric.AddrUnspec
			if typ == fabric.EPMsg {
				ha, hb, a, b = msgPair(t, p, nil)
			} else {
				ha, hb, a, b, dst, _ = pair(t, typ, p, nil)
			}
			sm, rm := ha.mr(nG*per*slot), hb.mr(rxSlots*slot)
			for g := 0; g < nG; g++ {
				for i := 0; i < per; i++ {
					k := g*per + i
					binary.LittleEndian.PutUint32(sm.Bytes()[k*slot:], uint32(g))
					binary.LittleEndian.PutUint32(sm.Bytes()[k*slot+4:], uint32(i))
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errc := make(chan error, nG+2)
			for g := 0; g < nG; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < per; {
						k := g*per + i
						err := a.Send(sm.Bytes()[k*slot:(k+1)*slot], sm.Desc(), dst, uint64(k))
						switch {
						case err == nil:
							i++
						case errors.Is(err, fabric.ErrAgain):
							if ctx.Err() != nil {
								errc <- fmt.Errorf("poster %d: still ErrAgain", g)
								return
							}
						default:
							errc <- fmt.Errorf("poster %d: %w", g, err)
							return
						}
					}
				}()
			}
			// The sender's CQ, read by two goroutines.
			var sendMu sync.Mutex
			sendSeen := map[uint64]bool{}
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			for r := 0; r < 2; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var cs [16]fabric.Completion
					for {
						n, err := ha.cq.ReadContext(rctx, cs[:])
						sendMu.Lock()
						all := len(sendSeen) == nG*per
						sendMu.Unlock()
						if err != nil {
							if !all {
								errc <- fmt.Errorf("send CQ: %w", err)
							}
							return
						}
						sendMu.Lock()
						for _, c := range cs[:n] {
							if c.Err() != nil || sendSeen[c.Context] {
								errc <- fmt.Errorf("send completion %+v (seen %v)", c, sendSeen[c.Context])
							}
							sendSeen[c.Context] = true
						}
						if len(sendSeen) == nG*per {
							rcancel()
						}
						sendMu.Unlock()
					}
				}()
			}
			// The receiver: posts and reads in its own goroutine.
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := make([]uint32, nG)
				posted, got := 0, 0
				var cs [16]fabric.Completion
				for got < nG*per {
					for posted < nG*per && posted-got < rxSlots {
						k := posted % rxSlots
						if err := b.Recv(rm.Bytes()[k*slot:(k+1)*slot], rm.Desc(), fabric.AddrUnspec, uint64(k)); err != nil {
							if !errors.Is(err, fabric.ErrAgain) {
								errc <- fmt.Errorf("recv: %w", err)
								return
							}
							break
						}
						posted++
					}
					n, err := hb.cq.ReadContext(ctx, cs[:])
					if err != nil {
						errc <- fmt.Errorf("recv CQ: %w (%d received)", err, got)
						return
					}
					for _, c := range cs[:n] {
						if c.Err() != nil || c.Len != slot {
							errc <- fmt.Errorf("receive %+v", c)
							return
						}
						g, i := binary.LittleEndian.Uint32(c.Buf), binary.LittleEndian.Uint32(c.Buf[4:])
						if g >= nG || i != next[g] {
							errc <- fmt.Errorf("poster %d message %d, expected %d", g, i, next[min(g, nG-1)])
							return
						}
						next[g]++
						got++
					}
				}
			}()
			// With manual progress nobody else drives the peers' domains
			// while the readers wait: drive them here.
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for waiting := true; waiting; {
				select {
				case <-done:
					waiting = false
				case err := <-errc:
					cancel()
					<-done
					t.Fatalf("%v: %v", typ, err)
				default:
					driveAll()
					runtime.Gosched()
				}
			}
			select {
			case err := <-errc:
				t.Fatalf("%v: %v", typ, err)
			default:
			}
			if len(sendSeen) != nG*per {
				t.Fatalf("%v: %d send completions", typ, len(sendSeen))
			}
		}
	})
}
