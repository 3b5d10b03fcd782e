package fabric_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// The unit half of the fabtests conformance suite (fabtests/unit and the
// "negative" runs of runfabtests.sh), over the in-process mem provider.

// TestUnitGetinfo mirrors getinfo_test: no hints, source address, bad
// node/provider/caps, ordering good and bad, MR mode, progress and
// threading kept; every refusal is ErrNoData.
func TestUnitGetinfo(t *testing.T) {
	ctx := context.Background()
	node := memAddr()
	base := func() fabric.Hints { return fabric.Hints{Provider: fabric.ProviderMem, Node: node} }

	// No hints at all: the devices `softfabric up` prepared, or ErrNoData.
	if infos, err := fabric.GetInfo(ctx, nil); err != nil {
		isErr(t, "no hints", err, fabric.ErrNoData)
	} else {
		for _, in := range infos {
			if in.Provider != fabric.ProviderSoftfabric || in.EP.Type == fabric.EPUnspec {
				t.Fatalf("no hints: offer %+v", in)
			}
		}
	}

	// Only the provider and the source address: one offer per type, best
	// first, with the documented defaults.
	h := base()
	infos, err := fabric.GetInfo(ctx, &h)
	must(t, err)
	if len(infos) != 3 || infos[0].EP.Type != fabric.EPMsg || infos[1].EP.Type != fabric.EPRDM || infos[2].EP.Type != fabric.EPDgram {
		t.Fatalf("offers: %d %+v", len(infos), infos)
	}
	for _, in := range infos {
		if in.Src != netip.MustParseAddr(node) || in.Domain.Name != "mem:"+node || in.Provider != fabric.ProviderMem {
			t.Fatalf("%v: src %v domain %q", in.EP.Type, in.Src, in.Domain.Name)
		}
		if in.Domain.Progress != fabric.ProgressAuto || in.Domain.Threading != fabric.ThreadSafe || in.Domain.MRMode&fabric.MRLocal == 0 {
			t.Fatalf("%v: domain defaults %+v", in.EP.Type, in.Domain)
		}
		if in.TX.InjectSize != fabric.InjectSize || in.TX.Size != fabric.DefaultSize || in.RX.Size != fabric.DefaultSize {
			t.Fatalf("%v: tx %+v rx %+v", in.EP.Type, in.TX, in.RX)
		}
		if in.Caps&(fabric.CapMsg|fabric.CapSend|fabric.CapRecv) != fabric.CapMsg|fabric.CapSend|fabric.CapRecv {
			t.Fatalf("%v: caps %v", in.EP.Type, in.Caps)
		}
	}
	msg, rdm, dgram := infos[0], infos[1], infos[2]
	if msg.Caps&fabric.CapTagged != 0 || rdm.Caps&fabric.CapTagged == 0 || dgram.Caps&fabric.CapRMA != 0 || msg.Caps&fabric.CapRMA == 0 {
		t.Fatalf("caps: msg %v rdm %v dgram %v", msg.Caps, rdm.Caps, dgram.Caps)
	}
	if msg.EP.MaxMsgSize != fabric.MaxMsgSize || rdm.EP.MaxMsgSize != fabric.RDMEagerSize || dgram.EP.MaxMsgSize != 4096 {
		t.Fatalf("max message sizes %d %d %d", msg.EP.MaxMsgSize, rdm.EP.MaxMsgSize, dgram.EP.MaxMsgSize)
	}
	if msg.TX.Flags != fabric.FlagDeliveryComplete || rdm.TX.Flags != fabric.FlagTransmitComplete || dgram.TX.Flags != fabric.FlagTransmitComplete {
		t.Fatalf("completion levels %v %v %v", msg.TX.Flags, rdm.TX.Flags, dgram.TX.Flags)
	}
	if dgram.TX.Order != 0 || msg.TX.Order&fabric.OrderSAS == 0 {
		t.Fatalf("orders: msg %#x dgram %#x", msg.TX.Order, dgram.TX.Order)
	}

	// The source address also comes as a domain name, and IPv4-mapped.
	for _, h := range []fabric.Hints{
		{Provider: fabric.ProviderMem, Domain: fabric.DomainAttr{Name: "mem:" + node}},
		{Provider: fabric.ProviderMem, Node: "::ffff:" + node},
	} {
		infos, err := fabric.GetInfo(ctx, &h)
		must(t, err)
		if infos[0].Src != netip.MustParseAddr(node) {
			t.Fatalf("%+v: src %v", h, infos[0].Src)
		}
	}

	// Good hints are honoured and reported.
	good := []struct {
		name  string
		mod   func(*fabric.Hints)
		check func(fabric.Info) bool
	}{
		{"service", func(h *fabric.Hints) { h.Service = 9000 }, func(in fabric.Info) bool { return in.Service == 9000 }},
		{"tagged caps", func(h *fabric.Hints) { h.Caps = fabric.CapTagged }, func(in fabric.Info) bool {
			return in.EP.Type == fabric.EPRDM && in.Caps&(fabric.CapSend|fabric.CapRecv) == fabric.CapSend|fabric.CapRecv
		}},
		{"rma caps", func(h *fabric.Hints) { h.Caps, h.EPType = fabric.CapRMA, fabric.EPMsg }, func(in fabric.Info) bool {
			all := fabric.CapRead | fabric.CapWrite | fabric.CapRemoteRead | fabric.CapRemoteWrite
			return in.Caps&all == all && in.Caps&fabric.CapAtomic == 0
		}},
		{"msg order", func(h *fabric.Hints) {
			h.EPType, h.TX.Order, h.RX.Order = fabric.EPMsg, fabric.OrderSAS|fabric.OrderRAW|fabric.OrderWAR|fabric.OrderWAW, fabric.OrderSAS
		}, func(in fabric.Info) bool { return in.TX.Order&(fabric.OrderRAW|fabric.OrderWAW) != 0 }},
		{"rdm order", func(h *fabric.Hints) {
			h.EPType, h.TX.Order = fabric.EPRDM, fabric.OrderRAW|fabric.OrderWAW|fabric.OrderSAW
		},
			func(in fabric.Info) bool { return in.TX.Order&fabric.OrderSAW != 0 }},
		{"mr mode", func(h *fabric.Hints) { h.Domain.MRMode = fabric.MRLocal | fabric.MRVirtAddr | fabric.MRProvKey },
			func(in fabric.Info) bool { return in.Domain.MRMode&fabric.MRLocal != 0 }},
		{"manual progress", func(h *fabric.Hints) { h.Domain.Progress = fabric.ProgressManual },
			func(in fabric.Info) bool { return in.Domain.Progress == fabric.ProgressManual }},
		{"domain threading", func(h *fabric.Hints) { h.Domain.Threading = fabric.ThreadDomain },
			func(in fabric.Info) bool { return in.Domain.Threading == fabric.ThreadDomain }},
		{"sizes", func(h *fabric.Hints) { h.TX.Size, h.RX.Size, h.TX.InjectSize = 16, 32, 8 },
			func(in fabric.Info) bool { return in.TX.Size == 16 && in.RX.Size == 32 }},
		{"delivery complete", func(h *fabric.Hints) { h.EPType, h.TX.Flags = fabric.EPRDM, fabric.FlagDeliveryComplete },
			func(in fabric.Info) bool { return in.TX.Flags == fabric.FlagDeliveryComplete }},
	}
	for _, g := range good {
		h := base()
		g.mod(&h)
		infos, err := fabric.GetInfo(ctx, &h)
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		for _, in := range infos {
			if !g.check(in) {
				t.Fatalf("%s: offer %+v", g.name, in)
			}
		}
	}

	// Bad hints: ErrNoData, whatever the reason.
	bad := []struct {
		name string
		mod  func(*fabric.Hints)
	}{
		{"bad provider", func(h *fabric.Hints) { h.Provider = "verbs" }},
		{"bad node", func(h *fabric.Hints) { h.Node = "not-an-address" }},
		{"no node", func(h *fabric.Hints) { h.Node = "" }},
		{"node and domain differ", func(h *fabric.Hints) { h.Domain.Name = "mem:198.18.255.254" }},
		{"trigger", func(h *fabric.Hints) { h.Caps = fabric.CapTrigger }},
		{"rma event dgram", func(h *fabric.Hints) { h.EPType, h.Caps = fabric.EPDgram, fabric.CapMsg|fabric.CapRMAEvent }},
		{"rma event rdm", func(h *fabric.Hints) { h.EPType, h.Caps = fabric.EPRDM, fabric.CapMsg|fabric.CapRMAEvent }},
		{"shared av", func(h *fabric.Hints) { h.Caps = fabric.CapSharedAV }},
		{"tagged msg", func(h *fabric.Hints) { h.EPType, h.Caps = fabric.EPMsg, fabric.CapTagged }},
		{"multi-recv msg", func(h *fabric.Hints) { h.EPType, h.Caps = fabric.EPMsg, fabric.CapMultiRecv }},
		{"rma dgram", func(h *fabric.Hints) { h.EPType, h.Caps = fabric.EPDgram, fabric.CapRMA }},
		{"ep type", func(h *fabric.Hints) { h.EPType = fabric.EPType(9) }},
		{"dgram order", func(h *fabric.Hints) { h.EPType, h.TX.Order = fabric.EPDgram, fabric.OrderSAS }},
		{"unknown order", func(h *fabric.Hints) { h.RX.Order = fabric.Order(1 << 30) }},
		{"mr mode without MRLocal", func(h *fabric.Hints) { h.Domain.MRMode = fabric.MRVirtAddr | fabric.MRProvKey }},
		{"progress", func(h *fabric.Hints) { h.Domain.Progress = fabric.Progress(7) }},
		{"threading", func(h *fabric.Hints) { h.Domain.Threading = fabric.Threading(7) }},
		{"queues", func(h *fabric.Hints) { h.Domain.Queues = 2 }},
		{"inject size", func(h *fabric.Hints) { h.TX.InjectSize = fabric.InjectSize + 1 }},
		{"tx size", func(h *fabric.Hints) { h.TX.Size = 1 << 20 }},
		{"rx size", func(h *fabric.Hints) { h.RX.Size = 1 << 20 }},
		{"iov limit", func(h *fabric.Hints) { h.EPType, h.TX.IOVLimit = fabric.EPRDM, 2 }},
		{"dgram delivery complete", func(h *fabric.Hints) { h.EPType, h.TX.Flags = fabric.EPDgram, fabric.FlagDeliveryComplete }},
	}
	for _, b := range bad {
		h := base()
		b.mod(&h)
		infos, err := fabric.GetInfo(ctx, &h)
		if !errors.Is(err, fabric.ErrNoData) {
			t.Fatalf("%s: %d offers, %v; want ErrNoData", b.name, len(infos), err)
		}
	}

	// A canceled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	h = base()
	if _, err := fabric.GetInfo(cctx, &h); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// TestUnitAV mirrors av_test (rdm, dgram): open/close at sizes 0..1024,
// insert good/bad/duplicate, lookup and remove good/bad, reuse after
// remove, growth past the initial size, insertion before and after the
// endpoint is enabled.
func TestUnitAV(t *testing.T) {
	for _, typ := range []fabric.EPType{fabric.EPRDM, fabric.EPDgram} {
		t.Run(typ.String(), func(t *testing.T) {
			h := newHost(t, hostOpts{typ: typ})
			for _, n := range []int{0, 1, 2, 3, 16, 100, 256, 1024} {
				av, err := h.dom.AV(n)
				must(t, err)
				if av.Count() != 0 {
					t.Fatalf("size %d: count %d", n, av.Count())
				}
				must(t, av.Close())
				must(t, av.Close())
			}
			_, err := h.dom.AV(-1)
			isErr(t, "AV(-1)", err, fabric.ErrInvalid)

			av, err := h.dom.AV(2)
			must(t, err)
			defer func() { must(t, av.Close()) }()
			ip := func(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250)) }

			// Good insertions, in every form; duplicates get the same index.
			x0, err := av.Insert(fabric.Address{IP: ip(0), QPN: 1000})
			must(t, err)
			x1, err := av.InsertString(ip(1).String() + ":1001")
			must(t, err)
			x2, err := av.InsertService(ip(2), 1002)
			must(t, err)
			x3, err := av.InsertGID(ip(3).As16(), 1003)
			must(t, err)
			x4, err := av.InsertString(ip(4).String())
			must(t, err)
			if x0 != 0 || x1 != 1 || x2 != 2 || x3 != 3 || x4 != 4 {
				t.Fatalf("indices %d %d %d %d %d", x0, x1, x2, x3, x4)
			}
			for _, dup := range []func() (fabric.Addr, error){
				func() (fabric.Addr, error) { return av.Insert(fabric.Address{IP: ip(0), QPN: 1000}) },
				func() (fabric.Addr, error) { return av.InsertGID(ip(0).As16(), 1000) },
				func() (fabric.Addr, error) { return av.InsertString(ip(0).String() + ":1000") },
			} {
				if x, err := dup(); err != nil || x != x0 {
					t.Fatalf("duplicate: %d %v", x, err)
				}
			}
			if av.Count() != 5 {
				t.Fatalf("count %d", av.Count())
			}
			if a, err := av.Lookup(x3); err != nil || a != (fabric.Address{IP: ip(3), QPN: 1003}) {
				t.Fatalf("lookup GID entry: %v %v", a, err)
			}
			if a, err := av.Lookup(x4); err != nil || a.QPN != fabric.DefaultService {
				t.Fatalf("lookup default service: %v %v", a, err)
			}
			if a, err := fabric.ParseAddress(x0String(av, x0)); err != nil || a != (fabric.Address{IP: ip(0), QPN: 1000}) {
				t.Fatalf("address round trip: %v %v", a, err)
			}

			// Bad insertions change nothing.
			for _, b := range []fabric.Address{{}, {IP: ip(9)}, {IP: ip(9), QPN: 1 << 24}} {
				if _, err := av.Insert(b); !errors.Is(err, fabric.ErrInvalid) {
					t.Fatalf("insert %v: %v", b, err)
				}
			}
			for _, s := range []string{"", "nonsense", "198.19.0.1:1", "198.19.0.1:99999"} {
				if _, err := av.InsertString(s); !errors.Is(err, fabric.ErrInvalid) {
					t.Fatalf("insert %q: %v", s, err)
				}
			}
			if av.Count() != 5 {
				t.Fatalf("count after bad inserts %d", av.Count())
			}

			// Lookup and remove, good and bad.
			for _, x := range []fabric.Addr{5, 1000, fabric.AddrUnspec} {
				_, err := av.Lookup(x)
				isErr(t, "lookup bad", err, fabric.ErrAddrNotAvail)
				isErr(t, "remove bad", av.Remove(x), fabric.ErrAddrNotAvail)
			}
			must(t, av.Remove(x2))
			_, err = av.Lookup(x2)
			isErr(t, "lookup removed", err, fabric.ErrAddrNotAvail)
			isErr(t, "remove twice", av.Remove(x2), fabric.ErrAddrNotAvail)
			isErr(t, "remove good and bad", av.Remove(x1, 77), fabric.ErrAddrNotAvail)
			if _, err := av.Lookup(x1); err != nil {
				t.Fatalf("a failed remove removed a good index: %v", err)
			}
			must(t, av.Remove())
			// The freed index is reused; the removed address is new again.
			if x, err := av.Insert(fabric.Address{IP: ip(7), QPN: 7}); err != nil || x != x2 {
				t.Fatalf("insert after remove: %d %v, want %d", x, err, x2)
			}
			if x, err := av.InsertService(ip(2), 1002); err != nil || x != 5 {
				t.Fatalf("reinsert: %d %v", x, err)
			}

			// Growth far past the initial size.
			big, err := h.dom.AV(0)
			must(t, err)
			for i := 0; i < 300; i++ {
				if x, err := big.InsertService(ip(i), uint16(2+i)); err != nil || x != fabric.Addr(i) {
					t.Fatalf("grow %d: %d %v", i, x, err)
				}
			}
			for i := 0; i < 300; i++ {
				if a, err := big.Lookup(fabric.Addr(i)); err != nil || a.IP != ip(i) || a.QPN != uint32(2+i) {
					t.Fatalf("after growth %d: %v %v", i, a, err)
				}
			}
			must(t, big.Close())
			_, err = big.Insert(fabric.Address{IP: ip(1), QPN: 5})
			isErr(t, "insert into a closed AV", err, fabric.ErrClosed)

			// Insertion at various stages: before the endpoint is bound,
			// after it is enabled; both peers are reached.
			peer := newHost(t, hostOpts{typ: typ})
			p1, p2 := peer.ep(nil), peer.ep(nil)
			early, err := h.av.Insert(p1.Name())
			must(t, err)
			ep := h.ep(nil)
			late, err := h.av.Insert(p2.Name())
			must(t, err)
			isErr(t, "closing a bound AV", h.av.Close(), fabric.ErrBusy)
			sm, rm := h.mr(64), peer.mr(64)
			for i, p := range []*fabric.Endpoint{p1, p2} {
				must(t, p.Recv(rm.Bytes()[i*32:i*32+32], rm.Desc(), fabric.AddrUnspec, uint64(i)))
			}
			settle(peer, p1, p2)
			copy(sm.Bytes(), "early...late....")
			must(t, ep.Send(sm.Bytes()[:8], sm.Desc(), early, 10))
			must(t, ep.Send(sm.Bytes()[8:16], sm.Desc(), late, 11))
			waitOK(t, h.cq)
			waitOK(t, h.cq)
			got := map[uint64]string{}
			for i := 0; i < 2; i++ {
				c := waitOK(t, peer.cq)
				got[c.Context] = string(c.Buf)
			}
			if got[0] != "early..." || got[1] != "late...." {
				t.Fatalf("received %v", got)
			}
		})
	}
}

// x0String formats AV entry x as ParseAddress reads it.
func x0String(av *fabric.AV, x fabric.Addr) string {
	a, _ := av.Lookup(x)
	return a.String()
}

// TestUnitDomain mirrors dom_test -n 2 (and 8): several domains open at
// once and working; a second domain on the same device is ErrBusy; a
// domain (and fabric) with open children refuse to close with ErrBusy.
func TestUnitDomain(t *testing.T) {
	for _, n := range []int{2, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := context.Background()
			infos := make([]fabric.Info, n)
			for i := range infos {
				in, err := fabric.GetInfo(ctx, &fabric.Hints{Provider: fabric.ProviderMem, Node: memAddr(), EPType: fabric.EPRDM})
				must(t, err)
				infos[i] = in[0]
			}
			fab, err := fabric.OpenFabric(&infos[0])
			must(t, err)
			doms := make([]*fabric.Domain, n)
			cqs := make([]*fabric.CQ, n)
			avs := make([]*fabric.AV, n)
			eps := make([]*fabric.Endpoint, n)
			mrs := make([]*fabric.MR, n)
			for i := range doms {
				if doms[i], err = fab.Domain(&infos[i]); err != nil {
					t.Fatalf("domain %d: %v", i, err)
				}
				domains.Store(doms[i], true)
				if doms[i].Name() != infos[i].Domain.Name || doms[i].Queues() != 1 {
					t.Fatalf("domain %d: %q %d queues", i, doms[i].Name(), doms[i].Queues())
				}
				cqs[i], err = doms[i].CQ(1024)
				must(t, err)
				avs[i], err = doms[i].AV(n)
				must(t, err)
				eps[i], err = doms[i].Endpoint(&infos[i])
				must(t, err)
				must(t, eps[i].Bind(cqs[i], 0))
				must(t, eps[i].Bind(avs[i], 0))
				must(t, eps[i].Enable())
				mrs[i], err = doms[i].RegisterMemory(make([]byte, 64), 0)
				must(t, err)
			}
			// The same device twice: ErrBusy.
			_, err = fab.Domain(&infos[0])
			isErr(t, "a second domain on one device", err, fabric.ErrBusy)
			// A ring: domain i sends to domain i+1.
			for i := range eps {
				next := (i + 1) % n
				x, err := avs[i].Insert(eps[next].Name())
				must(t, err)
				must(t, eps[next].Recv(mrs[next].Bytes()[32:], mrs[next].Desc(), fabric.AddrUnspec, uint64(next)))
				copy(mrs[i].Bytes(), fmt.Sprintf("from %d", i))
				must(t, eps[i].Send(mrs[i].Bytes()[:8], mrs[i].Desc(), x, uint64(i)))
			}
			for i := range eps {
				prev := (i + n - 1) % n
				got := map[bool]fabric.Completion{}
				for k := 0; k < 2; k++ {
					c := waitOK(t, cqs[i])
					got[c.Flags&fabric.FlagRecv != 0] = c
				}
				if want := fmt.Sprintf("from %d", prev); string(got[true].Buf[:len(want)]) != want || got[false].Context != uint64(i) {
					t.Fatalf("domain %d: %+v", i, got)
				}
			}
			// Closing parents with children: ErrBusy, until they are closed.
			isErr(t, "closing a fabric with domains", fab.Close(), fabric.ErrBusy)
			for i, d := range doms {
				isErr(t, "closing a domain with children", d.Close(), fabric.ErrBusy)
				must(t, eps[i].Close())
				isErr(t, "closing a domain with a CQ", d.Close(), fabric.ErrBusy)
				must(t, cqs[i].Close())
				must(t, avs[i].Close())
				isErr(t, "closing a domain with an MR", d.Close(), fabric.ErrBusy)
				must(t, mrs[i].Close())
				domains.Delete(d)
				must(t, d.Close())
				must(t, d.Close())
				_, err := d.CQ(16)
				isErr(t, "a CQ on a closed domain", err, fabric.ErrClosed)
			}
			// The device is free again.
			d, err := fab.Domain(&infos[0])
			must(t, err)
			must(t, d.Close())
			must(t, fab.Close())
			must(t, fab.Close())
			_, err = fab.Domain(&infos[0])
			isErr(t, "a domain on a closed fabric", err, fabric.ErrClosed)
			_, err = fab.Domain(nil)
			isErr(t, "a domain of no info", err, fabric.ErrInvalid)
		})
	}
}

// TestUnitEQ mirrors eq_test: write then read itself, size honoured
// (ErrAgain when full), blocking read (sread) woken by a write and ended
// by its context, peek leaves the event, an empty EQ is ErrAgain.
func TestUnitEQ(t *testing.T) {
	h := newHost(t, hostOpts{typ: fabric.EPMsg})
	_, err := h.fab.EQ(0)
	isErr(t, "EQ(0)", err, fabric.ErrInvalid)
	eq, err := h.fab.EQ(4)
	must(t, err)
	_, err = eq.Poll()
	isErr(t, "poll empty", err, fabric.ErrAgain)
	_, err = eq.Peek()
	isErr(t, "peek empty", err, fabric.ErrAgain)
	for i := 0; i < 4; i++ {
		must(t, eq.Write(fabric.Event{Kind: fabric.EventUser, Context: uint64(i), Data: []byte{byte(i)}}))
	}
	isErr(t, "write to a full EQ", eq.Write(fabric.Event{Kind: fabric.EventUser}), fabric.ErrAgain)
	for i := 0; i < 4; i++ {
		p, err := eq.Peek()
		must(t, err)
		p2, err := eq.Peek()
		must(t, err)
		e, err := eq.Poll()
		must(t, err)
		if e.Kind != fabric.EventUser || e.Context != uint64(i) || e.Data[0] != byte(i) || p.Context != e.Context || p2.Context != e.Context {
			t.Fatalf("event %d: %+v (peeked %+v)", i, e, p)
		}
	}
	_, err = eq.Poll()
	isErr(t, "poll drained", err, fabric.ErrAgain)

	// sread: a read ends with its context, and wakes on a write.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	start := time.Now()
	_, err = eq.Read(ctx)
	cancel()
	isErr(t, "read on empty", err, context.DeadlineExceeded)
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("read returned before its deadline")
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		_ = eq.Write(fabric.Event{Kind: fabric.EventUser, Context: 99})
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	e, err := eq.Read(ctx)
	cancel()
	if err != nil || e.Context != 99 {
		t.Fatalf("read woken by a write: %+v %v", e, err)
	}
	// Room made by reading is usable again.
	for i := 0; i < 4; i++ {
		must(t, eq.Write(fabric.Event{Kind: fabric.EventUser}))
	}
	must(t, eq.Close())
	must(t, eq.Close())
	isErr(t, "write to a closed EQ", eq.Write(fabric.Event{Kind: fabric.EventUser}), fabric.ErrClosed)
}

// TestUnitCQ mirrors cq_test: open/close at sizes 1..65536, bad sizes
// refused, several CQs at once, a blocking read (cq_signal) that times out
// on an empty CQ and wakes on a completion, and a CQ too small for an
// endpoint's queues refused at Bind.
func TestUnitCQ(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		h := newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
		for _, n := range []int{1, 2, 3, 7, 64, 100, 1024, 4096, 65536} {
			q, err := h.dom.CQ(n)
			if err != nil {
				t.Fatalf("CQ(%d): %v", n, err)
			}
			if q.Len() != 0 || q.Read(make([]fabric.Completion, 4)) != 0 {
				t.Fatalf("CQ(%d) not empty", n)
			}
			must(t, q.Close())
			must(t, q.Close())
		}
		for _, n := range []int{0, -1, 1<<20 + 1} {
			_, err := h.dom.CQ(n)
			isErr(t, fmt.Sprintf("CQ(%d)", n), err, fabric.ErrInvalid)
		}
		var many []*fabric.CQ
		for i := 0; i < 32; i++ {
			q, err := h.dom.CQ(16)
			must(t, err)
			many = append(many, q)
		}
		for _, q := range many {
			must(t, q.Close())
		}

		// A blocking read on an empty CQ ends with its context's error.
		// (start is taken first: a goroutine preempted between the two
		// would otherwise see less than the timeout pass.)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		n, err := h.cq.ReadContext(ctx, make([]fabric.Completion, 4))
		cancel()
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 20*time.Millisecond {
			t.Fatalf("ReadContext on empty: %d %v after %v", n, err, time.Since(start))
		}
		_, err = h.cq.ReadContext(context.Background(), nil)
		isErr(t, "ReadContext into nothing", err, fabric.ErrInvalid)

		// cq_signal: a blocked reader wakes when a message arrives.
		peer := newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
		a, b := peer.ep(nil), h.ep(nil)
		x, err := peer.av.Insert(b.Name())
		must(t, err)
		rm, sm := h.mr(64), peer.mr(64)
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 5))
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var c [4]fabric.Completion
			n, err := h.cq.ReadContext(ctx, c[:])
			if err == nil && (n != 1 || c[0].Context != 5 || string(c[0].Buf) != "signal") {
				err = fmt.Errorf("read %d: %+v", n, c[0])
			}
			got <- err
		}()
		time.Sleep(5 * time.Millisecond)
		copy(sm.Bytes(), "signal")
		must(t, a.Send(sm.Bytes()[:6], sm.Desc(), x, 6))
		waitOK(t, peer.cq)
		must(t, <-got)

		// Sizing at Bind: the CQ must hold every operation outstanding.
		// (CQs open before the endpoints that use them: cleanups run in
		// reverse.)
		small, one, two, tiny := h.newCQ(64), h.newCQ(fabric.DefaultSize), h.newCQ(fabric.DefaultSize), h.newCQ(16)
		ep := h.rawEP(nil)
		isErr(t, "binding a CQ too small", ep.Bind(small, 0), fabric.ErrInvalid)
		must(t, ep.Bind(one, fabric.FlagSend))
		isErr(t, "binding the rest of a full CQ", ep.Bind(one, fabric.FlagRecv), fabric.ErrInvalid)
		must(t, ep.Bind(two, fabric.FlagRecv))
		isErr(t, "closing a bound CQ", one.Close(), fabric.ErrBusy)
		// A second endpoint fits only once the first is closed.
		ep2 := h.rawEP(nil)
		isErr(t, "binding a CQ another endpoint fills", ep2.Bind(one, fabric.FlagSend), fabric.ErrInvalid)
		must(t, ep.Close())
		must(t, ep2.Bind(one, fabric.FlagSend))
		// Small queues fit a small CQ exactly.
		in := h.info
		in.TX.Size, in.RX.Size = 8, 8
		ep3 := h.rawEP(&in)
		must(t, ep3.Bind(tiny, 0))
		must(t, ep3.Bind(h.av, 0))
		must(t, ep3.Enable())
		if h.cq.Overruns() != 0 {
			t.Fatalf("overruns %d", h.cq.Overruns())
		}
	})
}

// TestUnitMR mirrors mr_test: registration across every access
// combination, AllocMemory, registration after close (free→alloc), a
// descriptor that does not cover the buffer (ErrAccess at post), empty
// buffers refused, and the accesses enforced at the target.
func TestUnitMR(t *testing.T) {
	h := newHost(t, hostOpts{typ: fabric.EPMsg})
	buf := make([]byte, 8192)
	keys := map[uint64]bool{}
	var open []*fabric.MR
	for acc := fabric.Access(0); acc < 64; acc++ {
		m, err := h.dom.RegisterMemory(buf[acc*64:acc*64+64], acc)
		if err != nil {
			t.Fatalf("access %#x: %v", acc, err)
		}
		if keys[m.Key()] {
			t.Fatalf("access %#x: key %#x reused while registered", acc, m.Key())
		}
		keys[m.Key()] = true
		if &m.Bytes()[0] != &buf[acc*64] || m.Addr() == 0 {
			t.Fatalf("access %#x: region %p at %#x", acc, &m.Bytes()[0], m.Addr())
		}
		open = append(open, m)
	}
	for _, m := range open {
		must(t, m.Close())
		must(t, m.Close())
	}
	_, err := h.dom.RegisterMemory(buf, fabric.Access(1<<10))
	isErr(t, "unknown access", err, fabric.ErrInvalid)
	_, err = h.dom.RegisterMemory(nil, 0)
	isErr(t, "nil buffer", err, fabric.ErrInvalid)
	_, err = h.dom.RegisterMemory(buf[:0], 0)
	isErr(t, "empty buffer", err, fabric.ErrInvalid)

	// Register, close, register the same memory again.
	for i := 0; i < 3; i++ {
		m, err := h.dom.RegisterMemory(buf, 0)
		must(t, err)
		must(t, m.Close())
	}
	am, err := h.dom.AllocMemory(10000, 0)
	must(t, err)
	if len(am.Bytes()) != 10000 || am.Addr()%4096 != 0 {
		t.Fatalf("allocated %d bytes at %#x", len(am.Bytes()), am.Addr())
	}
	pattern(am.Bytes(), 1)
	if h.dom.Info().Domain.MRMode&fabric.MRShared != 0 {
		t.Fatal("an in-process domain reports MRShared: it has no daemon to share memory with")
	}
	_, err = h.dom.AllocMemory(0, 0)
	isErr(t, "allocating nothing", err, fabric.ErrInvalid)
	isErr(t, "closing a domain with an MR", h.dom.Close(), fabric.ErrBusy)

	// At post: a descriptor must cover the buffer.
	cli := newHost(t, hostOpts{typ: fabric.EPMsg})
	a, b := connect(t, cli, h)
	sm := cli.mr(4096)
	other := cli.mr(4096)
	for _, post := range []func() error{
		func() error { return a.Send(sm.Bytes()[:16], other.Desc(), fabric.AddrUnspec, 1) },
		func() error { return a.Send(sm.Bytes()[:16], fabric.Desc{}, fabric.AddrUnspec, 1) },
		func() error { return a.Send(append(sm.Bytes()[4090:4096:4096], 1, 2), sm.Desc(), fabric.AddrUnspec, 1) },
		func() error { return b.Recv(sm.Bytes()[:16], am.Desc(), fabric.AddrUnspec, 1) },
		func() error { return a.Write(sm.Bytes()[:16], other.Desc(), fabric.AddrUnspec, am.Addr(), am.Key(), 1) },
		func() error { return a.Read(sm.Bytes()[:16], other.Desc(), fabric.AddrUnspec, am.Addr(), am.Key(), 1) },
	} {
		isErr(t, "buffer outside its region", post(), fabric.ErrAccess)
	}
	// The allocated region works for RMA, and nothing above was posted.
	must(t, a.Read(sm.Bytes()[:10000%4096], sm.Desc(), fabric.AddrUnspec, am.Addr()+4096, am.Key(), 2))
	if c := waitOK(t, cli.cq); c.Context != 2 || string(sm.Bytes()[:10000%4096]) != string(am.Bytes()[4096:4096+10000%4096]) {
		t.Fatalf("read from allocated memory: %+v", c)
	}
	if cli.cq.Len() != 0 || h.cq.Len() != 0 {
		t.Fatal("refused posts completed")
	}
	must(t, am.Close())

	// The accesses are enforced at the target, each on a fresh connection
	// (an access error ends an RC connection).
	for _, tc := range []struct {
		acc   fabric.Access
		write bool
	}{{fabric.AccessRemoteRead, true}, {fabric.AccessRemoteWrite, false}, {fabric.AccessSend | fabric.AccessRecv, true}} {
		c2 := newHost(t, hostOpts{typ: fabric.EPMsg})
		s2 := newHost(t, hostOpts{typ: fabric.EPMsg})
		a, _ := connect(t, c2, s2)
		lm := c2.mr(64)
		tm, err := s2.dom.RegisterMemory(make([]byte, 64), tc.acc)
		must(t, err)
		t.Cleanup(func() { _ = tm.Close() })
		if tc.write {
			must(t, a.Write(lm.Bytes()[:8], lm.Desc(), fabric.AddrUnspec, tm.Addr(), tm.Key(), 3))
		} else {
			must(t, a.Read(lm.Bytes()[:8], lm.Desc(), fabric.AddrUnspec, tm.Addr(), tm.Key(), 3))
		}
		if c := wait(t, c2.cq); !errors.Is(c.Err(), fabric.ErrRemoteAccess) {
			t.Fatalf("access %#x, write %v: %+v", tc.acc, tc.write, c)
		}
	}
	// A closed region's key stops working at once.
	c3 := newHost(t, hostOpts{typ: fabric.EPMsg})
	s3 := newHost(t, hostOpts{typ: fabric.EPMsg})
	a3, _ := connect(t, c3, s3)
	lm := c3.mr(64)
	tm := s3.mr(64)
	must(t, a3.Write(lm.Bytes()[:8], lm.Desc(), fabric.AddrUnspec, tm.Addr(), tm.Key(), 4))
	waitOK(t, c3.cq)
	must(t, tm.Close())
	must(t, a3.Write(lm.Bytes()[:8], lm.Desc(), fabric.AddrUnspec, tm.Addr(), tm.Key(), 5))
	if c := wait(t, c3.cq); !errors.Is(c.Err(), fabric.ErrRemoteAccess) {
		t.Fatalf("write to a closed region: %+v", c)
	}
}

// TestUnitCntr mirrors cntr_test: open, Add, Set, Read, the error count,
// Wait on a threshold (met, met later, timed out, failed), close.
func TestUnitCntr(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		h := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		c, err := h.dom.Counter()
		must(t, err)
		if c.Read() != 0 || c.ReadErr() != 0 {
			t.Fatalf("new counter %d/%d", c.Read(), c.ReadErr())
		}
		c.Add(5)
		c.Add(2)
		if c.Read() != 7 {
			t.Fatalf("after Add: %d", c.Read())
		}
		c.Set(10)
		if c.Read() != 10 {
			t.Fatalf("after Set: %d", c.Read())
		}
		c.AddErr(3)
		if c.ReadErr() != 3 || c.Read() != 10 {
			t.Fatalf("errors %d, count %d", c.ReadErr(), c.Read())
		}
		c.SetErr(0)
		if c.ReadErr() != 0 {
			t.Fatalf("after SetErr: %d", c.ReadErr())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		must(t, c.Wait(ctx, 10))
		must(t, c.Wait(ctx, 3))
		tctx, tcancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		isErr(t, "wait past the count", c.Wait(tctx, 11), context.DeadlineExceeded)
		tcancel()
		go func() {
			time.Sleep(2 * time.Millisecond)
			c.Add(5)
		}()
		must(t, c.Wait(ctx, 15))
		go func() {
			time.Sleep(2 * time.Millisecond)
			c.AddErr(1)
		}()
		if err := c.Wait(ctx, 100); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait while an operation fails: %v", err)
		}
		isErr(t, "closing a domain with a counter", h.dom.Close(), fabric.ErrBusy)
		must(t, c.Close())
		must(t, c.Close())
	})
}

// TestUnitSetopt mirrors setopt_test: SetOption/GetOption of
// OptMinMultiRecv, the read-only OptCMDataSize and OptMaxMsgSize, OptQKey
// on DGRAM endpoints only and before Enable, OptWorker, OptTimeout and
// OptRetryCount on MSG endpoints only, unknown options.
func TestUnitSetopt(t *testing.T) {
	for _, typ := range []fabric.EPType{fabric.EPMsg, fabric.EPRDM, fabric.EPDgram} {
		t.Run(typ.String(), func(t *testing.T) {
			h := newHost(t, hostOpts{typ: typ})
			ep := h.rawEP(nil)
			if v, err := ep.GetOption(fabric.OptMinMultiRecv); err != nil || v != h.info.EP.MaxMsgSize {
				t.Fatalf("default min multi-recv: %d %v", v, err)
			}
			must(t, ep.SetOption(fabric.OptMinMultiRecv, 100))
			if v, err := ep.GetOption(fabric.OptMinMultiRecv); err != nil || v != 100 {
				t.Fatalf("min multi-recv: %d %v", v, err)
			}
			isErr(t, "negative min multi-recv", ep.SetOption(fabric.OptMinMultiRecv, -1), fabric.ErrInvalid)
			if v, err := ep.GetOption(fabric.OptCMDataSize); err != nil || v != fabric.MaxCMData {
				t.Fatalf("CM data size: %d %v", v, err)
			}
			isErr(t, "setting the CM data size", ep.SetOption(fabric.OptCMDataSize, 10), fabric.ErrInvalid)
			if v, err := ep.GetOption(fabric.OptMaxMsgSize); err != nil || v != h.info.EP.MaxMsgSize {
				t.Fatalf("max message size: %d %v", v, err)
			}
			isErr(t, "setting the max message size", ep.SetOption(fabric.OptMaxMsgSize, 10), fabric.ErrInvalid)
			isErr(t, "an unknown option", ep.SetOption(fabric.Option(999), 1), fabric.ErrNotSupported)
			_, err := ep.GetOption(fabric.Option(999))
			isErr(t, "reading an unknown option", err, fabric.ErrNotSupported)
			isErr(t, "a worker out of range", ep.SetOption(fabric.OptWorker, h.dom.Queues()), fabric.ErrInvalid)
			must(t, ep.SetOption(fabric.OptWorker, 0))
			if typ == fabric.EPMsg {
				for _, o := range []struct {
					opt      fabric.Option
					def, bad int
				}{{fabric.OptTimeout, 14, 32}, {fabric.OptRetryCount, 7, 8}} {
					if v, err := ep.GetOption(o.opt); err != nil || v != o.def {
						t.Fatalf("option %d default: %d %v", o.opt, v, err)
					}
					isErr(t, "an RC option out of range", ep.SetOption(o.opt, o.bad), fabric.ErrInvalid)
					isErr(t, "an RC option of 0", ep.SetOption(o.opt, 0), fabric.ErrInvalid)
					must(t, ep.SetOption(o.opt, 5))
					if v, err := ep.GetOption(o.opt); err != nil || v != 5 {
						t.Fatalf("option %d: %d %v", o.opt, v, err)
					}
				}
			} else {
				isErr(t, "an RC timeout off MSG", ep.SetOption(fabric.OptTimeout, 17), fabric.ErrNotSupported)
			}
			if typ != fabric.EPDgram {
				isErr(t, "Q_Key off DGRAM", ep.SetOption(fabric.OptQKey, 1), fabric.ErrNotSupported)
				_, err := ep.GetOption(fabric.OptQKey)
				isErr(t, "reading a Q_Key off DGRAM", err, fabric.ErrNotSupported)
				return
			}
			isErr(t, "a Q_Key too large", ep.SetOption(fabric.OptQKey, 1<<33), fabric.ErrInvalid)
			must(t, ep.SetOption(fabric.OptQKey, 0x11111111))
			if v, err := ep.GetOption(fabric.OptQKey); err != nil || v != 0x11111111 {
				t.Fatalf("Q_Key: %#x %v", v, err)
			}
			must(t, ep.Bind(h.cq, 0))
			must(t, ep.Bind(h.av, 0))
			must(t, ep.Enable())
			isErr(t, "a Q_Key after Enable", ep.SetOption(fabric.OptQKey, 5), fabric.ErrInvalid)
			isErr(t, "a worker after Enable", ep.SetOption(fabric.OptWorker, 0), fabric.ErrInvalid)
			// Two endpoints with the same custom Q_Key talk.
			peer := newHost(t, hostOpts{typ: fabric.EPDgram})
			pe := peer.rawEP(nil)
			must(t, pe.SetOption(fabric.OptQKey, 0x11111111))
			must(t, pe.Bind(peer.cq, 0))
			must(t, pe.Bind(peer.av, 0))
			must(t, pe.Enable())
			x, err := h.av.Insert(pe.Name())
			must(t, err)
			sm, rm := h.mr(64), peer.mr(64)
			must(t, pe.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 1))
			settle(peer, pe)
			copy(sm.Bytes(), "qkey")
			must(t, ep.Send(sm.Bytes()[:4], sm.Desc(), x, 2))
			waitOK(t, h.cq)
			if c := waitOK(t, peer.cq); string(c.Buf) != "qkey" {
				t.Fatalf("custom Q_Key: %+v", c)
			}
		})
	}
}

// TestUnitNegative mirrors the "negative" runs (fi_msg/rdm/dgram against a
// bogus node) and fabtests' bad-input checks: a connect nobody answers
// fails cleanly; posting on a closed or not-enabled endpoint, to an
// unknown address, from a buffer outside its MR, or injecting too much
// is refused with a clear error and disturbs nothing else; closing twice
// is fine; closing a parent with children is ErrBusy.
func TestUnitNegative(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		// A bogus node: GetInfo refuses it.
		_, err := fabric.GetInfo(ctx, &fabric.Hints{Provider: fabric.ProviderMem, Node: "bogus.invalid"})
		isErr(t, "bogus node", err, fabric.ErrNoData)

		// MSG: connecting where nobody listens fails, and the endpoint
		// stays usable for nothing but closing.
		cli := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		ep := cli.ep(nil)
		err = ep.Connect(ctx, netip.MustParseAddrPort(memAddr()+":7471"), nil)
		if err == nil || ctx.Err() != nil {
			t.Fatalf("connect to nobody: %v", err)
		}
		sm := cli.mr(4096)
		isErr(t, "send after a failed connect", ep.Send(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 1), fabric.ErrNotConnected)
		isErr(t, "connect with too much private data", cli.ep(nil).Connect(ctx, netip.MustParseAddrPort(cli.addr+":7471"),
			make([]byte, fabric.MaxCMData+1)), fabric.ErrInvalid)

		// Not enabled, enabled but not connected, closed.
		fresh := cli.rawEP(nil)
		isErr(t, "send before Enable", fresh.Send(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 1), fabric.ErrNotConnected)
		isErr(t, "recv before Enable", fresh.Recv(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 1), fabric.ErrNotConnected)
		isErr(t, "enable without a CQ", fresh.Enable(), fabric.ErrInvalid)
		idle := cli.ep(nil)
		isErr(t, "send before Connect", idle.Send(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 1), fabric.ErrNotConnected)
		isErr(t, "write before Connect", idle.Write(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 0, 0, 1), fabric.ErrNotConnected)
		isErr(t, "bind after Enable", idle.Bind(cli.newCQ(1024), 0), fabric.ErrInvalid)
		isErr(t, "enable twice", idle.Enable(), fabric.ErrInvalid)
		must(t, idle.Close())
		must(t, idle.Close())
		isErr(t, "send after Close", idle.Send(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 1), fabric.ErrClosed)
		isErr(t, "recv after Close", idle.Recv(sm.Bytes()[:1], sm.Desc(), fabric.AddrUnspec, 1), fabric.ErrClosed)
		isErr(t, "inject after Close", idle.Inject([]byte("x"), fabric.AddrUnspec), fabric.ErrClosed)

		// A connected pair: bad posts are refused, good ones around them
		// still go through.
		srv := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		a, b := connect(t, cli, srv)
		rm := srv.mr(4096)
		must(t, b.Recv(rm.Bytes()[:100], rm.Desc(), fabric.AddrUnspec, 10))
		isErr(t, "inject too large", a.Inject(make([]byte, fabric.InjectSize+1), fabric.AddrUnspec), fabric.ErrInvalid)
		isErr(t, "inject-write too large", a.InjectWrite(make([]byte, fabric.InjectSize+1), fabric.AddrUnspec, rm.Addr(), rm.Key()), fabric.ErrInvalid)
		isErr(t, "buffer outside its MR", a.Send(make([]byte, 8), sm.Desc(), fabric.AddrUnspec, 11), fabric.ErrAccess)
		isErr(t, "too many buffers", a.SendMsg(&fabric.Msg{IOV: make([][]byte, fabric.MaxIOV+1), Desc: make([]fabric.Desc, fabric.MaxIOV+1)}, 0), fabric.ErrInvalid)
		isErr(t, "a key too large", a.Write(sm.Bytes()[:8], sm.Desc(), fabric.AddrUnspec, rm.Addr(), 1<<32, 12), fabric.ErrInvalid)
		isErr(t, "tagged on MSG", a.TSend(sm.Bytes()[:8], sm.Desc(), fabric.AddrUnspec, 1, 13), fabric.ErrNotSupported)
		isErr(t, "cancel on MSG", b.Cancel(10), fabric.ErrNotSupported)
		copy(sm.Bytes(), "still fine")
		must(t, a.Send(sm.Bytes()[:10], sm.Desc(), fabric.AddrUnspec, 14))
		if c := waitOK(t, cli.cq); c.Context != 14 {
			t.Fatalf("good send after bad ones: %+v", c)
		}
		if c := waitOK(t, srv.cq); c.Context != 10 || string(c.Buf) != "still fine" {
			t.Fatalf("receive after bad posts: %+v", c)
		}

		// Unconnected endpoints: unknown AV indices.
		for _, typ := range []fabric.EPType{fabric.EPRDM, fabric.EPDgram} {
			ha, hb, ea, eb, ab, _ := pair(t, typ, p, nil)
			s, r := ha.mr(64), hb.mr(64)
			isErr(t, "send to an unknown address", ea.Send(s.Bytes()[:1], s.Desc(), ab+7, 1), fabric.ErrAddrNotAvail)
			isErr(t, "send to AddrUnspec", ea.Send(s.Bytes()[:1], s.Desc(), fabric.AddrUnspec, 1), fabric.ErrAddrNotAvail)
			isErr(t, "inject to an unknown address", ea.Inject(s.Bytes()[:1], ab+7), fabric.ErrAddrNotAvail)
			isErr(t, "inject too large", ea.Inject(make([]byte, fabric.InjectSize+1), ab), fabric.ErrInvalid)
			isErr(t, "message too large", ea.Send(make([]byte, ha.info.EP.MaxMsgSize+1), fabric.Desc{}, ab, 1), fabric.ErrInvalid)
			isErr(t, "buffer outside its MR", ea.Send(s.Bytes()[:8], r.Desc(), ab, 1), fabric.ErrAccess)
			if typ == fabric.EPRDM {
				isErr(t, "recv from an unknown address", eb.Recv(r.Bytes(), r.Desc(), 42, 1), fabric.ErrAddrNotAvail)
				isErr(t, "write to an unknown address", ea.Write(s.Bytes()[:8], s.Desc(), ab+7, r.Addr(), r.Key(), 1), fabric.ErrAddrNotAvail)
				isErr(t, "tagged inject too large", ea.TInject(make([]byte, fabric.InjectSize+1), ab, 1), fabric.ErrInvalid)
			} else {
				isErr(t, "RMA on DGRAM", ea.Write(s.Bytes()[:8], s.Desc(), ab, r.Addr(), r.Key(), 1), fabric.ErrNotSupported)
			}
			must(t, eb.Recv(r.Bytes(), r.Desc(), fabric.AddrUnspec, 2))
			settle(hb, eb)
			must(t, ea.Inject([]byte("ok"), ab))
			if c := waitOK(t, hb.cq); string(c.Buf) != "ok" {
				t.Fatalf("%v: inject after bad posts: %+v", typ, c)
			}
			if ha.cq.Len() != 0 {
				t.Fatalf("%v: refused posts completed", typ)
			}
			noAVcq := ha.newCQ(1024)
			rdmEP := ha.rawEP(nil)
			isErr(t, "enable without an AV", func() error {
				must(t, rdmEP.Bind(noAVcq, 0))
				return rdmEP.Enable()
			}(), fabric.ErrInvalid)
		}

		// Closing twice, and parents with children.
		h := newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
		cntr := h.counter()
		e := h.rawEP(nil)
		must(t, e.Bind(h.cq, 0))
		must(t, e.Bind(h.av, 0))
		must(t, e.Bind(h.eq, 0))
		must(t, e.Bind(cntr, fabric.FlagSend))
		must(t, e.Enable())
		other := newHost(t, hostOpts{typ: fabric.EPRDM, progress: p})
		isErr(t, "binding another domain's CQ", h.rawEP(nil).Bind(other.cq, 0), fabric.ErrInvalid)
		for _, c := range []interface{ Close() error }{h.cq, h.av, h.eq, cntr, h.dom, h.fab} {
			isErr(t, fmt.Sprintf("closing a %T in use", c), c.Close(), fabric.ErrBusy)
		}
		must(t, e.Close())
		must(t, e.Close())
		must(t, cntr.Close())
		must(t, cntr.Close())
		lh := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		pep := listen(t, lh)
		isErr(t, "closing an EQ a passive endpoint uses", lh.eq.Close(), fabric.ErrBusy)
		isErr(t, "closing a fabric with a passive endpoint", lh.fab.Close(), fabric.ErrBusy)
		must(t, pep.Close())
		must(t, pep.Close())
	})
}

// TestUnitNegativeUnreachable mirrors fi_rdm against a bogus node: sends
// to an RDM address nobody answers fail with ErrTimedOut once the
// connection requests give up (about 4 s), and the endpoint goes on
// with other peers.
func TestUnitNegativeUnreachable(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		t.Parallel()
		ha, hb, a, b, ab, _ := pair(t, fabric.EPRDM, p, nil)
		nobody, err := ha.av.Insert(fabric.Address{IP: netip.MustParseAddr(memAddr()), QPN: 5000})
		must(t, err)
		sm, rm := ha.mr(64), hb.mr(64)
		for i := 0; i < 3; i++ {
			must(t, a.Send(sm.Bytes()[:8], sm.Desc(), nobody, uint64(i)))
		}
		must(t, a.Read(sm.Bytes()[8:16], sm.Desc(), nobody, 0, 1, 3))
		for i := 0; i < 4; i++ {
			if c := wait(t, ha.cq); c.Context != uint64(i) || !errors.Is(c.Err(), fabric.ErrTimedOut) {
				t.Fatalf("operation %d to nobody: %+v", i, c)
			}
		}
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 1))
		must(t, a.Send(pattern(sm.Bytes()[:8], 1), sm.Desc(), ab, 9))
		waitOK(t, ha.cq)
		if c := waitOK(t, hb.cq); string(c.Buf) != string(sm.Bytes()[:8]) {
			t.Fatalf("after the timeout: %+v", c)
		}
	})
}
