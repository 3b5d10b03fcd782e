package memlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
)

// frame builds test frame number i: a 4-byte sequence number followed by a
// pattern derived from it, 8 to 1507 bytes long.
func frame(i int) []byte {
	b := make([]byte, frameLen(i))
	fill(b, i)
	return b
}

func frameLen(i int) int { return 8 + (i*7919)%1500 }

func fill(b []byte, i int) {
	binary.BigEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i*31 + j)
	}
}

// clock is a virtual clock safe for concurrent reads.
type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Duration      { return time.Duration(c.t.Load()) }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }

// receiver drains an endpoint with reusable buffers.
type receiver struct {
	bufs  [][]byte
	sizes []int
}

func newReceiver(maxFrame int) *receiver {
	r := &receiver{bufs: make([][]byte, link.IdealBatch), sizes: make([]int, link.IdealBatch)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, maxFrame)
	}
	return r
}

// drain receives everything due and returns copies of the frames.
func (r *receiver) drain(t testing.TB, e *Endpoint) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		n, err := e.Recv(r.bufs, r.sizes)
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		for i := range n {
			out = append(out, bytes.Clone(r.bufs[i][:r.sizes[i]]))
		}
		if n < len(r.bufs) {
			return out
		}
	}
}

// sendAll sends frames 0..n-1 in batches and fails on anything but full
// acceptance.
func sendAll(t testing.TB, e *Endpoint, first, n int) {
	t.Helper()
	batch := make([][]byte, 0, link.IdealBatch)
	for i := first; i < first+n; i++ {
		batch = append(batch, frame(i))
		if len(batch) == cap(batch) || i == first+n-1 {
			got, err := e.Send(batch)
			if err != nil || got != len(batch) {
				t.Fatalf("Send(%d frames) = %d, %v", len(batch), got, err)
			}
			batch = batch[:0]
		}
	}
}

func seqOf(f []byte) int { return int(binary.BigEndian.Uint32(f)) }

func checkInvariant(t *testing.T, e *Endpoint) {
	t.Helper()
	s := e.Stats()
	if in, out := s.Sent+s.Duplicated, s.Delivered+s.Lost+s.Overflow+uint64(e.Pending()); in != out {
		t.Errorf("Sent+Duplicated = %d, Delivered+Lost+Overflow+Pending = %d (%+v, pending %d)", in, out, s, e.Pending())
	}
}

func TestLosslessInOrder(t *testing.T) {
	a, b := NewPair(Config{})
	ra, rb := newReceiver(a.MaxFrame()), newReceiver(b.MaxFrame())
	const n = 20000
	var gotB, gotA [][]byte
	for i := 0; i < n; i += 500 {
		sendAll(t, a, i, 500)
		sendAll(t, b, n+i, 500)
		gotB = append(gotB, rb.drain(t, b)...)
		gotA = append(gotA, ra.drain(t, a)...)
	}
	for dir, got := range map[string][][]byte{"a->b": gotB, "b->a": gotA} {
		first := 0
		if dir == "b->a" {
			first = n
		}
		if len(got) != n {
			t.Fatalf("%s: received %d frames, want %d", dir, len(got), n)
		}
		for i, f := range got {
			if want := frame(first + i); !bytes.Equal(f, want) {
				t.Fatalf("%s: frame %d differs: got %d bytes seq %d, want %d bytes", dir, i, len(f), seqOf(f), len(want))
			}
		}
	}
	want := Stats{Sent: n, Delivered: n}
	if s := a.Stats(); s != want {
		t.Errorf("a.Stats() = %+v, want %+v", s, want)
	}
	if s := b.Stats(); s != want {
		t.Errorf("b.Stats() = %+v, want %+v", s, want)
	}
}

// within checks that count is within 5 standard deviations of a binomial
// draw of n trials with probability p.
func within(t *testing.T, what string, count uint64, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if d := math.Abs(float64(count) - mean); d > 5*sd+1 {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f (p=%v)", what, count, n, mean, 5*sd, p)
	}
}

func TestFaultRates(t *testing.T) {
	n := 20000
	if testing.Short() { // -race makes the byte-by-byte checks slow
		n = 5000
	}
	for _, p := range []float64{0.01, 0.1, 0.5, 1} {
		t.Run("Loss", func(t *testing.T) {
			a, b := NewPair(Config{Seed: 1, Capacity: n, AtoB: Faults{Loss: p}})
			sendAll(t, a, 0, n)
			got := newReceiver(b.MaxFrame()).drain(t, b)
			s := a.Stats()
			within(t, "Lost", s.Lost, n, p)
			if uint64(len(got)) != uint64(n)-s.Lost || s.Delivered != uint64(len(got)) {
				t.Errorf("received %d, Delivered %d, want %d-%d", len(got), s.Delivered, n, s.Lost)
			}
			last := -1
			for _, f := range got {
				if seqOf(f) <= last || !bytes.Equal(f, frame(seqOf(f))) {
					t.Fatalf("frame %d after %d, or damaged", seqOf(f), last)
				}
				last = seqOf(f)
			}
			checkInvariant(t, a)
		})
		t.Run("Duplicate", func(t *testing.T) {
			a, b := NewPair(Config{Seed: 2, Capacity: 2 * n, AtoB: Faults{Duplicate: p}})
			sendAll(t, a, 0, n)
			got := newReceiver(b.MaxFrame()).drain(t, b)
			s := a.Stats()
			within(t, "Duplicated", s.Duplicated, n, p)
			seen := make([]int, n)
			for _, f := range got {
				if !bytes.Equal(f, frame(seqOf(f))) {
					t.Fatalf("frame %d damaged", seqOf(f))
				}
				seen[seqOf(f)]++
			}
			twice := 0
			for i, c := range seen {
				if c < 1 || c > 2 {
					t.Fatalf("frame %d received %d times", i, c)
				}
				if c == 2 {
					twice++
				}
			}
			if uint64(twice) != s.Duplicated || s.Delivered != uint64(n)+s.Duplicated {
				t.Errorf("%d frames twice, Delivered %d, Duplicated %d", twice, s.Delivered, s.Duplicated)
			}
			checkInvariant(t, a)
		})
		t.Run("Corrupt", func(t *testing.T) {
			a, b := NewPair(Config{Seed: 3, Capacity: n, AtoB: Faults{Corrupt: p}})
			sendAll(t, a, 0, n)
			got := newReceiver(b.MaxFrame()).drain(t, b)
			s := a.Stats()
			within(t, "Corrupted", s.Corrupted, n, p)
			if len(got) != n {
				t.Fatalf("received %d frames, want %d", len(got), n)
			}
			bad := 0
			for i, f := range got {
				want := frame(i)
				if len(f) != len(want) {
					t.Fatalf("frame %d: %d bytes, want %d", i, len(f), len(want))
				}
				flipped := 0
				for j := range f {
					for x := f[j] ^ want[j]; x != 0; x &= x - 1 {
						flipped++
					}
				}
				if flipped > 1 {
					t.Fatalf("frame %d: %d bits flipped, want at most 1", i, flipped)
				}
				bad += flipped
			}
			if uint64(bad) != s.Corrupted {
				t.Errorf("%d frames corrupted, Corrupted = %d", bad, s.Corrupted)
			}
			checkInvariant(t, a)
		})
		t.Run("ReorderDelay", func(t *testing.T) {
			var c clock
			a, b := NewPair(Config{Seed: 4, Capacity: n, Now: c.now,
				AtoB: Faults{Reorder: p, ReorderDelay: 100 * time.Microsecond}})
			one := make([][]byte, 1)
			for i := range n {
				one[0] = frame(i)
				if k, err := a.Send(one); k != 1 || err != nil {
					t.Fatalf("Send = %d, %v", k, err)
				}
				c.advance(time.Microsecond)
			}
			r := newReceiver(b.MaxFrame())
			got := r.drain(t, b)
			c.advance(100 * time.Microsecond)
			got = append(got, r.drain(t, b)...)
			s := a.Stats()
			within(t, "Reordered", s.Reordered, n, p)
			late := lateFrames(t, got, n)
			// A held frame arrives after at least one later frame unless
			// its extra delay was under 1µs or every frame it could pass
			// was held longer.
			if late > int(s.Reordered) || (p < 1 && float64(late) < 0.5*float64(s.Reordered)) {
				t.Errorf("%d frames arrived late, Reordered = %d", late, s.Reordered)
			}
			checkInvariant(t, a)
		})
		t.Run("ReorderSwap", func(t *testing.T) {
			a, b := NewPair(Config{Seed: 5, Capacity: n, AtoB: Faults{Reorder: p}})
			sendAll(t, a, 0, n)
			got := newReceiver(b.MaxFrame()).drain(t, b)
			s := a.Stats()
			// At most one frame is held at a time, and the frame after it
			// passes it, so a fraction p/(1+p) of frames are held.
			within(t, "Reordered", s.Reordered, n, p/(1+p))
			late := lateFrames(t, got, n-a.Pending())
			if uint64(late+a.Pending()) != s.Reordered {
				t.Errorf("%d frames late and %d held, Reordered = %d", late, a.Pending(), s.Reordered)
			}
			checkInvariant(t, a)
		})
	}
}

// lateFrames checks that got holds distinct undamaged frames, want of them,
// and counts those that arrived after a frame sent later.
func lateFrames(t *testing.T, got [][]byte, want int) int {
	t.Helper()
	if len(got) != want {
		t.Fatalf("received %d frames, want %d", len(got), want)
	}
	late, highest := 0, -1
	seen := map[int]bool{}
	for _, f := range got {
		i := seqOf(f)
		if seen[i] || !bytes.Equal(f, frame(i)) {
			t.Fatalf("frame %d repeated or damaged", i)
		}
		seen[i] = true
		if i < highest {
			late++
		}
		highest = max(highest, i)
	}
	return late
}

func TestReorderSwapsNeighbours(t *testing.T) {
	a, b := NewPair(Config{AtoB: Faults{Reorder: 1}})
	sendAll(t, a, 0, 6)
	var order []int
	for _, f := range newReceiver(b.MaxFrame()).drain(t, b) {
		order = append(order, seqOf(f))
	}
	if want := []int{1, 0, 3, 2, 5, 4}; !equalInts(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	// The last frame sent waits for the next one.
	sendAll(t, a, 6, 1)
	if a.Pending() != 1 {
		t.Errorf("Pending = %d, want 1 (frame 6 held)", a.Pending())
	}
	a.SetFaults(Faults{})
	sendAll(t, a, 7, 1)
	order = order[:0]
	for _, f := range newReceiver(b.MaxFrame()).drain(t, b) {
		order = append(order, seqOf(f))
	}
	if want := []int{7, 6}; !equalInts(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReorderDelayHoldsBack(t *testing.T) {
	var c clock
	a, b := NewPair(Config{Seed: 9, Now: c.now, AtoB: Faults{Reorder: 1, ReorderDelay: 10 * time.Microsecond}})
	sendAll(t, a, 0, 20)
	r := newReceiver(b.MaxFrame())
	if got := r.drain(t, b); len(got) != 0 {
		t.Fatalf("%d frames delivered before any extra delay passed", len(got))
	}
	c.advance(10 * time.Microsecond)
	got := r.drain(t, b)
	if late := lateFrames(t, got, 20); late == 0 {
		t.Errorf("20 frames with random extra delays arrived in order")
	}
	if s := a.Stats(); s.Reordered != 20 {
		t.Errorf("Reordered = %d, want 20", s.Reordered)
	}
}

func TestDelay(t *testing.T) {
	var c clock
	const d = 10 * time.Millisecond
	a, b := NewPair(Config{Now: c.now, AtoB: Faults{Delay: d}})
	r := newReceiver(b.MaxFrame())
	sendAll(t, a, 0, 100) // due at 10ms
	c.advance(5 * time.Millisecond)
	sendAll(t, a, 100, 100) // due at 15ms
	c.advance(d - 5*time.Millisecond - 1)
	if got := r.drain(t, b); len(got) != 0 {
		t.Fatalf("%d frames before the delay passed", len(got))
	}
	c.advance(1)
	got := r.drain(t, b)
	if len(got) != 100 || seqOf(got[0]) != 0 || seqOf(got[99]) != 99 {
		t.Fatalf("at 10ms: %d frames, want frames 0..99", len(got))
	}
	c.advance(5*time.Millisecond - 1)
	if got := r.drain(t, b); len(got) != 0 {
		t.Fatalf("%d frames before the second batch was due", len(got))
	}
	c.advance(1)
	if got := r.drain(t, b); len(got) != 100 || seqOf(got[0]) != 100 {
		t.Fatalf("at 15ms: %d frames, want frames 100..199", len(got))
	}
	// The other direction has no delay.
	sendAll(t, b, 0, 1)
	if got := newReceiver(a.MaxFrame()).drain(t, a); len(got) != 1 {
		t.Fatalf("b->a: %d frames, want 1 at once", len(got))
	}
}

func TestRealClockDelay(t *testing.T) {
	const d = 20 * time.Millisecond
	a, b := NewPair(Config{AtoB: Faults{Delay: d}})
	r := newReceiver(b.MaxFrame())
	start := time.Now()
	sendAll(t, a, 0, 1)
	for {
		got := r.drain(t, b)
		if len(got) == 1 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("frame never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	if el := time.Since(start); el < d {
		t.Errorf("frame arrived after %v, before the %v delay", el, d)
	}
}

func TestDeterminism(t *testing.T) {
	f := Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1}
	run := func(seed uint64) ([][]byte, Stats) {
		a, b := NewPair(Config{Seed: seed, AtoB: f, BtoA: f})
		// Traffic in the other direction must not disturb this one.
		if seed != 0 {
			sendAll(t, b, 0, int(seed)*37)
		}
		sendAll(t, a, 0, 5000)
		return newReceiver(b.MaxFrame()).drain(t, b), a.Stats()
	}
	got1, s1 := run(7)
	got2, s2 := run(7)
	if s1 != s2 || len(got1) != len(got2) {
		t.Fatalf("same seed: stats %+v vs %+v", s1, s2)
	}
	for i := range got1 {
		if !bytes.Equal(got1[i], got2[i]) {
			t.Fatalf("same seed: frame %d differs", i)
		}
	}
	if _, s3 := run(8); s3 == s1 {
		t.Errorf("seeds 7 and 8 gave the same stats %+v", s1)
	}
}

func TestOverflow(t *testing.T) {
	a, b := NewPair(Config{Capacity: 10})
	sendAll(t, a, 0, 25)
	if s := a.Stats(); s.Sent != 25 || s.Overflow != 15 {
		t.Errorf("Stats = %+v, want Sent 25 Overflow 15", s)
	}
	got := newReceiver(b.MaxFrame()).drain(t, b)
	if len(got) != 10 || seqOf(got[9]) != 9 {
		t.Fatalf("received %d frames, want the first 10", len(got))
	}
	sendAll(t, a, 25, 10) // room again
	if got := newReceiver(b.MaxFrame()).drain(t, b); len(got) != 10 {
		t.Fatalf("after draining: received %d, want 10", len(got))
	}
	checkInvariant(t, a)
}

func TestBackpressure(t *testing.T) {
	a, b := NewPair(Config{Capacity: 10, Backpressure: true})
	frames := make([][]byte, 25)
	for i := range frames {
		frames[i] = frame(i)
	}
	n, err := a.Send(frames)
	if n != 10 || err != nil {
		t.Fatalf("Send = %d, %v; want 10, nil", n, err)
	}
	if n, _ := a.Send(frames[10:]); n != 0 {
		t.Fatalf("Send on a full link took %d", n)
	}
	if s := a.Stats(); s.Sent != 10 || s.Overflow != 0 {
		t.Errorf("Stats = %+v, want Sent 10, no Overflow", s)
	}
	r := newReceiver(b.MaxFrame())
	r.drain(t, b)
	if n, _ := a.Send(frames[10:]); n != 10 {
		t.Fatalf("Send after drain took %d, want 10", n)
	}
}

func TestBackpressureWithHeldFrame(t *testing.T) {
	a, b := NewPair(Config{Capacity: 1, Backpressure: true, AtoB: Faults{Reorder: 1}})
	r := newReceiver(b.MaxFrame())
	var order []int
	one := make([][]byte, 1)
	for i := 0; i < 10; {
		one[0] = frame(i)
		n, err := a.Send(one)
		if err != nil {
			t.Fatal(err)
		}
		i += n
		got := r.drain(t, b)
		if n == 0 && len(got) == 0 {
			t.Fatalf("wedged at frame %d with %d pending", i, a.Pending())
		}
		for _, f := range got {
			order = append(order, seqOf(f))
		}
	}
	if want := []int{1, 0, 3, 2, 5, 4, 7, 6, 9, 8}; !equalInts(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

func TestSizeErrors(t *testing.T) {
	a, b := NewPair(Config{MaxFrame: 100})
	n, err := a.Send([][]byte{make([]byte, 100), make([]byte, 101), make([]byte, 10)})
	if n != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Send = %d, %v; want 1, ErrFrameTooLarge", n, err)
	}
	if n, err := a.Send([][]byte{make([]byte, 60)}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	bufs := [][]byte{make([]byte, 0, 100), make([]byte, 100, 50+50)[:10:50], make([]byte, 100)}
	sizes := make([]int, 3)
	n, err = b.Recv(bufs, sizes)
	if n != 1 || sizes[0] != 100 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Recv = %d, %v (sizes %v); want 1 and ErrFrameTooLarge for a 60-byte frame into a 50-byte buffer", n, err, sizes)
	}
	if b.rx.pending() != 1 {
		t.Errorf("the frame that did not fit was not left queued")
	}
	n, err = b.Recv(bufs[2:], sizes[2:])
	if n != 1 || err != nil || sizes[2] != 60 {
		t.Fatalf("Recv into a large buffer = %d, %v, size %d", n, err, sizes[2])
	}
}

func TestRecvUsesCapacity(t *testing.T) {
	a, b := NewPair(Config{})
	sendAll(t, a, 0, 1)
	bufs := [][]byte{make([]byte, 0, 2000)}
	sizes := []int{0}
	if n, err := b.Recv(bufs, sizes); n != 1 || err != nil {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if got := bufs[0][:sizes[0]]; !bytes.Equal(got, frame(0)) {
		t.Errorf("frame damaged")
	}
}

func TestInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"loss>1":   {AtoB: Faults{Loss: 1.5}},
		"NaN":      {BtoA: Faults{Corrupt: math.NaN()}},
		"negative": {AtoB: Faults{Delay: -1}},
		"capacity": {Capacity: -1},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: NewPair did not panic", name)
				}
			}()
			NewPair(cfg)
		}()
	}
}

// TestConcurrent runs a sender and a receiver goroutine on one direction
// (and the reverse direction at the same time); run it with -race.
func TestConcurrent(t *testing.T) {
	const n = 50000
	a, b := NewPair(Config{Capacity: 256, Backpressure: true})
	var wg sync.WaitGroup
	send := func(e *Endpoint) {
		defer wg.Done()
		batch := make([][]byte, link.IdealBatch)
		for i := 0; i < n; {
			k := min(len(batch), n-i)
			for j := range k {
				batch[j] = frame(i + j)
			}
			taken, err := e.Send(batch[:k])
			if err != nil {
				t.Errorf("Send: %v", err)
				return
			}
			if taken < k {
				runtime.Gosched() // full: let the receiver run
			}
			i += taken
		}
	}
	recv := func(e *Endpoint) {
		defer wg.Done()
		r := newReceiver(e.MaxFrame())
		deadline := time.Now().Add(time.Minute)
		for next := 0; next < n; {
			k, err := e.Recv(r.bufs, r.sizes)
			if err != nil {
				t.Errorf("Recv: %v", err)
				return
			}
			if k == 0 {
				runtime.Gosched()
			}
			for j := range k {
				f := r.bufs[j][:r.sizes[j]]
				if len(f) != frameLen(next) || seqOf(f) != next {
					t.Errorf("got frame %d (%d bytes), want %d", seqOf(f), len(f), next)
					return
				}
				next++
			}
			if time.Now().After(deadline) {
				t.Errorf("timed out at frame %d", next)
				return
			}
		}
	}
	wg.Add(4)
	go send(a)
	go recv(b)
	go send(b)
	go recv(a)
	wg.Wait()
}

func TestZeroAllocs(t *testing.T) {
	var c clock
	f := Faults{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1, Corrupt: 0.1, Delay: time.Microsecond}
	for name, cfg := range map[string]Config{
		"clean":        {},
		"faults":       {Now: c.now, AtoB: f},
		"reorderDelay": {Now: c.now, AtoB: Faults{Reorder: 0.5, ReorderDelay: time.Microsecond}},
	} {
		a, b := NewPair(cfg)
		frames := make([][]byte, link.IdealBatch)
		for i := range frames {
			frames[i] = frame(i)
		}
		r := newReceiver(b.MaxFrame())
		step := func() {
			if _, err := a.Send(frames); err != nil {
				t.Fatal(err)
			}
			c.advance(2 * time.Microsecond)
			for {
				n, err := b.Recv(r.bufs, r.sizes)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
			}
		}
		for range 100 { // warm: buffers and slices grow to their steady size
			step()
		}
		if got := testing.AllocsPerRun(200, step); got != 0 {
			t.Errorf("%s: %v allocations per Send+Recv batch, want 0", name, got)
		}
	}
}

func BenchmarkSendRecv(b *testing.B) {
	for _, bc := range []struct {
		name string
		f    Faults
	}{
		{"clean", Faults{}},
		{"faults", Faults{Loss: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01}},
	} {
		b.Run(bc.name+"/64B", func(b *testing.B) {
			x, y := NewPair(Config{AtoB: bc.f})
			frames := make([][]byte, link.IdealBatch)
			for i := range frames {
				frames[i] = make([]byte, 64)
			}
			r := newReceiver(64)
			b.SetBytes(64 * link.IdealBatch)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.Send(frames); err != nil {
					b.Fatal(err)
				}
				if _, err := y.Recv(r.bufs, r.sizes); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*link.IdealBatch), "ns/frame")
		})
	}
}

// TestLineRate: with a line rate, a burst leaves one frame per
// serialisation time, after the delay, and an idle line starts afresh.
func TestLineRate(t *testing.T) {
	var c clock
	// One byte per nanosecond, plus 10 µs of delay.
	const delay = 10 * time.Microsecond
	a, b := NewPair(Config{Now: c.now, AtoB: Faults{Delay: delay}, AtoBRate: 1e9})
	r := newReceiver(b.MaxFrame())
	sendAll(t, a, 0, 10)
	due := delay
	for i := range 10 {
		due += time.Duration(frameLen(i))
		c.advance(due - 1 - c.now())
		if got := r.drain(t, b); len(got) != 0 {
			t.Fatalf("frame %d before it was serialised (due %v)", i, due)
		}
		c.advance(1)
		if got := r.drain(t, b); len(got) != 1 || seqOf(got[0]) != i {
			t.Fatalf("at %v: %d frames, want frame %d alone", c.now(), len(got), i)
		}
	}
	c.advance(time.Millisecond)
	start := c.now()
	sendAll(t, a, 10, 1)
	c.advance(delay + time.Duration(frameLen(10)) - 1)
	if got := r.drain(t, b); len(got) != 0 {
		t.Fatal("after idling: frame early")
	}
	c.advance(1)
	if got := r.drain(t, b); len(got) != 1 {
		t.Fatalf("after idling: %d frames at %v, want 1", len(got), c.now()-start)
	}
}
