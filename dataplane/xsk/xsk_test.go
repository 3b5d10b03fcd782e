package xsk

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	bpflink "github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// exchange sends n frames of the given sizes (cycled) from every socket of
// src to dst, socket q of src to queue q, with src port 1000+q, keeping at
// most window frames in flight so that the receiver's rx ring never
// overflows, and checks that dst got every frame byte-exact on the socket
// of the queue veth maps it to (end.rxQueue).
func exchange(t *testing.T, src, dst *end, n int, sizes []int, batch int) {
	t.Helper()
	frames := make([][]byte, batch)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, 9216)
	}
	for _, s := range src.socks {
		q := s.Queue()
		port := uint16(1000 + q)
		seen := map[uint32]int{}
		sent := 0
		received := make([]int, len(dst.socks))
		for sent < n {
			k := min(batch, n-sent)
			for i := range k {
				seq := uint32(sent + i)
				frames[i] = udpFrame(bufs[i], src.h.MAC, dst.h.MAC, port, seq, sizes[int(seq)%len(sizes)])
			}
			m, err := s.Send(frames[:k])
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			sent += m
			g := drain(t, dst, src.h.MAC, port, m, 50*time.Millisecond, seen)
			for i := range g {
				received[i] += g[i]
			}
		}
		g := drain(t, dst, src.h.MAC, port, n-sum(received), time.Second, seen)
		for i := range g {
			received[i] += g[i]
		}
		if len(seen) != n {
			st, _ := dst.socks[0].Stats()
			t.Fatalf("queue %d: received %d distinct of %d frames (per rx socket %v); rx stats %+v", q, len(seen), n, received, st)
		}
		for seq, c := range seen {
			if c != 1 {
				t.Fatalf("seq %d received %d times", seq, c)
			}
		}
		for i, c := range received {
			if rq := dst.socks[i].Queue(); rq != dst.rxQueue(q) && c != 0 {
				t.Errorf("tx queue %d: %d frames arrived on rx queue %d, want all on %d", q, c, rq, dst.rxQueue(q))
			}
		}
		t.Logf("tx queue %d → rx queues %v", q, received)
	}
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

func TestSendRecvBothWays(t *testing.T) {
	for _, c := range []struct {
		mode bpflink.XDPAttachFlags
		nw   bool
	}{{bpflink.XDPGenericMode, false}, {bpflink.XDPGenericMode, true}, {bpflink.XDPDriverMode, false}, {bpflink.XDPDriverMode, true}} {
		nw := c.nw
		t.Run(fmt.Sprintf("%s/NoNeedWakeup=%v", modeName(c.mode), nw), func(t *testing.T) {
			a, b := newEnv(t, envOptions{mode: c.mode, cfg: Config{NoNeedWakeup: nw}})
			for _, s := range append(a.socks, b.socks...) {
				if s.ZeroCopy() {
					t.Errorf("zero-copy on veth: the kernel gained it; revisit the copy-mode assumptions")
				}
			}
			t.Logf("tx budget %d", a.socks[0].TxBudget())
			sizes := []int{60, 64, 128, 1000, 1514}
			exchange(t, a, b, 5000, sizes, 64)
			exchange(t, b, a, 5000, sizes, 64)
			for _, s := range append(a.socks, b.socks...) {
				st, err := s.Stats()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("queue %d: %+v", s.Queue(), st)
				if st.RxRingFull != 0 || st.RxDropped != 0 || st.RxInvalidDescs != 0 || st.TxInvalidDescs != 0 {
					t.Errorf("queue %d: kernel counted drops: %+v", s.Queue(), st)
				}
			}
		})
	}
}

func TestFrameTooLarge(t *testing.T) {
	a, _ := newEnv(t, envOptions{queues: 1})
	s := a.socks[0]
	if s.MaxFrame() != 4096-256 {
		t.Fatalf("MaxFrame %d", s.MaxFrame())
	}
	n, err := s.Send([][]byte{make([]byte, 100), make([]byte, s.MaxFrame()+1)})
	if n != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Send = %d, %v; want 1, ErrFrameTooLarge", n, err)
	}
}

// TestVethQueueMapping pins down which rx queue a veth delivers to, per XDP
// attach mode, since XDP can redirect only to a socket on the arrival queue.
func TestVethQueueMapping(t *testing.T) {
	for _, mode := range []bpflink.XDPAttachFlags{bpflink.XDPGenericMode, bpflink.XDPDriverMode} {
		t.Run(modeName(mode), func(t *testing.T) {
			a, b := newEnv(t, envOptions{queues: 4, mode: mode})
			for q, s := range a.socks {
				frames := make([][]byte, 10)
				for i := range frames {
					frames[i] = udpFrame(make([]byte, 100), a.h.MAC, b.h.MAC, 1000, uint32(i), 100)
				}
				if n, err := s.Send(frames); n != len(frames) || err != nil {
					t.Fatalf("send = %d, %v", n, err)
				}
				got := drain(t, b, a.h.MAC, 1000, len(frames), time.Second, map[uint32]int{})
				want := make([]int, len(b.socks))
				want[b.rxQueue(q)] = len(frames)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("tx queue %d → rx %v, want %v", q, got, want)
				}
				t.Logf("tx queue %d → rx queues %v", q, got)
			}
		})
	}
}

func modeName(m bpflink.XDPAttachFlags) string {
	switch m {
	case bpflink.XDPGenericMode:
		return "generic"
	case bpflink.XDPDriverMode:
		return "native"
	}
	return fmt.Sprint(int(m))
}

// TestKickBudget sends batches far above the kernel's default budget of 32
// frames per sendto, with the default budget and with the raised one: Send
// must keep kicking until the tx ring is empty. The number of kicks is not
// checked: the Go netpoller's epoll_wait calls xsk_poll, which in copy mode
// also transmits, so the ring drains from another thread too.
func TestKickBudget(t *testing.T) {
	for _, budget := range []int{-1, 0} {
		t.Run(fmt.Sprintf("TxBudget=%d", budget), func(t *testing.T) {
			a, b := newEnv(t, envOptions{queues: 1, cfg: Config{TxBudget: budget}})
			s := a.socks[0]
			const n = 500
			frames := make([][]byte, n)
			for i := range frames {
				frames[i] = udpFrame(make([]byte, 64), a.h.MAC, b.h.MAC, 1000, uint32(i), 64)
			}
			m, err := s.Send(frames)
			if m != n || err != nil {
				t.Fatalf("Send = %d, %v", m, err)
			}
			if p := s.TxPending(); p != 0 {
				t.Errorf("%d frames left on the tx ring", p)
			}
			seen := map[uint32]int{}
			drain(t, b, a.h.MAC, 1000, n, time.Second, seen)
			if len(seen) != n {
				t.Fatalf("received %d of %d", len(seen), n)
			}
			st, _ := s.Stats()
			t.Logf("budget %d: %d kicks for %d frames", s.TxBudget(), st.Kicks, n)
		})
	}
}

// TestBackpressure fills a small tx ring: Send takes what fits, and the
// completion ring gives every chunk back once the kernel sent them.
func TestBackpressure(t *testing.T) {
	const ring = 64
	a, b := newEnv(t, envOptions{queues: 1, cfg: Config{TxSize: ring, CompSize: ring, Frames: 2048 + ring}})
	s := a.socks[0]
	frames := make([][]byte, 3*ring)
	for i := range frames {
		frames[i] = udpFrame(make([]byte, 128), a.h.MAC, b.h.MAC, 1000, uint32(i), 128)
	}
	// Hold the kernel off: a full tx ring with nothing consumed. Posting
	// by hand (TxBuf/TxSubmit without Flush) fills ring and chunks.
	if r := s.TxRoom(); r != ring {
		t.Fatalf("TxRoom %d on an empty ring of %d", r, ring)
	}
	for i := range ring {
		buf := s.TxBuf()
		if buf == nil {
			t.Fatalf("TxBuf nil after %d", i)
		}
		s.TxSubmit(copy(buf, frames[i]))
	}
	if s.TxBuf() != nil || s.TxRoom() != 0 {
		t.Fatalf("TxBuf with a full tx ring (TxRoom %d)", s.TxRoom())
	}
	// Send first kicks the ring empty (the posted frames go out and
	// complete), then takes what fits in the ring again: exactly ring.
	n, err := s.Send(frames[ring:])
	if err != nil || n != ring {
		t.Fatalf("Send on a full ring = %d, %v; want %d (backpressure)", n, err, ring)
	}
	sent := ring + n
	for sent < len(frames) {
		n, err := s.Send(frames[sent:])
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]int{}
	drain(t, b, a.h.MAC, 1000, len(frames), time.Second, seen)
	if len(seen) != len(frames) {
		t.Fatalf("received %d of %d", len(seen), len(frames))
	}
	// Completion reclaim: every tx chunk is free again.
	s.reclaim()
	if len(s.q.free) != ring {
		t.Fatalf("%d of %d tx chunks free after everything completed", len(s.q.free), ring)
	}
}

// TestLargeSingleBuffer: frames up to a chunk less the headroom (3840)
// arrive whole; MTU 9000 so that veth forwards them at all.
func TestLargeSingleBuffer(t *testing.T) {
	a, b := newEnv(t, envOptions{mtu: 9000})
	exchange(t, a, b, 200, []int{3840, 3000, 1514, 64}, 32)
	exchange(t, b, a, 200, []int{3840, 2049, 4000 - 256}, 32)
}

// TestMultiBuffer: jumbo frames over a frags-capable program and
// XDP_USE_SG sockets, split on send and reassembled on receive.
func TestMultiBuffer(t *testing.T) {
	a, b := newEnv(t, envOptions{mtu: 9000, frags: true, cfg: Config{MultiBuffer: true}})
	if a.socks[0].MaxFrame() != MaxFrameMultiBuffer {
		t.Fatalf("MaxFrame %d", a.socks[0].MaxFrame())
	}
	sizes := []int{9000, 64, 4096, 4097, 8192, 3840, 3841, 9014}
	exchange(t, a, b, 500, sizes, 16)
	exchange(t, b, a, 500, sizes, 16)

	// RecvZC hands multi-buffer frames out reassembled, single-buffer
	// ones as UMEM views.
	s, r := a.socks[0], b.socks[b.rxQueue(0)]
	frames := [][]byte{
		udpFrame(make([]byte, 9000), a.h.MAC, b.h.MAC, 7, 1, 9000),
		udpFrame(make([]byte, 100), a.h.MAC, b.h.MAC, 7, 2, 100),
		udpFrame(make([]byte, 5000), a.h.MAC, b.h.MAC, 7, 3, 5000),
	}
	if n, err := s.Send(frames); n != 3 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	views := make([][]byte, 8)
	got := 0
	for deadline := time.Now().Add(time.Second); got < 3 && time.Now().Before(deadline); {
		n := r.RecvZC(views)
		for _, v := range views[:n] {
			seq, err := checkFrame(v, a.h.MAC, b.h.MAC, 7)
			if err != nil {
				t.Fatal(err)
			}
			if int(seq) != got+1 {
				t.Fatalf("seq %d, want %d", seq, got+1)
			}
			got++
		}
		r.ReleaseRx()
	}
	if got != 3 {
		t.Fatalf("RecvZC got %d of 3", got)
	}
}

// TestSingleBufferDropsJumbo: without XDP_USE_SG a frame bigger than a
// chunk never reaches the socket; the kernel counts it and keeps going.
func TestSingleBufferDropsJumbo(t *testing.T) {
	a, b := newEnv(t, envOptions{queues: 1, mtu: 9000, frags: true, cfg: Config{MultiBuffer: false}})
	// Only a multi-buffer socket can send the jumbo frame: replace A's.
	a.socks[0].Close()
	a.socks = nil
	big := a.open(t, Config{Ifindex: a.h.Index, Queue: 0, MultiBuffer: true})
	if n, err := big.Send([][]byte{udpFrame(make([]byte, 9000), a.h.MAC, b.h.MAC, 1, 1, 9000), udpFrame(make([]byte, 64), a.h.MAC, b.h.MAC, 1, 2, 64)}); n != 2 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	seen := map[uint32]int{}
	drain(t, b, a.h.MAC, 1, 1, time.Second, seen)
	if len(seen) != 1 || seen[2] != 1 {
		t.Fatalf("received %v, want only seq 2", seen)
	}
	st, _ := b.socks[0].Stats()
	if st.RxDropped == 0 {
		t.Errorf("jumbo frame not counted as dropped: %+v", st)
	}
	t.Logf("receiver stats: %+v", st)
}

// TestSharedUmem: two sockets on one UMEM, on different queues, each with
// its own fill and completion rings.
func TestSharedUmem(t *testing.T) {
	a, b := newEnv(t, envOptions{noSock: true, cfg: Config{}})
	for _, e := range []*end{a, b} {
		first := e.open(t, Config{Ifindex: e.h.Index, Queue: 0, Frames: 2 * 4096})
		second := e.open(t, Config{Ifindex: e.h.Index, Queue: 1, Shared: first})
		if first.umem != second.umem || first.q == second.q {
			t.Fatal("sockets do not share the umem, or share the fill ring across queues")
		}
	}
	exchange(t, a, b, 2000, []int{64, 1514}, 64)
	exchange(t, b, a, 2000, []int{64, 1514}, 64)
	// Closing the UMEM's first socket leaves the second working: native
	// XDP would deliver tx queue 1 to rx queue 1, generic to rx queue 0,
	// so receive on both of B's sockets and send from A's second only.
	a.socks[0].Close()
	a.socks = a.socks[1:]
	exchange(t, a, b, 500, []int{64, 1514}, 64)
}

// TestReopen closes a socket and binds its queue again at once: the kernel
// releases the queue asynchronously, and Open retries through EBUSY.
func TestReopen(t *testing.T) {
	a, b := newEnv(t, envOptions{queues: 1, noSock: true})
	for i := range 5 {
		start := time.Now()
		s := b.open(t, Config{Ifindex: b.h.Index, Queue: 0})
		t.Logf("open %d took %v", i, time.Since(start))
		s.Close()
	}
	// A socket with no retry sees the EBUSY.
	s := b.open(t, Config{Ifindex: b.h.Index, Queue: 0})
	s.Close()
	err := b.h.Do(func() error {
		s, err := Open(Config{Ifindex: b.h.Index, Queue: 0, BindRetry: time.Nanosecond})
		if err == nil {
			s.Close()
		}
		return err
	})
	t.Logf("immediate rebind without retry: %v", err)
	b.socks = nil
	b.open(t, Config{Ifindex: b.h.Index, Queue: 0})
	a.open(t, Config{Ifindex: a.h.Index, Queue: 0})
	exchange(t, a, b, 100, []int{64}, 32)
}

// TestPingWhileBound: the program passes what is not for the sockets, so
// the kernel stack keeps working.
func TestPingWhileBound(t *testing.T) {
	a, b := newEnv(t, envOptions{})
	_ = b
	if out, err := a.h.Exec("ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.0.2"); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	if out, err := b.h.Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", "198.18.0.1"); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
}

// TestZeroCopyAPI builds frames in place with TxBuf/TxSubmit/Flush and
// reads them with RecvZC/ReleaseRx; Wait parks until frames arrive.
func TestZeroCopyAPI(t *testing.T) {
	a, b := newEnv(t, envOptions{queues: 1})
	s, r := a.socks[0], b.socks[0]
	if err := r.Wait(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait on an idle socket = %v, want ErrTimeout", err)
	}
	const n = 100
	sender := make(chan struct{})
	defer func() { <-sender }()
	go func() {
		defer close(sender)
		time.Sleep(50 * time.Millisecond)
		for i := range n {
			buf := s.TxBuf()
			for buf == nil {
				_ = s.Flush()
				buf = s.TxBuf()
			}
			s.TxSubmit(len(udpFrame(buf, a.h.MAC, b.h.MAC, 9, uint32(i), 60+i)))
		}
		_ = s.Flush()
	}()
	start := time.Now()
	if err := r.Wait(5 * time.Second); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("Wait returned after %v, before anything was sent", d)
	}
	recvFrom(t, r, a.h.MAC, b.h.MAC, 0, n)
}

// TestWaitClose: Close unblocks a goroutine parked in Wait.
func TestWaitClose(t *testing.T) {
	_, b := newEnv(t, envOptions{queues: 1})
	r := b.socks[0]
	done := make(chan error, 1)
	go func() { done <- r.Wait(10 * time.Second) }()
	time.Sleep(20 * time.Millisecond)
	r.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Wait returned nil on a closed socket")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Wait still blocked after Close")
	}
}

// TestNoAllocs: the link path allocates nothing once warm.
func TestNoAllocs(t *testing.T) {
	a, b := newEnv(t, envOptions{queues: 1})
	s, r := a.socks[0], b.socks[0]
	frames := make([][]byte, link.IdealBatch)
	for i := range frames {
		frames[i] = udpFrame(make([]byte, 128), a.h.MAC, b.h.MAC, 1, uint32(i), 128)
	}
	bufs := make([][]byte, link.IdealBatch)
	for i := range bufs {
		bufs[i] = make([]byte, r.MaxFrame())
	}
	sizes := make([]int, len(bufs))
	views := make([][]byte, link.IdealBatch)
	var lost int
	step := func() {
		n, err := s.Send(frames)
		if err != nil {
			panic(err)
		}
		m, err := r.Recv(bufs, sizes)
		if err != nil {
			panic(err)
		}
		lost += n - m
	}
	step()
	if allocs := testing.AllocsPerRun(200, step); allocs != 0 {
		t.Errorf("Send+Recv: %v allocs per run", allocs)
	}
	zc := func() {
		for range 8 {
			buf := s.TxBuf()
			if buf == nil {
				break
			}
			s.TxSubmit(copy(buf, frames[0]))
		}
		if err := s.Flush(); err != nil {
			panic(err)
		}
		r.RecvZC(views)
		r.ReleaseRx()
	}
	if allocs := testing.AllocsPerRun(200, zc); allocs != 0 {
		t.Errorf("TxBuf/TxSubmit/Flush/RecvZC/ReleaseRx: %v allocs per run", allocs)
	}
	t.Logf("frames not received in the same step: %d", lost)
}

// TestBindModes: veth has no zero-copy AF_XDP, so BindZeroCopy fails and
// BindAuto falls back to copy mode on the same socket.
func TestBindModes(t *testing.T) {
	_, b := newEnv(t, envOptions{queues: 1, noSock: true})
	err := b.h.Do(func() error {
		s, err := Open(Config{Ifindex: b.h.Index, Queue: 0, Mode: BindZeroCopy})
		if err == nil {
			s.Close()
			return errors.New("zero-copy bind on veth succeeded")
		}
		t.Logf("BindZeroCopy: %v", err)
		for _, m := range []BindMode{BindAuto, BindCopy} {
			s, err := Open(Config{Ifindex: b.h.Index, Queue: 0, Mode: m})
			if err != nil {
				return fmt.Errorf("%v: %w", m, err)
			}
			if s.ZeroCopy() {
				t.Errorf("%v: zero-copy", m)
			}
			s.Close()
		}
		for _, bad := range []Config{{}, {Ifindex: b.h.Index, FrameSize: 8192}, {Ifindex: b.h.Index, RxSize: 1000}} {
			if s, err := Open(bad); err == nil {
				s.Close()
				return fmt.Errorf("Open(%+v) succeeded", bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// vethDrops is what h's veth counts as dropped, both ways.
func vethDrops(t *testing.T, h *netnstest.Host) uint64 {
	t.Helper()
	var n uint64
	if err := h.Do(func() error {
		l, err := netlink.LinkByIndex(h.Index)
		if err != nil {
			return err
		}
		if st := l.Attrs().Statistics; st != nil {
			n = st.RxDropped + st.TxDropped
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSustained runs frames continuously with a concurrent receiver, the
// way the engine will. In native mode the kernel takes fill entries in
// batches and publishes its consumer index late, so the fill ring can look
// full while the receiver holds chunks (the stash in recycle).
func TestSustained(t *testing.T) {
	for _, mode := range []bpflink.XDPAttachFlags{bpflink.XDPGenericMode, bpflink.XDPDriverMode} {
		t.Run(modeName(mode), func(t *testing.T) {
			a, b := newEnv(t, envOptions{queues: 1, mode: mode})
			frames := make([][]byte, link.IdealBatch)
			for i := range frames {
				frames[i] = udpFrame(make([]byte, 64), a.h.MAC, b.h.MAC, 1, uint32(i), 64)
			}
			// Fewer than a couple of million frames rarely hit the late
			// fill consumer index.
			n := 2000000
			if testing.Short() {
				n = 200000
			}
			sent, got := pump(t, a.socks[0], b.socks[0], frames, n)
			st, _ := b.socks[0].Stats()
			tx, _ := a.socks[0].Stats()
			t.Logf("sent %d, received %d; sender %+v", sent, got, tx)
			// At full speed a native-mode veth drops when the peer's
			// 256-entry ring is full (it has no qdisc to push back on);
			// AF_XDP reports each such drop as an EBUSY from sendto. The
			// kernel may drop in its receive path too (an skb it cannot
			// turn into an XDP buffer on a loaded host), counted by the
			// veths only: a loss is explained when it lies between the
			// EBUSYs and what the devices count.
			lost := sent - got
			kernel := vethDrops(t, a.h) + vethDrops(t, b.h)
			if sent != int64(n) || lost < int64(tx.TxDropped) || lost > int64(max(kernel, tx.TxDropped)) {
				t.Fatalf("sent %d, received %d of %d, %d dropped by the device (EBUSY), %d counted by the veths; receiver %+v", sent, got, n, tx.TxDropped, kernel, st)
			}
			if lost != int64(tx.TxDropped) {
				t.Logf("%d frames lost, %d reported as EBUSY, %d counted by the veths", lost, tx.TxDropped, kernel)
			}
		})
	}
}

// TestKeep: a consumer keeps chunks of received frames past their
// release, as the daemon does for an application whose ring is full.
// Spare chunks take their place: while they are kept, the kernel receives
// several rings' worth into the others and never reuses them, and once
// given back they are received into again. Borrowed chunks, holding
// copies, are as safe.
func TestKeep(t *testing.T) {
	const ring, spare = 64, 16
	a, b := newEnv(t, envOptions{queues: 1, cfg: Config{RxSize: ring, FillSize: ring, Spare: spare}})
	s, r := a.socks[0], b.socks[0]
	if r.Spare() != spare {
		t.Fatalf("Spare %d, want %d", r.Spare(), spare)
	}
	// The spare chunks wait in the socket as a matter of course: an idle
	// socket sleeps as long as asked, not the short wait for chunks the
	// fill ring had no room for.
	idle := func(what string) {
		t.Helper()
		if ready, d := r.PrepareWait(time.Second); ready || d != time.Second {
			t.Fatalf("%s: PrepareWait: ready %v, %v", what, ready, d)
		}
	}
	idle("at first")
	send := func(first, n int) {
		t.Helper()
		for i := first; i < first+n; i++ {
			buf := s.TxBuf()
			for buf == nil {
				_ = s.Flush()
				buf = s.TxBuf()
			}
			s.TxSubmit(len(udpFrame(buf, a.h.MAC, b.h.MAC, 9, uint32(i), 60+i%200)))
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// The first spare frames are kept, whatever batches they come in.
	send(0, spare)
	var kept []Chunk
	views := make([][]byte, 8)
	for got := 0; got < spare; {
		if err := r.Wait(time.Second); err != nil {
			t.Fatal(err)
		}
		n := r.RecvZC(views)
		for i := range n {
			kept = r.Keep(i, kept)
			kept = r.Keep(i, kept) // once is enough
		}
		got += n
	}
	r.ReleaseRx()
	if len(kept) != spare {
		t.Fatalf("%d chunks kept, want %d", len(kept), spare)
	}
	if late := r.Keep(0, nil); len(late) != 0 {
		t.Fatal("Keep took a chunk after ReleaseRx")
	}
	check := func(what string) {
		t.Helper()
		for i, c := range kept {
			if seq, err := checkFrame(r.View(c), a.h.MAC, b.h.MAC, 9); err != nil || seq != uint32(i) {
				t.Fatalf("%s: kept frame %d reads seq %d (%v)", what, i, seq, err)
			}
		}
	}
	check("at once")
	// Four rings' worth more, in rounds the rings hold.
	for round := range 8 {
		first := spare + round*ring/2
		send(first, ring/2)
		recvFrom(t, r, a.h.MAC, b.h.MAC, first, ring/2)
	}
	check("after four rings")
	idle("with chunks kept")
	r.Return(kept)
	first := spare + 8*ring/2
	for round := range 4 {
		send(first+round*ring/2, ring/2)
		recvFrom(t, r, a.h.MAC, b.h.MAC, first+round*ring/2, ring/2)
	}
	if st, _ := r.Stats(); st.RxFrames != uint64(first+2*ring) {
		t.Fatalf("%d frames received, want %d; %+v", st.RxFrames, first+2*ring, st)
	}
	// Borrow: frames copied into spare chunks (one of two chunks), which
	// the kernel does not receive into until they are given back.
	big := make([]byte, 5000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var borrowed []Chunk
	for range spare / 2 {
		var ok bool
		if borrowed, ok = r.Borrow(big, borrowed); !ok {
			t.Fatalf("no spare chunk to borrow after %d", len(borrowed))
		}
	}
	first += 2 * ring
	for round := range 4 {
		send(first+round*ring/2, ring/2)
		recvFrom(t, r, a.h.MAC, b.h.MAC, first+round*ring/2, ring/2)
	}
	for i := 0; i < len(borrowed); i += 2 {
		if got := append(append([]byte(nil), r.View(borrowed[i])...), r.View(borrowed[i+1])...); !bytes.Equal(got, big) {
			t.Fatalf("borrowed frame %d changed", i/2)
		}
	}
	idle("with chunks borrowed")
	r.Return(borrowed)
	idle("with all given back")
}

// recvFrom receives frames first to first+n-1 of flow 9 from MAC src to
// dst on r, checking each and their order.
func recvFrom(t *testing.T, r *Socket, src, dst net.HardwareAddr, first, n int) {
	t.Helper()
	views := make([][]byte, 16)
	got := 0
	for deadline := time.Now().Add(2 * time.Second); got < n && time.Now().Before(deadline); {
		if err := r.Wait(100 * time.Millisecond); err != nil && !errors.Is(err, ErrTimeout) {
			t.Fatal(err)
		}
		k := r.RecvZC(views)
		for _, v := range views[:k] {
			seq, err := checkFrame(v, src, dst, 9)
			if err != nil {
				t.Fatal(err)
			}
			if int(seq) != first+got {
				t.Fatalf("seq %d, want %d", seq, first+got)
			}
			got++
		}
		r.ReleaseRx()
	}
	if got != n {
		t.Fatalf("got %d of %d from %d", got, n, first)
	}
}

// TestNotInNetpoller: the socket's descriptor is in no epoll of the
// process (Go's netpoller would be woken for every frame received and
// every sendto, see Socket), except for the duplicate a Wait registers,
// which is gone when the Wait returns.
func TestNotInNetpoller(t *testing.T) {
	_, b := newEnv(t, envOptions{queues: 1})
	r := b.socks[0]
	polled := func() []int {
		t.Helper()
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		var fds []int
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[eventpoll]" {
				continue
			}
			info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
			if err != nil {
				continue // closed since
			}
			for _, line := range strings.Split(string(info), "\n") {
				var fd int
				if _, err := fmt.Sscanf(line, "tfd: %d", &fd); err == nil {
					fds = append(fds, fd)
				}
			}
		}
		return fds
	}
	// The socket's file, to tell its duplicates from other descriptors.
	same := func(fd int) bool {
		var a, b unix.Stat_t
		return unix.Fstat(fd, &a) == nil && unix.Fstat(r.FD(), &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev
	}
	watched := func() int {
		n := 0
		for _, fd := range polled() {
			if same(fd) {
				n++
			}
		}
		return n
	}
	if n := watched(); n != 0 {
		t.Fatalf("the socket is in an epoll %d times before any Wait", n)
	}
	done := make(chan error, 1)
	go func() { done <- r.Wait(500 * time.Millisecond) }()
	deadline := time.Now().Add(400 * time.Millisecond)
	for watched() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	during := watched()
	if err := <-done; !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait = %v, want ErrTimeout", err)
	}
	if during != 1 {
		t.Errorf("during a Wait the socket is in an epoll %d times, want 1 (its duplicate)", during)
	}
	if n := watched(); n != 0 {
		t.Errorf("the socket is in an epoll %d times after the Wait", n)
	}
}
