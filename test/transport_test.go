package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/bpf/impair"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/netnstest"
)

const all = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic

// end is one host's device opened in this process, on the real kernel
// path: AF_XDP sockets bound in the host's namespace, the classifier
// `softfabric up` attached.
type end struct {
	h   *netnstest.Host
	d   *device.Device
	scq *verbs.CQ
	rcq *verbs.CQ
	buf *mr.Region
}

func open(t *testing.T, h *netnstest.Host) *end {
	t.Helper()
	e := &end{h: h, scq: verbs.NewCQ(8192), rcq: verbs.NewCQ(8192)}
	if err := h.Do(func() (err error) { e.d, err = device.OpenAny(h.Iface, device.OpenOptions{}); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		start := time.Now()
		e.d.Close()
		if d := time.Since(start); d > time.Second {
			t.Logf("closing the device took %v", d)
		}
	})
	var err error
	if e.buf, err = e.d.MRs().Register(make([]byte, 4<<20), all); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *end) gid() netip.Addr {
	g, _ := e.d.GID(e.h.Addr.Addr())
	return g
}

// rcPair connects an RC queue pair on a to one on b.
func rcPair(t *testing.T, a, b *end, rqa, rqb *verbs.RecvQueue) (*rc.QP, *rc.QP) {
	t.Helper()
	return rcPairOn(t, a, b, rqa, rqb, 0, 0)
}

// rcPairOn is rcPair with the queue pairs on workers wa of a and wb of b.
func rcPairOn(t *testing.T, a, b *end, rqa, rqb *verbs.RecvQueue, wa, wb int) (*rc.QP, *rc.QP) {
	t.Helper()
	return rcPairWith(t, a, b, rqa, rqb, wa, wb, device.ConnectOptions{Timeout: 14})
}

// rcPairWith is rcPairOn with the connection's options.
func rcPairWith(t *testing.T, a, b *end, rqa, rqb *verbs.RecvQueue, wa, wb int, o device.ConnectOptions) (*rc.QP, *rc.QP) {
	t.Helper()
	qa, err := a.d.NewRC(device.QPConfig{SendCQ: a.scq, RecvCQ: a.rcq, RQ: rqa, SQDepth: 512, Worker: wa}, all)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.d.NewRC(device.QPConfig{SendCQ: b.scq, RecvCQ: b.rcq, RQ: rqb, SQDepth: 512, Worker: wb}, all)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := rand.Uint32()&0xffffff, rand.Uint32()&0xffffff
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.h.Do(func() error {
		return a.d.ConnectRC(ctx, qa, pa, device.Remote{QPN: qb.QPN(), PSN: pb, GID: b.gid()}, o)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.h.Do(func() error {
		return b.d.ConnectRC(ctx, qb, pb, device.Remote{QPN: qa.QPN(), PSN: pa, GID: a.gid()}, o)
	}); err != nil {
		t.Fatal(err)
	}
	return qa, qb
}

// drive runs both devices until done or the deadline.
func drive(t *testing.T, a, b *end, d time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; !done(); i++ {
		if _, err := a.d.Progress(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.d.Progress(); err != nil {
			t.Fatal(err)
		}
		if i&1023 == 0 && time.Now().After(deadline) {
			t.Fatalf("not done after %v", d)
		}
	}
}

func poll(t *testing.T, a, b *end, cq *verbs.CQ, n int) []verbs.Completion {
	t.Helper()
	out := make([]verbs.Completion, 0, n)
	buf := make([]verbs.Completion, 64)
	drive(t, a, b, 20*time.Second, func() bool {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		return len(out) >= n
	})
	return out
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func sge(r *mr.Region, off, n int) []mr.SGE {
	return []mr.SGE{{Addr: r.Addr() + uint64(off), Length: uint32(n), LKey: r.LKey()}}
}

// TestRCOverXDP: every RC operation between two namespaces over real XDP
// and AF_XDP, with the data checked at the far end.
func TestRCOverXDP(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(map[int]string{1500: "mtu1500", 9000: "mtu9000-multibuffer"}[mtu], func(t *testing.T) {
			p := setup(t, netnstest.Options{MTU: mtu}, false)
			up(t, p.A, p.B)
			checkRCOps(t, open(t, p.A), open(t, p.B), 0, 0)
		})
	}
}

// checkRCOps runs every RC operation from a queue pair on worker wa of a
// to one on worker wb of b, with the data checked at the far end: send
// with immediate, write, read (0 B to 1 MiB), both atomics, and a write
// under a bad rkey, which gets the IBTA NAK.
func checkRCOps(t *testing.T, a, b *end, wa, wb int) {
	t.Helper()
	qa, qb := rcPairOn(t, a, b, verbs.NewRecvQueue(256), verbs.NewRecvQueue(256), wa, wb)
	for i, n := range []int{0, 1, 1000, 4096, 65536, 1 << 20} {
		src := a.buf.Bytes()[:n]
		fill(src, uint64(i))
		clear(b.buf.Bytes()[:n])
		if err := qb.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: sge(b.buf, 0, 1<<20)}); err != nil {
			t.Fatal(err)
		}
		wrs := []verbs.SendWR{
			{Op: verbs.OpSendImm, Imm: uint32(i), SGL: sge(a.buf, 0, n)},
			{Op: verbs.OpWrite, SGL: sge(a.buf, 0, n), RemoteAddr: b.buf.Addr() + 2<<20, RKey: b.buf.RKey()},
			{Op: verbs.OpRead, SGL: sge(a.buf, 2<<20, n), RemoteAddr: b.buf.Addr() + 2<<20, RKey: b.buf.RKey()},
		}
		for k := range wrs {
			wrs[k].ID, wrs[k].Flags = uint64(k), verbs.Signaled
			if err := qa.PostSend(&wrs[k]); err != nil {
				t.Fatal(err)
			}
		}
		for k, c := range poll(t, a, b, a.scq, 3) {
			if c.Status != verbs.Success || c.WRID != uint64(k) {
				t.Fatalf("size %d: completion %+v", n, c)
			}
		}
		rc := poll(t, a, b, b.rcq, 1)[0]
		if rc.Status != verbs.Success || rc.ByteLen != uint32(n) || rc.Imm != uint32(i) {
			t.Fatalf("size %d: receive %+v", n, rc)
		}
		if !bytes.Equal(b.buf.Bytes()[:n], src) || !bytes.Equal(b.buf.Bytes()[2<<20:2<<20+n], src) || !bytes.Equal(a.buf.Bytes()[2<<20:2<<20+n], src) {
			t.Fatalf("size %d: data differs after send/write/read", n)
		}
	}
	// Atomics.
	word := b.buf.Bytes()[3<<20 : 3<<20+8]
	binary.NativeEndian.PutUint64(word, 10)
	for k, wr := range []verbs.SendWR{
		{Op: verbs.OpFetchAdd, CompareAdd: 5},
		{Op: verbs.OpCmpSwap, CompareAdd: 15, Swap: 99},
	} {
		wr.Flags, wr.SGL, wr.RemoteAddr, wr.RKey = verbs.Signaled, sge(a.buf, 3<<20, 8), b.buf.Addr()+3<<20, b.buf.RKey()
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if c := poll(t, a, b, a.scq, 1)[0]; c.Status != verbs.Success {
			t.Fatalf("atomic %d: %+v", k, c)
		}
		if got, want := binary.NativeEndian.Uint64(a.buf.Bytes()[3<<20:]), []uint64{10, 15}[k]; got != want {
			t.Fatalf("atomic %d returned %d, want %d", k, got, want)
		}
	}
	if v := binary.NativeEndian.Uint64(word); v != 99 {
		t.Fatalf("remote word %d, want 99", v)
	}
	// A bad rkey gets the IBTA NAK over the wire too.
	bad := verbs.SendWR{ID: 9, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(a.buf, 0, 8), RemoteAddr: b.buf.Addr(), RKey: b.buf.RKey() ^ 0x10000}
	if err := qa.PostSend(&bad); err != nil {
		t.Fatal(err)
	}
	if c := poll(t, a, b, a.scq, 1)[0]; c.Status != verbs.RemAccessErr {
		t.Fatalf("bad rkey: %+v", c)
	}
}

// TestUDOverXDP: datagrams with the sender's address in the completion.
func TestUDOverXDP(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	checkUD(t, open(t, p.A), open(t, p.B))
}

// checkUD sends 20 datagrams with immediates from a to b and checks
// them, and the sender's address and QPN, at b.
func checkUD(t *testing.T, a, b *end) {
	t.Helper()
	qa, qb, ah := udPair(t, a, b, 0x1234, verbs.NewRecvQueue(64), verbs.NewRecvQueue(64))
	for i := 0; i < 20; i++ {
		if err := qb.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: sge(b.buf, i*2048, 2048)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		fill(a.buf.Bytes()[i*1024:i*1024+1000], uint64(i))
		if err := qa.PostSend(&verbs.SendWR{ID: uint64(i), Op: verbs.OpSendImm, Imm: uint32(i), Dest: ah, SGL: sge(a.buf, i*1024, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range poll(t, a, b, b.rcq, 20) {
		i := int(c.WRID)
		if c.Status != verbs.Success || c.ByteLen != ud.GRHSize+1000 || c.SrcQP != qa.QPN() || c.Imm != uint32(i) || netip.AddrFrom16(c.SrcGID).Unmap() != a.h.Addr.Addr() {
			t.Fatalf("receive %+v", c)
		}
		if !bytes.Equal(b.buf.Bytes()[i*2048+ud.GRHSize:i*2048+ud.GRHSize+1000], a.buf.Bytes()[i*1024:i*1024+1000]) {
			t.Fatalf("datagram %d differs", i)
		}
	}
}

// udPair makes a UD queue pair on a and one on b, with Q_Key qkey and
// receive queues rqa and rqb, and the address handle from a's to b's.
func udPair(t *testing.T, a, b *end, qkey uint32, rqa, rqb *verbs.RecvQueue) (qa, qb *ud.QP, ah *verbs.AddressHandle) {
	t.Helper()
	qa, err := a.d.NewUD(device.QPConfig{SendCQ: a.scq, RecvCQ: a.rcq, RQ: rqa}, qkey)
	if err != nil {
		t.Fatal(err)
	}
	if qb, err = b.d.NewUD(device.QPConfig{SendCQ: b.scq, RecvCQ: b.rcq, RQ: rqb}, qkey); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.h.Do(func() (err error) { ah, err = a.d.AddressHandle(ctx, b.gid(), qa.QPN(), qb.QPN(), qkey); return }); err != nil {
		t.Fatal(err)
	}
	return qa, qb, ah
}

// udTo makes a UD queue pair on e's worker w with Q_Key qkey, and the
// address handle from it to QPN dest at gid.
func udTo(t *testing.T, e *end, w int, qkey uint32, gid netip.Addr, dest uint32) (*ud.QP, *verbs.AddressHandle) {
	t.Helper()
	q, err := e.d.NewUD(device.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, RQ: verbs.NewRecvQueue(1), Worker: w}, qkey)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ah *verbs.AddressHandle
	if err := e.h.Do(func() (err error) { ah, err = e.d.AddressHandle(ctx, gid, q.QPN(), dest, qkey); return }); err != nil {
		t.Fatal(err)
	}
	return q, ah
}

// impairWire attaches the impairment program cfg to the egress of both
// ends of the wired pair's bridge: what each host sends is dropped,
// corrupted and duplicated on its way. The caller closes them.
func impairWire(t *testing.T, p *netnstest.Pair, cfg impair.Config) []*impair.Impairment {
	t.Helper()
	var imps []*impair.Impairment
	for _, ifname := range []string{p.WireA, p.WireB} {
		if err := p.Wire.Do(func() error {
			ifc, err := netIndex(ifname)
			if err != nil {
				return err
			}
			im, err := impair.Attach(ifc, impair.Egress, cfg)
			if err == nil {
				imps = append(imps, im)
			}
			return err
		}); err != nil {
			for _, im := range imps {
				im.Close()
			}
			t.Fatal(err)
		}
	}
	return imps
}

// TestHostileKernelPath: the transport over real veth with the kernel
// dropping, corrupting and duplicating RoCEv2 frames in both directions
// (the impairment program on the bridge between the hosts): every request
// completes, exactly once, with the right data.
func TestHostileKernelPath(t *testing.T) {
	p := setup(t, netnstest.Options{}, true)
	up(t, p.A, p.B)
	imps := impairWire(t, p, impair.Config{DropPPM: 30_000, CorruptPPM: 30_000, DuplicatePPM: 30_000, UDPPort: impair.RoCEv2Port})
	defer func() {
		for _, im := range imps {
			im.Close()
		}
	}()
	// On top of the kernel's faults, both AF_XDP links reorder 5 % of
	// what they send (the debugging wrapper device.Open adds on request).
	t.Setenv("SOFTFABRIC_DEBUG_LINK_FAULTS", "reorder=5%,reorderdelay=30us")
	a, b := open(t, p.A), open(t, p.B)
	const nqp, perQP, size = 4, 400, 3000
	srq := verbs.NewSRQ(1024)
	qas := make([]*rc.QP, nqp)
	for i := range qas {
		qas[i], _ = rcPair(t, a, b, verbs.NewRecvQueue(16), srq)
	}
	// 1000 receive slots of size bytes each; a slot goes back on the SRQ
	// once its message is checked.
	for i := 0; i < 1000; i++ {
		if err := srq.Post(&verbs.RecvWR{ID: uint64(i), SGL: sge(b.buf, i*size, size)}); err != nil {
			t.Fatal(err)
		}
	}
	// Each QP: sends carrying (qp, seq) and writes of a pattern into its own
	// slot, then a fetch-add per request: the final counter must equal the
	// number of requests exactly (an atomic run twice would overshoot).
	counter := b.buf.Bytes()[4<<20-8:]
	clear(counter)
	type state struct{ posted, done int }
	st := make([]state, nqp)
	recvSeen := map[[2]int]bool{}
	cs := make([]verbs.Completion, 64)
	finished := func() bool {
		for i := range st {
			if st[i].done < perQP {
				return false
			}
		}
		return len(recvSeen) == nqp*perQP/2
	}
	deadline := time.Now().Add(60 * time.Second)
	for !finished() {
		for i, q := range qas {
			for st[i].posted < perQP && st[i].posted-st[i].done < 16 {
				seq := st[i].posted
				off := (i*32 + seq%32) * size // per-QP slots, more than in flight
				var wr verbs.SendWR
				if seq%2 == 0 {
					msg := a.buf.Bytes()[off : off+size]
					fill(msg, uint64(i<<20|seq))
					binary.LittleEndian.PutUint32(msg, uint32(i<<16|seq))
					wr = verbs.SendWR{Op: verbs.OpSend, SGL: sge(a.buf, off, size)}
				} else {
					wr = verbs.SendWR{Op: verbs.OpFetchAdd, CompareAdd: 1, SGL: sge(a.buf, (3<<20)+i*8, 8), RemoteAddr: b.buf.Addr() + 4<<20 - 8, RKey: b.buf.RKey()}
				}
				wr.ID, wr.Flags = uint64(seq), verbs.Signaled
				if err := q.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				st[i].posted++
			}
		}
		a.d.Progress()
		b.d.Progress()
		for n := a.scq.Poll(cs); n > 0; n = a.scq.Poll(cs) {
			for _, c := range cs[:n] {
				i := -1
				for k, q := range qas {
					if q.QPN() == c.QPN {
						i = k
					}
				}
				if c.Status != verbs.Success || c.WRID != uint64(st[i].done) {
					t.Fatalf("QP %d: completion %+v, expected request %d", i, c, st[i].done)
				}
				st[i].done++
			}
		}
		for n := b.rcq.Poll(cs); n > 0; n = b.rcq.Poll(cs) {
			for _, c := range cs[:n] {
				if c.Status != verbs.Success || c.ByteLen != size {
					t.Fatalf("receive %+v", c)
				}
				slot := int(c.WRID) * size
				got := b.buf.Bytes()[slot : slot+size]
				id := binary.LittleEndian.Uint32(got)
				key := [2]int{int(id >> 16), int(id & 0xffff)}
				if recvSeen[key] {
					t.Fatalf("message %v delivered twice", key)
				}
				recvSeen[key] = true
				want := make([]byte, size)
				fill(want, uint64(key[0]<<20|key[1]))
				binary.LittleEndian.PutUint32(want, id)
				if !bytes.Equal(got, want) {
					t.Fatalf("message %v corrupted", key)
				}
				_ = srq.Post(&verbs.RecvWR{ID: c.WRID, SGL: sge(b.buf, slot, size)})
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not finished: %+v, %d received", st, len(recvSeen))
		}
	}
	if v := binary.NativeEndian.Uint64(counter); v != nqp*perQP/2 {
		t.Fatalf("remote counter %d after %d fetch-adds: an atomic ran twice or not at all", v, nqp*perQP/2)
	}
	var total impair.Counters
	for _, im := range imps {
		c, err := im.Counters()
		if err != nil {
			t.Fatal(err)
		}
		total.Dropped += c.Dropped
		total.Corrupted += c.Corrupted
		total.Duplicated += c.Duplicated
	}
	sa, sb := a.d.Stats(), b.d.Stats()
	t.Logf("kernel impairment: %+v; engine A %+v; engine B %+v", total, sa, sb)
	if total.Dropped == 0 || total.Corrupted == 0 || total.Duplicated == 0 {
		t.Fatalf("faults not injected: %+v", total)
	}
	if sa.BadICRC+sb.BadICRC == 0 {
		t.Fatal("no corrupted frame was caught by the ICRC")
	}
}

func netIndex(name string) (int, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifc.Index, nil
}

// TestIdleDeviceCostsNoCPU: a device with nothing to do backs off into a
// blocking wait on its AF_XDP sockets, and wakes for the next packet.
func TestIdleDeviceCostsNoCPU(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	a, b := open(t, p.A), open(t, p.B)
	qa, qb := rcPair(t, a, b, verbs.NewRecvQueue(16), verbs.NewRecvQueue(16))
	// Run 2.5 s; measure the process's CPU between 0.5 s (backed off by
	// then) and 2.5 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	cpu := make(chan time.Duration, 2)
	go func() {
		time.Sleep(500 * time.Millisecond)
		cpu <- cpuTime(t)
		<-ctx.Done()
		cpu <- cpuTime(t)
	}()
	if err := b.d.Run(ctx, nil); err != context.DeadlineExceeded {
		t.Fatal(err)
	}
	c0 := <-cpu
	used := <-cpu - c0
	t.Logf("idle device for 2 s: %v of CPU", used)
	if used > 40*time.Millisecond {
		t.Fatalf("idle device used %v of CPU in 2 s", used)
	}
	// B goes idle again in a Run of its own; a send from A wakes it.
	if err := qb.PostRecv(&verbs.RecvWR{ID: 1, SGL: sge(b.buf, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	got := make(chan verbs.Completion, 1)
	go func() {
		cs := make([]verbs.Completion, 1)
		_ = b.d.Run(ctx2, func() (bool, error) {
			if b.rcq.Poll(cs) == 1 {
				got <- cs[0]
				return true, errFinishedTest
			}
			return false, nil
		})
	}()
	time.Sleep(300 * time.Millisecond) // long enough to be asleep
	if err := qa.PostSend(&verbs.SendWR{Op: verbs.OpSend, SGL: sge(a.buf, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.d.Progress()
		select {
		case c := <-got:
			if c.Status != verbs.Success {
				t.Fatalf("receive %+v", c)
			}
			t.Logf("woke and received %v after the send", time.Since(sent))
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeping device never woke for the packet")
		}
	}
}

var errFinishedTest = errors.New("finished")

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
