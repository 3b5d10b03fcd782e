package shmlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/internal/ppoll"
)

// newRegion creates a region closed at the end of the test.
func newTestRegion(t testing.TB, cfg Config) *Region {
	t.Helper()
	r, err := Create("shmlink-test", cfg)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// word returns a control word of ring in the mapping, as the peer would
// write it.
func (r *Region) word(ring int, off uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[r.l.ctl[ring]+off]))
}

// lenAt returns the length word of slot i of ring.
func (r *Region) lenAt(ring int, i uint32) *atomic.Uint32 {
	return word(r.mem, r.l.data[ring]+uint64(i)*r.l.stride+slotLen)
}

// seqAt returns the sequence word of slot i of ring.
func (r *Region) seqAt(ring int, i uint32) *atomic.Uint32 {
	return word(r.mem, r.l.data[ring]+uint64(i)*r.l.stride+slotSeq)
}

// frameLen is the length of test frame i: 8 bytes up to max.
func frameLen(i, max int) int { return 8 + (i*7919)%(max-7) }

// fill writes test frame i: a sequence number, then a pattern from it.
func fill(b []byte, i int) {
	binary.BigEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i*31 + j)
	}
}

func frame(i, max int) []byte {
	b := make([]byte, frameLen(i, max))
	fill(b, i)
	return b
}

// check reports whether b is test frame i.
func check(b []byte, i, max int) bool {
	if len(b) != frameLen(i, max) || binary.BigEndian.Uint32(b) != uint32(i) {
		return false
	}
	for j := 4; j < len(b); j++ {
		if b[j] != byte(i*31+j) {
			return false
		}
	}
	return true
}

func bufs(n, size int) ([][]byte, []int) {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, size)
	}
	return b, make([]int, n)
}

func TestCreateConfig(t *testing.T) {
	r := newTestRegion(t, Config{})
	if got := r.Config(); got != (Config{Slots: DefaultSlots, SlotSize: DefaultSlotSize}) {
		t.Errorf("Config() = %+v", got)
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.FDs()[0], &st); err != nil {
		t.Fatal(err)
	}
	if uint64(st.Size) != r.l.size || r.l.size%pageAlign != 0 {
		t.Errorf("file size %d, layout %+v", st.Size, r.l)
	}
	seals, err := unix.FcntlInt(uintptr(r.FDs()[0]), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL; seals&want != want {
		t.Errorf("seals %#x, want %#x", seals, want)
	}
	if err := unix.Ftruncate(r.FDs()[0], 0); err == nil {
		t.Error("a sealed memfd could be shrunk")
	}
	if e := r.AppEnd(); e.MaxFrame() != DefaultSlotSize || e.TxBufSize() != DefaultSlotSize || e != r.AppEnd() {
		t.Error("AppEnd sizes or identity")
	}
	// The application waits on the read end of its doorbell, which it is
	// given; the daemon on its own doorbell's read end, which stays with it.
	if given := r.FDs(); r.AppEnd().FD() != given[1] || slices.Contains(given[:], r.DaemonEnd().FD()) || r.DaemonEnd().FD() < 0 {
		t.Error("FD() is not the End's doorbell")
	}
	for _, fd := range []int{r.FDs()[1], r.FDs()[2], r.DaemonEnd().FD()} {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); !strings.HasPrefix(target, "pipe:") {
			t.Errorf("doorbell %d is %q, not a pipe", fd, target)
		}
	}
	// Layout: everything aligned, nothing overlapping.
	l := r.l
	for ring := range 2 {
		if l.ctl[ring]%cacheLine != 0 || l.data[ring]%cacheLine != 0 || l.stride%cacheLine != 0 {
			t.Errorf("ring %d misaligned: %+v", ring, l)
		}
	}
	if l.data[0] < l.ctl[1]+ctlSize || l.stride < slotFrame+uint64(l.slotSize) ||
		l.data[1] != l.data[0]+uint64(l.slots)*l.stride || l.end > l.size {
		t.Errorf("layout overlaps: %+v", l)
	}
	for _, bad := range []Config{{Slots: 3}, {Slots: -1}, {Slots: MaxSlots * 2}, {SlotSize: 100}, {SlotSize: 300}, {SlotSize: MaxSlotSize + 64}, {Slots: MaxSlots, SlotSize: MaxSlotSize}} {
		if r, err := Create("bad", bad); err == nil {
			r.Close()
			t.Errorf("Create(%+v) succeeded", bad)
		}
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
}

// ends returns (sender, receiver) for each direction.
func directions(r *Region) map[string][2]*End {
	return map[string][2]*End{
		"to-app":   {r.DaemonEnd(), r.AppEnd()},
		"from-app": {r.AppEnd(), r.DaemonEnd()},
	}
}

func TestRoundTripSendRecv(t *testing.T) {
	const slots, size, total = 16, 256, 5000
	r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
	for name, d := range directions(r) {
		t.Run(name, func(t *testing.T) {
			tx, rx := d[0], d[1]
			in, sizes := bufs(slots, size)
			sent, got := 0, 0
			batch := make([][]byte, 0, 2*slots)
			for got < total {
				// Batches of varying size, some larger than the ring.
				batch = batch[:0]
				for i := sent; i < total && len(batch) < 1+(sent*7)%(2*slots); i++ {
					batch = append(batch, frame(i, size))
				}
				n, err := tx.Send(batch)
				if err != nil || n > len(batch) {
					t.Fatalf("Send: %d, %v", n, err)
				}
				sent += n
				want := min(len(in), 1+got%len(in))
				m, err := rx.Recv(in[:want], sizes[:want])
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				for k := range m {
					if !check(in[k][:sizes[k]], got, size) {
						t.Fatalf("frame %d: got %d bytes % x", got, sizes[k], in[k][:min(sizes[k], 8)])
					}
					got++
				}
			}
			if n, err := rx.Recv(in, sizes); n != 0 || err != nil {
				t.Errorf("Recv after all: %d, %v", n, err)
			}
			st := tx.Stats()
			if st.FramesSent != total {
				t.Errorf("FramesSent %d", st.FramesSent)
			}
			if rs := rx.Stats(); rs.FramesReceived != total || rs.BytesReceived != st.BytesSent {
				t.Errorf("received %d frames %d bytes, sent %d bytes", rs.FramesReceived, rs.BytesReceived, st.BytesSent)
			}
		})
	}
}

func TestRoundTripZeroCopy(t *testing.T) {
	const slots, size, total = 8, 512, 5000
	r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
	for name, d := range directions(r) {
		t.Run(name, func(t *testing.T) {
			tx, rx := d[0], d[1]
			views := make([][]byte, slots)
			sent, got := 0, 0
			for got < total {
				for k := 0; sent < total && k < 1+sent%5; k++ {
					b := tx.TxBuf()
					if b == nil {
						if tx.TxRoom() != 0 {
							t.Fatal("TxBuf nil with room")
						}
						break
					}
					if len(b) != size || &b[0] != &tx.TxBuf()[0] {
						t.Fatal("TxBuf length or identity")
					}
					n := frameLen(sent, size)
					fill(b[:n], sent)
					tx.TxSubmit(n)
					sent++
				}
				if err := tx.Flush(); err != nil {
					t.Fatal(err)
				}
				m := rx.RecvZC(views[:1+got%slots])
				for k := range m {
					if !check(views[k], got, size) {
						t.Fatalf("frame %d: % x", got, views[k][:8])
					}
					got++
				}
				if got%3 == 0 {
					rx.ReleaseRx() // otherwise the next RecvZC releases them
				}
			}
			rx.ReleaseRx()
			if rx.RecvZC(views) != 0 {
				t.Error("frames after all")
			}
			if st := tx.Stats(); st.FramesSent != total {
				t.Errorf("FramesSent %d", st.FramesSent)
			}
		})
	}
}

// TestMixedTx interleaves TxBuf/TxSubmit with Send: Send publishes what was
// submitted before it, in order; a Send between TxBuf and TxSubmit takes
// the lent slot and the TxSubmit is ignored.
func TestMixedTx(t *testing.T) {
	const size = 256
	r := newTestRegion(t, Config{Slots: 8, SlotSize: size})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	b := tx.TxBuf()
	fill(b[:frameLen(0, size)], 0)
	tx.TxSubmit(frameLen(0, size))
	if n, err := tx.Send([][]byte{frame(1, size), frame(2, size)}); n != 2 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	tx.TxBuf()
	tx.TxSubmit(0) // given back
	b = tx.TxBuf()
	copy(b, "garbage")
	if n, err := tx.Send([][]byte{frame(3, size)}); n != 1 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	tx.TxSubmit(100) // ignored: Send took the slot
	b = tx.TxBuf()
	fill(b[:frameLen(4, size)], 4)
	tx.TxSubmit(frameLen(4, size))
	tx.TxBuf()
	tx.TxSubmit(size + 1) // over the slot: given back
	if err := tx.Flush(); err != nil {
		t.Fatal(err)
	}
	in, sizes := bufs(8, size)
	n, err := rx.Recv(in, sizes)
	if n != 5 || err != nil {
		t.Fatalf("Recv: %d, %v", n, err)
	}
	for k := range n {
		if !check(in[k][:sizes[k]], k, size) {
			t.Errorf("frame %d: % x", k, in[k][:8])
		}
	}
}

func TestBackpressure(t *testing.T) {
	const slots, size = 8, 256
	r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
	tx, rx := r.AppEnd(), r.DaemonEnd()
	var batch [][]byte
	for i := range 12 {
		batch = append(batch, frame(i, size))
	}
	n, err := tx.Send(batch)
	if n != slots || err != nil {
		t.Fatalf("Send to a ring of %d: %d, %v", slots, n, err)
	}
	if n, err := tx.Send(batch[n:]); n != 0 || err != nil {
		t.Fatalf("Send to a full ring: %d, %v", n, err)
	}
	if tx.TxBuf() != nil || tx.TxRoom() != 0 {
		t.Fatal("TxBuf or TxRoom on a full ring")
	}
	if st := tx.Stats(); st.TxFull != 3 {
		t.Errorf("TxFull %d, want 3", st.TxFull)
	}
	in, sizes := bufs(3, size)
	if m, err := rx.Recv(in, sizes); m != 3 || err != nil {
		t.Fatalf("Recv: %d, %v", m, err)
	}
	if room := tx.TxRoom(); room != 3 {
		t.Errorf("TxRoom %d, want 3", room)
	}
	if n, err := tx.Send(batch[slots:]); n != 3 || err != nil {
		t.Fatalf("Send after Recv: %d, %v", n, err)
	}
	in, sizes = bufs(16, size)
	m, err := rx.Recv(in, sizes)
	if m != slots || err != nil {
		t.Fatalf("Recv: %d, %v", m, err)
	}
	for k := range m {
		if !check(in[k][:sizes[k]], k+3, size) {
			t.Errorf("frame %d", k+3)
		}
	}
}

func TestFrameTooLarge(t *testing.T) {
	const size = 256
	r := newTestRegion(t, Config{Slots: 8, SlotSize: size})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	n, err := tx.Send([][]byte{make([]byte, 10), make([]byte, size), make([]byte, size+1), make([]byte, 1)})
	if n != 2 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Send: %d, %v", n, err)
	}
	in := [][]byte{make([]byte, 64), make([]byte, 64)}
	sizes := make([]int, 2)
	m, err := rx.Recv(in, sizes)
	if m != 1 || sizes[0] != 10 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Recv into small buffers: %d %v, %v", m, sizes, err)
	}
	in[0] = make([]byte, size)
	if m, err := rx.Recv(in[:1], sizes); m != 1 || sizes[0] != size || err != nil {
		t.Fatalf("Recv: %d %v, %v", m, sizes, err)
	}
}

// TestConcurrent runs both directions at once, each with a producer and a
// consumer goroutine, one direction copying and the other zero-copy.
func TestConcurrent(t *testing.T) {
	const slots, size = 64, 512
	total := 100_000
	if testing.Short() {
		total = 20_000
	}
	r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	deadline := time.Now().Add(60 * time.Second)
	spin := func(k *int) bool {
		if *k++; *k%64 == 0 {
			runtime.Gosched()
		}
		return time.Now().Before(deadline) || *k%1024 != 0
	}
	// to-app: Send and Recv.
	wg.Go(func() {
		tx := r.DaemonEnd()
		batch := make([][]byte, 0, 32)
		spins := 0
		for sent := 0; sent < total; {
			batch = batch[:0]
			for i := sent; i < total && len(batch) < 1+sent%32; i++ {
				batch = append(batch, frame(i, size))
			}
			n, err := tx.Send(batch)
			if err != nil {
				errs <- err
				return
			}
			sent += n
			if n == 0 && !spin(&spins) {
				errs <- errors.New("to-app sender stuck")
				return
			}
		}
	})
	wg.Go(func() {
		rx := r.AppEnd()
		in, sizes := bufs(32, size)
		spins := 0
		for got := 0; got < total; {
			n, err := rx.Recv(in, sizes)
			if err != nil {
				errs <- err
				return
			}
			for k := range n {
				if !check(in[k][:sizes[k]], got, size) {
					errs <- errors.New("to-app: frame out of order or corrupted")
					return
				}
				got++
			}
			if n == 0 && !spin(&spins) {
				errs <- errors.New("to-app receiver stuck")
				return
			}
		}
	})
	// from-app: TxBuf/TxSubmit/Flush and RecvZC/ReleaseRx.
	wg.Go(func() {
		tx := r.AppEnd()
		spins := 0
		for sent := 0; sent < total; {
			k := 0
			for ; sent < total && k < 1+sent%16; k++ {
				b := tx.TxBuf()
				if b == nil {
					break
				}
				n := frameLen(sent, size)
				fill(b[:n], sent)
				tx.TxSubmit(n)
				sent++
			}
			if err := tx.Flush(); err != nil {
				errs <- err
				return
			}
			if k == 0 && !spin(&spins) {
				errs <- errors.New("from-app sender stuck")
				return
			}
		}
	})
	wg.Go(func() {
		rx := r.DaemonEnd()
		views := make([][]byte, 32)
		spins := 0
		for got := 0; got < total; {
			n := rx.RecvZC(views)
			for k := range n {
				if !check(views[k], got, size) {
					errs <- errors.New("from-app: frame out of order or corrupted")
					return
				}
				got++
			}
			rx.ReleaseRx()
			if n == 0 && !spin(&spins) {
				errs <- errors.New("from-app receiver stuck")
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, e := range []*End{r.AppEnd(), r.DaemonEnd()} {
		if st := e.Stats(); st.FramesSent != uint64(total) || st.FramesReceived != uint64(total) || st.BadDescriptors != 0 {
			t.Errorf("%s: %+v", e.name, st)
		}
	}
}

// TestNoLostWakeup ping-pongs single frames between two goroutines that
// sleep whenever they have nothing to do, one in Wait, the other in ppoll
// after PrepareWait as a device's worker does: a lost wakeup would leave
// both asleep until the 5 s timeout.
func TestNoLostWakeup(t *testing.T) {
	rounds := 5000
	if testing.Short() {
		rounds = 1000
	}
	r := newTestRegion(t, Config{Slots: 8, SlotSize: 256})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	player := func(e *End, serve bool) {
		in, sizes := bufs(1, 256)
		out := [][]byte{make([]byte, 64)}
		fds := []unix.PollFd{{Fd: int32(e.FD()), Events: unix.POLLIN}}
		if serve {
			if _, err := e.Send(out); err != nil {
				errs <- err
				return
			}
		}
		for i := 0; i < rounds; {
			n, err := e.Recv(in, sizes)
			if err != nil {
				errs <- err
				return
			}
			if n == 0 {
				start := time.Now()
				if serve {
					if err := e.Wait(5 * time.Second); err != nil {
						errs <- err
						return
					}
				} else if ready, d := e.PrepareWait(5 * time.Second); !ready {
					// As a device's sleeper does: poll FD, read nothing.
					ts := unix.NsecToTimespec(int64(d))
					if _, err := unix.Ppoll(fds, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
						errs <- err
						return
					}
				}
				if time.Since(start) > 4*time.Second {
					errs <- errors.New(e.name + ": wakeup lost")
					return
				}
				continue
			}
			i++
			if serve && i == rounds {
				break
			}
			if m, err := e.Send(out); m != 1 || err != nil {
				errs <- errors.New(e.name + ": Send failed")
				return
			}
		}
	}
	start := time.Now()
	wg.Go(func() { player(r.AppEnd(), true) })
	wg.Go(func() { player(r.DaemonEnd(), false) })
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	w := r.AppEnd().Stats().Wakeups + r.DaemonEnd().Stats().Wakeups
	t.Logf("%d round trips in %v, %d wakeups", rounds, time.Since(start), w)
	if w == 0 {
		t.Error("no wakeups: the players never slept")
	}
}

// pollFD reports whether fd is readable within timeout; a signal (the Go
// runtime's) interrupting the wait does not end it.
func pollFD(t *testing.T, fd int, timeout time.Duration) bool {
	t.Helper()
	n, err := ppoll.Wait([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestPrepareWaitDrains polls FD after PrepareWait as a device's sleeper
// does, without reading the doorbell itself: a doorbell ends one sleep
// only.
func TestPrepareWaitDrains(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 8, SlotSize: 256})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	poll := func(timeout time.Duration) bool { return pollFD(t, rx.FD(), timeout) }
	in, sizes := bufs(8, 256)
	for round := range 3 {
		if ready, d := rx.PrepareWait(time.Second); ready || d != time.Second {
			t.Fatalf("round %d: PrepareWait on an empty ring: %v %v", round, ready, d)
		}
		if r.word(ringToApp, ctlSleep).Load() != 1 {
			t.Fatal("sleeping flag not set")
		}
		if _, err := tx.Send([][]byte{{1}, {2}}); err != nil {
			t.Fatal(err)
		}
		if !poll(time.Second) {
			t.Fatalf("round %d: not woken", round)
		}
		if ready, _ := rx.PrepareWait(time.Second); !ready {
			t.Fatal("PrepareWait with frames waiting")
		}
		if n, _ := rx.Recv(in, sizes); n != 2 {
			t.Fatalf("Recv: %d", n)
		}
	}
	if w := tx.Stats().Wakeups; w != 3 {
		t.Errorf("%d wakeups, want 3", w)
	}
	// The next sleep is not ended by the doorbell of the last one.
	if ready, _ := rx.PrepareWait(time.Second); ready {
		t.Fatal("PrepareWait on an empty ring")
	}
	if poll(20 * time.Millisecond) {
		t.Error("woken with nothing sent")
	}
	// One doorbell per sleep, not per frame.
	for range 5 {
		tx.Send([][]byte{{3}})
	}
	if w := tx.Stats().Wakeups; w != 4 {
		t.Errorf("%d wakeups, want 4", w)
	}
	// Wait with frames waiting returns at once; without, after timeout.
	start := time.Now()
	if err := rx.Wait(time.Second); err != nil || time.Since(start) > 100*time.Millisecond {
		t.Errorf("Wait with frames: %v after %v", err, time.Since(start))
	}
	rx.Recv(in, sizes)
	start = time.Now()
	if err := rx.Wait(30 * time.Millisecond); err != nil || time.Since(start) < 25*time.Millisecond {
		t.Errorf("Wait on nothing: %v after %v", err, time.Since(start))
	}
	if r.word(ringToApp, ctlSleep).Load() != 0 {
		t.Error("sleeping flag left set after Wait")
	}
}

// TestPrepareRoom: a producer that finds the ring full asks to be told of
// room, and the consumer's next release rings its doorbell, once.
func TestPrepareRoom(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 4, SlotSize: 256})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	poll := func(timeout time.Duration) bool { return pollFD(t, tx.FD(), timeout) }
	if !tx.PrepareRoom(4) {
		t.Fatal("PrepareRoom on an empty ring")
	}
	if r.word(ringToApp, ctlRoom).Load() != 0 {
		t.Fatal("flag set with room")
	}
	views := make([][]byte, 4)
	for round := range 3 {
		if n, _ := tx.Send([][]byte{{1}, {2}, {3}, {4}}); n != 4 {
			t.Fatalf("round %d: sent %d", round, n)
		}
		if ready, _ := tx.PrepareWait(time.Second); ready {
			t.Fatal("PrepareWait with nothing from the application")
		}
		if tx.PrepareRoom(1) {
			t.Fatalf("round %d: PrepareRoom on a full ring", round)
		}
		if r.word(ringToApp, ctlRoom).Load() != 1 {
			t.Fatal("waiting-for-room flag not set")
		}
		if poll(10 * time.Millisecond) {
			t.Fatalf("round %d: woken before any room", round)
		}
		// Frames lent by RecvZC free nothing until released.
		if n := rx.RecvZC(views[:1]); n != 1 {
			t.Fatalf("RecvZC: %d", n)
		}
		if poll(0) {
			t.Fatal("woken while the frame is lent")
		}
		rx.ReleaseRx()
		if !poll(time.Second) {
			t.Fatalf("round %d: not told of room", round)
		}
		if !tx.PrepareRoom(1) {
			t.Fatal("PrepareRoom with a free slot")
		}
		for rx.RecvZC(views) > 0 {
		}
		rx.ReleaseRx()
		var drain [8]byte
		_, _ = unix.Read(tx.FD(), drain[:])
	}
	// Once per wait, not per release.
	if w := rx.Stats().RoomWakeups; w != 3 {
		t.Errorf("%d room wakeups, want 3", w)
	}
	if w := tx.Stats().Wakeups; w != 0 {
		t.Errorf("%d frame wakeups, want 0", w)
	}
}

// TestNoLostRoomWakeup: a producer that sleeps whenever its ring is full,
// as the daemon does with frames parked, against a consumer that reads
// in bursts with pauses between: it is always woken when room comes.
func TestNoLostRoomWakeup(t *testing.T) {
	frames := 50000
	if testing.Short() {
		frames = 10000
	}
	r := newTestRegion(t, Config{Slots: 4, SlotSize: 256})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	var (
		wg   sync.WaitGroup
		done atomic.Bool // the producer sent all, or failed
		got  int
	)
	errs := make(chan error, 2)
	wg.Go(func() {
		defer done.Store(true)
		fds := []unix.PollFd{{Fd: int32(tx.FD()), Events: unix.POLLIN}}
		out := [][]byte{make([]byte, 64)}
		for i := 0; i < frames; {
			binary.LittleEndian.PutUint32(out[0], uint32(i))
			if n, err := tx.Send(out); err != nil {
				errs <- err
				return
			} else if n == 1 {
				i++
				continue
			}
			start := time.Now()
			tx.PrepareWait(5 * time.Second)
			if !tx.PrepareRoom(1) {
				ts := unix.NsecToTimespec(int64(5 * time.Second))
				if _, err := unix.Ppoll(fds, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
					errs <- err
					return
				}
			}
			if time.Since(start) > 4*time.Second {
				errs <- errors.New("room wakeup lost")
				return
			}
		}
	})
	wg.Go(func() {
		in, sizes := bufs(4, 256)
		for i := 0; i < frames; {
			finished := done.Load() // before Recv: all sent is then all there
			n, err := rx.Recv(in[:1+i%4], sizes)
			if err != nil {
				errs <- err
				return
			}
			for k := range n {
				if v := binary.LittleEndian.Uint32(in[k]); v != uint32(i) {
					errs <- fmt.Errorf("frame %d, want %d", v, i)
					return
				}
				i++
			}
			got = i
			if n == 0 && finished {
				return
			}
			if n == 0 {
				runtime.Gosched()
			} else if i%64 < n {
				time.Sleep(20 * time.Microsecond) // a pause: the producer sleeps
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got != frames {
		t.Fatalf("%d frames of %d received", got, frames)
	}
	w := rx.Stats().RoomWakeups
	t.Logf("%d frames through a 4-slot ring, %d room wakeups", frames, w)
	if w == 0 {
		t.Error("no room wakeups: the producer never slept")
	}
}

// mapped maps r again from duplicates of its descriptors, as an
// application maps those it receives; the Region it returns owns them and
// is closed at the end of the test.
func mapped(t *testing.T, r *Region) *Region {
	t.Helper()
	var fds [3]int
	for i, fd := range r.FDs() {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		fds[i] = d
	}
	m, err := Map(fds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestHostileDoorbells: whatever the application does to the doorbell
// descriptors it is given (makes them blocking, drains the daemon's,
// fills both pipes from writers of its own), the daemon's End never
// blocks on them: it drains, rings and waits for room as before.
func TestHostileDoorbells(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 4, SlotSize: 256})
	m := mapped(t, r)
	given := m.FDs()
	d, a := r.DaemonEnd(), m.AppEnd()
	// The application fills its own doorbell from a writer it opens, and
	// the daemon's through the write end it was given; then makes them
	// all blocking.
	w, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", given[1]), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(w)
	junk := make([]byte, 4096)
	for _, fd := range []int{w, given[2]} {
		for {
			if _, err := unix.Write(fd, junk); errors.Is(err, unix.EAGAIN) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, fd := range []int{w, given[1], given[2]} {
		if err := unix.SetNonblock(fd, false); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		// Drain the daemon's doorbell (full), a little at each look, and
		// go on reading it empty.
		for range 2048 {
			if ready, _ := d.PrepareWait(time.Second); ready {
				done <- errors.New("frames from nowhere")
				return
			}
		}
		// Ring the application's (full) while it announces sleeps.
		for i := range 8 {
			a.PrepareWait(time.Second)
			if n, err := d.Send([][]byte{frame(i, 256)}); err != nil || n != 1 && i < 4 {
				done <- fmt.Errorf("send %d: %d, %v", i, n, err)
				return
			}
		}
		if d.PrepareRoom(1) {
			done <- errors.New("room in a full ring")
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		// Free it, so that the test can end.
		for _, fd := range []int{w, given[1], given[2]} {
			unix.SetNonblock(fd, true)
		}
		unix.Write(given[2], junk[:1])
		unix.Read(given[1], junk)
		t.Fatal("the daemon's End blocked on the application's doorbells")
	}
	if w := d.Stats().Wakeups; w == 0 {
		t.Error("the daemon rang no doorbell: the test tested nothing")
	}
}

// TestWaitPeerGone: once every writer of its doorbell closed it (the
// daemon exited, or dropped the application), Wait fails with ErrGone at
// once, instead of waking, finding nothing, and waking again.
func TestWaitPeerGone(t *testing.T) {
	r, err := Create("gone", Config{Slots: 4, SlotSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	a := mapped(t, r).AppEnd()
	if err := a.Wait(10 * time.Millisecond); err != nil {
		t.Fatalf("Wait with the daemon there: %v", err)
	}
	r.Close()
	start := time.Now()
	if err := a.Wait(5 * time.Second); !errors.Is(err, ErrGone) || time.Since(start) > time.Second {
		t.Fatalf("Wait after the daemon closed: %v after %v", err, time.Since(start))
	}
}

func TestFail(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 8, SlotSize: 256})
	d, a := r.DaemonEnd(), r.AppEnd()
	if _, err := a.Send([][]byte{{1}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- d.Wait(10 * time.Second) }()
	// Let it sleep (it may also see the frame at once), then fail it.
	time.Sleep(10 * time.Millisecond)
	d.Fail(nil)
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrGone) {
			t.Errorf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Fail did not wake Wait")
	}
	in, sizes := bufs(1, 256)
	if _, err := d.Send([][]byte{{1}}); !errors.Is(err, ErrGone) {
		t.Errorf("Send: %v", err)
	}
	if n, err := d.Recv(in, sizes); n != 0 || !errors.Is(err, ErrGone) {
		t.Errorf("Recv: %d %v", n, err)
	}
	if d.RecvZC(in) != 0 || d.TxBuf() != nil || d.TxRoom() != 0 {
		t.Error("RecvZC, TxBuf or TxRoom after Fail")
	}
	if err := d.Flush(); !errors.Is(err, ErrGone) {
		t.Errorf("Flush: %v", err)
	}
	if err := d.Wait(time.Second); !errors.Is(err, ErrGone) {
		t.Errorf("Wait: %v", err)
	}
	if ready, _ := d.PrepareWait(time.Second); !ready {
		t.Error("PrepareWait after Fail")
	}
	// The first error sticks; the other end is untouched.
	d.Fail(errors.New("other"))
	if _, err := d.Send(nil); !errors.Is(err, ErrGone) {
		t.Errorf("Send: %v", err)
	}
	mine := errors.New("mine")
	a.Fail(mine)
	if _, err := a.Recv(in, sizes); err != mine {
		t.Errorf("Recv: %v", err)
	}
}

// TestTrust corrupts what the application controls and checks that the
// daemon's end fails cleanly.
func TestTrust(t *testing.T) {
	const slots, size = 8, 256
	setup := func(t *testing.T) (*Region, *End) {
		r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
		if n, err := r.AppEnd().Send([][]byte{frame(0, size), frame(1, size)}); n != 2 || err != nil {
			t.Fatal(n, err)
		}
		return r, r.DaemonEnd()
	}
	expectBad := func(t *testing.T, d *End) {
		t.Helper()
		in, sizes := bufs(slots, size)
		if n, err := d.Recv(in, sizes); n != 0 || !errors.Is(err, ErrBadRegion) {
			t.Errorf("Recv: %d, %v", n, err)
		}
		if d.RecvZC(in) != 0 {
			t.Error("RecvZC after corruption")
		}
		if _, err := d.Send([][]byte{{1}}); !errors.Is(err, ErrBadRegion) {
			t.Errorf("Send: %v", err)
		}
		if st := d.Stats(); st.BadDescriptors != 1 {
			t.Errorf("BadDescriptors %d", st.BadDescriptors)
		}
	}
	recv := func(d *End) { in, sizes := bufs(slots, size); d.Recv(in, sizes) }
	recvZC := func(d *End) { d.RecvZC(make([][]byte, slots)) }
	prepare := func(d *End) { d.PrepareWait(time.Second) }
	for _, rcv := range []struct {
		name string
		f    func(*End)
	}{{"Recv", recv}, {"RecvZC", recvZC}, {"PrepareWait", prepare}} {
		t.Run("sequence-far-ahead/"+rcv.name, func(t *testing.T) {
			r, d := setup(t)
			r.seqAt(ringFromApp, 1).Store(1 << 30)
			rcv.f(d)
			expectBad(t, d)
		})
		t.Run("sequence-a-round-ahead/"+rcv.name, func(t *testing.T) {
			r, d := setup(t)
			r.seqAt(ringFromApp, 2).Store(3 + slots)
			rcv.f(d)
			expectBad(t, d)
		})
		t.Run("length/"+rcv.name, func(t *testing.T) {
			r, d := setup(t)
			r.lenAt(ringFromApp, 1).Store(size + 1)
			rcv.f(d)
			if rcv.name == "PrepareWait" {
				recv(d)
			}
			expectBad(t, d)
		})
	}
	t.Run("sequence-backwards-is-no-frame", func(t *testing.T) {
		// A slot's word set back to what the previous round left is a
		// frame not yet published: nothing to read, nothing wrong.
		r, d := setup(t)
		r.seqAt(ringFromApp, 0).Store(uint32(1<<32 + 1 - slots))
		if n := d.RecvZC(make([][]byte, slots)); n != 0 || d.Err() != nil {
			t.Errorf("RecvZC: %d, %v", n, d.Err())
		}
		r.seqAt(ringFromApp, 0).Store(1)
		if n := d.RecvZC(make([][]byte, slots)); n != 2 || d.Err() != nil {
			t.Errorf("RecvZC: %d, %v", n, d.Err())
		}
	})
	t.Run("a-full-ring-is-fine", func(t *testing.T) {
		r, d := setup(t)
		for i := range uint32(slots) {
			r.seqAt(ringFromApp, i).Store(i + 1)
		}
		in, sizes := bufs(slots, size)
		if n, err := d.Recv(in, sizes); n != slots || err != nil {
			t.Errorf("Recv: %d, %v", n, err)
		}
	})
	for name, cons := range map[string]uint32{"ahead": 1, "far-ahead": 1 << 31, "behind": ^uint32(0)} {
		t.Run("consumer-"+name, func(t *testing.T) {
			r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
			d := r.DaemonEnd()
			var batch [][]byte
			for range slots {
				batch = append(batch, []byte{1})
			}
			if n, err := d.Send(batch); n != slots || err != nil { // full
				t.Fatal(n, err)
			}
			// The consumer index may be 0..slots; anything else is
			// corruption, and so is moving back.
			if name == "behind" {
				r.word(ringToApp, ctlCons).Store(4)
				if n, _ := d.Send(batch[:1]); n != 1 {
					t.Fatal("Send after a consumer at 4")
				}
			} else {
				cons += slots
			}
			r.word(ringToApp, ctlCons).Store(cons)
			if n, err := d.Send(batch); n != 0 || !errors.Is(err, ErrBadRegion) {
				t.Errorf("Send: %d, %v", n, err)
			}
			if d.TxBuf() != nil {
				t.Error("TxBuf after corruption")
			}
			if st := d.Stats(); st.BadDescriptors != 1 {
				t.Errorf("BadDescriptors %d", st.BadDescriptors)
			}
		})
	}
	t.Run("daemon-ignores-its-own-words", func(t *testing.T) {
		// The application scribbles over what the daemon owns: the
		// daemon never reads it back.
		r, d := setup(t)
		r.word(ringToApp, ctlProd).Store(12345)
		r.word(ringFromApp, ctlProd).Store(1 << 30) // unused: sequence words tell
		r.word(ringFromApp, ctlCons).Store(999)
		r.seqAt(ringToApp, 0).Store(5)
		r.lenAt(ringToApp, 0).Store(1 << 30)
		r.word(ringFromApp, ctlSleep).Store(7)
		r.word(ringToApp, ctlSleep).Store(7) // a hint only
		in, sizes := bufs(slots, size)
		if n, err := d.Recv(in, sizes); n != 2 || err != nil || !check(in[1][:sizes[1]], 1, size) {
			t.Errorf("Recv: %d, %v", n, err)
		}
		if n, err := d.Send([][]byte{{1}}); n != 1 || err != nil {
			t.Errorf("Send: %d, %v", n, err)
		}
		if got := r.word(ringToApp, ctlProd).Load(); got != 1 {
			t.Errorf("to-app producer %d, want 1", got)
		}
	})
}

// TestMapRejects writes bad headers and checks that Map refuses them with
// ErrBadRegion and closes the descriptors.
func TestMapRejects(t *testing.T) {
	good, err := Create("good", Config{Slots: 8, SlotSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	hdr := bytes.Clone(good.mem[:headerSize])
	size := good.l.size
	good.Close()
	put32 := func(off int, v uint32) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
	}
	cases := map[string]struct {
		edit func([]byte)
		size uint64
	}{
		"magic":         {func(b []byte) { b[0] = 'X' }, size},
		"version":       {put32(hdrVersion, 1), size},
		"reserved":      {put32(hdrReserved, 1), size},
		"slots-0":       {put32(hdrSlots, 0), size},
		"slots-3":       {put32(hdrSlots, 3), size},
		"slots-huge":    {put32(hdrSlots, 1<<31), size},
		"slotsize-0":    {put32(hdrSlotSize, 0), size},
		"slotsize-odd":  {put32(hdrSlotSize, 300), size},
		"slotsize-huge": {put32(hdrSlotSize, 1<<20), size},
		"total-vs-file": {nil, size + 4096},
		"short-file":    {func(b []byte) { binary.LittleEndian.PutUint64(b[hdrTotal:], 4096) }, 4096},
		"too-many-slots": {func(b []byte) {
			binary.LittleEndian.PutUint32(b[hdrSlots:], 16)
		}, size},
		"tiny-file":  {nil, 32},
		"empty-file": {nil, 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := bytes.Clone(hdr)
			if c.edit != nil {
				c.edit(h)
			}
			fds := testFDs(t, h, c.size)
			r, err := Map(fds)
			if err == nil {
				r.Close()
				t.Fatal("Map succeeded")
			}
			if !errors.Is(err, ErrBadRegion) {
				t.Errorf("error %v does not wrap ErrBadRegion", err)
			}
			for _, fd := range fds {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
					t.Errorf("fd %d left open", fd)
				}
			}
		})
	}
	t.Run("indices", func(t *testing.T) {
		fds := testFDs(t, hdr, size)
		mem, err := unix.Mmap(fds[0], 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		l := layoutFor(8, 256)
		binary.NativeEndian.PutUint32(mem[l.ctl[ringFromApp]+ctlProd:], 9)
		unix.Munmap(mem)
		if r, err := Map(fds); !errors.Is(err, ErrBadRegion) {
			if r != nil {
				r.Close()
			}
			t.Errorf("Map with 9 frames in 8 slots: %v", err)
		}
	})
	t.Run("good", func(t *testing.T) {
		r, err := Map(testFDs(t, hdr, size))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if r.Config() != (Config{Slots: 8, SlotSize: 256}) {
			t.Errorf("Config %+v", r.Config())
		}
	})
}

// testFDs makes a memfd of size bytes starting with hdr, and two eventfds.
func testFDs(t testing.TB, hdr []byte, size uint64) [3]int {
	t.Helper()
	fd, err := unix.MemfdCreate("shmlink-fuzz", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, hdr[:min(uint64(len(hdr)), size)], 0); err != nil {
		t.Fatal(err)
	}
	fds := [3]int{fd, -1, -1}
	for i := 1; i < 3; i++ {
		if fds[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			t.Fatal(err)
		}
	}
	return fds
}

func TestMapSharesMemory(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 16, SlotSize: 256})
	m := mapped(t, r)
	d, a := r.DaemonEnd(), m.AppEnd()
	if n, err := d.Send([][]byte{frame(0, 256)}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	views := make([][]byte, 4)
	if n := a.RecvZC(views); n != 1 || !check(views[0], 0, 256) {
		t.Fatalf("RecvZC: %d", n)
	}
	a.ReleaseRx()
	if n, err := a.Send([][]byte{frame(1, 256)}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if n := d.RecvZC(views); n != 1 || !check(views[0], 1, 256) {
		t.Fatalf("RecvZC: %d", n)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	if err := m.Close(); err != nil {
		t.Error("second Close:", err)
	}
}

func TestAllocs(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 256, SlotSize: 2048})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	frames := make([][]byte, link.IdealBatch)
	for i := range frames {
		frames[i] = frame(i, 2048)
	}
	in, sizes := bufs(link.IdealBatch, 2048)
	views := make([][]byte, link.IdealBatch)
	if a := testing.AllocsPerRun(100, func() {
		tx.Send(frames)
		rx.Recv(in, sizes)
	}); a != 0 {
		t.Errorf("Send+Recv: %v allocs", a)
	}
	if a := testing.AllocsPerRun(100, func() {
		for range link.IdealBatch {
			b := tx.TxBuf()
			b[0] = 1
			tx.TxSubmit(64)
		}
		tx.TxRoom()
		tx.Flush()
		if ready, _ := rx.PrepareWait(time.Second); !ready {
			panic("not ready")
		}
		rx.RecvZC(views)
		rx.ReleaseRx()
	}); a != 0 {
		t.Errorf("TxBuf/TxSubmit/Flush+RecvZC/ReleaseRx: %v allocs", a)
	}
	// Sleeps: PrepareWait on nothing, and a doorbell.
	if a := testing.AllocsPerRun(100, func() {
		rx.PrepareWait(time.Second)
		tx.Send(frames[:1])
		rx.Wait(time.Second)
		rx.Recv(in, sizes)
	}); a != 0 {
		t.Errorf("PrepareWait/Wait with a doorbell: %v allocs", a)
	}
}

// TestUseAfterClose checks that the Ends of a closed region fail instead
// of touching the unmapped memory, and that Close wakes a Wait.
func TestUseAfterClose(t *testing.T) {
	r, err := Create("closed", Config{Slots: 8, SlotSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	a, d := r.AppEnd(), r.DaemonEnd()
	d.Send([][]byte{{1}, {2}})
	views := make([][]byte, 1)
	if a.RecvZC(views) != 1 || d.TxBuf() == nil {
		t.Fatal("RecvZC or TxBuf")
	}
	done := make(chan error)
	go func() { done <- d.Wait(10 * time.Second) }()
	time.Sleep(10 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrGone) {
			t.Errorf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Wait")
	}
	for _, e := range []*End{a, d} {
		e.ReleaseRx()
		e.TxSubmit(10)
		in, sizes := bufs(1, 256)
		if _, err := e.Recv(in, sizes); !errors.Is(err, ErrGone) {
			t.Errorf("Recv: %v", err)
		}
		if _, err := e.Send(in); !errors.Is(err, ErrGone) {
			t.Errorf("Send: %v", err)
		}
		if e.TxBuf() != nil || e.RecvZC(views) != 0 || e.TxRoom() != 0 {
			t.Error("TxBuf, RecvZC or TxRoom")
		}
		if err := e.Flush(); !errors.Is(err, ErrGone) {
			t.Errorf("Flush: %v", err)
		}
		if err := e.Wait(time.Second); !errors.Is(err, ErrGone) {
			t.Errorf("Wait: %v", err)
		}
		if ready, _ := e.PrepareWait(time.Second); !ready {
			t.Error("PrepareWait")
		}
		e.Stats()
	}
}

// TestFailWhileBuilding: Fail from another goroutine between TxBuf and
// TxSubmit (the daemon gone while the transport builds a frame) leaves
// the lent slot usable until TxSubmit, which drops the frame.
func TestFailWhileBuilding(t *testing.T) {
	r, err := Create("fail-while-building", Config{Slots: 8, SlotSize: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e := r.AppEnd()
	b := e.TxBuf()
	if b == nil {
		t.Fatal("no slot")
	}
	e.Fail(nil)
	if again := e.TxBuf(); len(again) != len(b) || &again[0] != &b[0] {
		t.Fatalf("TxBuf after Fail with a slot lent: %d bytes, want the same %d", len(again), len(b))
	}
	e.TxSubmit(64)
	if e.TxBuf() != nil {
		t.Fatal("TxBuf after Fail with no slot lent gave one")
	}
	if got := r.DaemonEnd().RecvZC(make([][]byte, 8)); got != 0 {
		t.Fatalf("the daemon received %d frames submitted after Fail", got)
	}
}

// TestSize: Size is the size of the file Create makes.
func TestSize(t *testing.T) {
	for _, cfg := range []Config{{}, {Slots: 256, SlotSize: 4096}, {Slots: 1024, SlotSize: 9280}} {
		r := newTestRegion(t, cfg)
		var st unix.Stat_t
		if err := unix.Fstat(r.FDs()[0], &st); err != nil {
			t.Fatal(err)
		}
		if got := Size(cfg); got != uint64(st.Size) {
			t.Errorf("%+v: Size %d, the file %d bytes", cfg, got, st.Size)
		}
	}
	if Size(Config{Slots: 3}) != 0 {
		t.Error("Size of a configuration Create refuses")
	}
}
