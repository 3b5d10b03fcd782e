package faulty_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/faulty"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
)

// frame builds test frame number i: a 4-byte sequence number followed by a
// pattern derived from it, 8 to 1507 bytes long.
func frame(i int) []byte {
	b := make([]byte, 8+(i*7919)%1500)
	binary.BigEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i*31 + j)
	}
	return b
}

func seqOf(b []byte) int { return int(binary.BigEndian.Uint32(b)) }

// rig is a wrapper over one end of a fault-free memlink pair, with a
// virtual clock shared by both.
type rig struct {
	t     testing.TB
	now   time.Duration
	w     *faulty.Link
	a, b  *memlink.Endpoint
	bufs  [][]byte
	sizes []int
}

func newRig(t testing.TB, cfg faulty.Config, mcfg memlink.Config) *rig {
	t.Helper()
	r := &rig{t: t, bufs: make([][]byte, link.IdealBatch), sizes: make([]int, link.IdealBatch)}
	clock := func() time.Duration { return r.now }
	mcfg.Now = clock
	r.a, r.b = memlink.NewPair(mcfg)
	cfg.Now = clock
	w, err := faulty.Wrap(r.a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
	for i := range r.bufs {
		r.bufs[i] = make([]byte, r.a.MaxFrame())
	}
	return r
}

// drain receives at b everything due and returns copies.
func (r *rig) drain() [][]byte {
	r.t.Helper()
	var out [][]byte
	for {
		n, err := r.b.Recv(r.bufs, r.sizes)
		if err != nil {
			r.t.Fatal(err)
		}
		for i := range n {
			out = append(out, slices.Clone(r.bufs[i][:r.sizes[i]]))
		}
		if n == 0 {
			return out
		}
	}
}

// send sends frames through the wrapper and fails unless all are taken.
func (r *rig) send(frames ...[]byte) {
	r.t.Helper()
	n, err := r.w.Send(frames)
	if err != nil || n != len(frames) {
		r.t.Fatalf("Send took %d of %d: %v", n, len(frames), err)
	}
}

// check verifies the counters' invariant against what the inner link took.
func (r *rig) check() faulty.Stats {
	r.t.Helper()
	s := r.w.Stats()
	if got := r.a.Stats().Sent; got != s.Delivered {
		r.t.Fatalf("inner link took %d frames, wrapper counts %d Delivered", got, s.Delivered)
	}
	if s.Sent+s.Duplicated != s.Delivered+s.Lost+s.Held {
		r.t.Fatalf("Sent %d + Duplicated %d != Delivered %d + Lost %d + Held %d (%+v)", s.Sent, s.Duplicated, s.Delivered, s.Lost, s.Held, s)
	}
	return s
}

func seqs(frames [][]byte) []int {
	out := make([]int, len(frames))
	for i, f := range frames {
		out[i] = seqOf(f)
	}
	return out
}

func TestPassThrough(t *testing.T) {
	r := newRig(t, faulty.Config{}, memlink.Config{})
	var want [][]byte
	for i := range 200 {
		f := frame(i)
		want = append(want, f)
		r.send(f)
	}
	got := r.drain()
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("got %d frames %v, want %d in order", len(got), seqs(got), len(want))
	}
	if s := r.check(); s.Sent != 200 || s.Delivered != 200 || s.Held != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDelayHoldsUntilDue(t *testing.T) {
	const delay = 100 * time.Microsecond
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Delay: delay}}, memlink.Config{})
	// One frame every microsecond; each must reach the inner link exactly
	// when due, in order, whichever call releases it.
	const n = 300
	var got []int
	for i := range n {
		r.now = time.Duration(i) * time.Microsecond
		if i%3 == 0 {
			if err := r.w.Flush(); err != nil {
				t.Fatal(err)
			}
		} else if _, err := r.w.Recv(r.bufs[:1], r.sizes[:1]); err != nil {
			t.Fatal(err)
		}
		got = append(got, seqs(r.drain())...)
		r.send(frame(i))
		if due := i - int(delay/time.Microsecond); due >= 0 {
			if len(got) != due+1 || got[due] != due {
				t.Fatalf("at %v: delivered %d frames, want %d (last %v)", r.now, len(got), due+1, got[max(0, len(got)-3):])
			}
		} else if len(got) != 0 {
			t.Fatalf("at %v: %d frames delivered before due", r.now, len(got))
		}
		r.check()
	}
	// A Send releases what is due before its own frames.
	r.now += delay
	r.send(frame(n))
	got = append(got, seqs(r.drain())...)
	if len(got) != n {
		t.Fatalf("delivered %d, want %d", len(got), n)
	}
	for i, s := range got {
		if s != i {
			t.Fatalf("frame %d is %d: out of order", i, s)
		}
	}
	if s := r.check(); s.Delayed != n+1 || s.Held != 1 || s.Reordered != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// displaced counts the frames that arrive after a frame sent later.
func displaced(got []int) int {
	n, hi := 0, -1
	for _, s := range got {
		if s < hi {
			n++
		}
		hi = max(hi, s)
	}
	return n
}

func TestReorderSwaps(t *testing.T) {
	const n, p = 20000, 0.2
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Reorder: p}, Seed: 7}, memlink.Config{})
	var got []int
	for i := 0; i < n; i += 16 {
		batch := make([][]byte, 16)
		for j := range batch {
			batch[j] = frame(i + j)
		}
		r.send(batch...)
		got = append(got, seqs(r.drain())...)
		r.check()
	}
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	got = append(got, seqs(r.drain())...)
	if len(got) != n {
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	// Every reordered frame swapped with its next neighbour, across
	// batches too.
	for i := 0; i < n; i++ {
		if got[i] == i {
			continue
		}
		if i+1 >= n || got[i] != i+1 || got[i+1] != i {
			t.Fatalf("position %d holds %d: not a swap of neighbours (%v)", i, got[i], got[max(0, i-2):min(n, i+3)])
		}
		i++
	}
	s := r.check()
	want := p / (1 + p) // one frame held at a time
	if rate := float64(s.Reordered) / n; rate < want*0.9 || rate > want*1.1 {
		t.Fatalf("reordered %.4f of frames, want about %.4f", rate, want)
	}
	if d := displaced(got); uint64(d) != s.Reordered {
		t.Fatalf("%d frames displaced, Reordered %d", d, s.Reordered)
	}
}

func TestReorderDelay(t *testing.T) {
	const n, p = 20000, 0.05
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Reorder: p, ReorderDelay: 10 * time.Microsecond}, Seed: 3}, memlink.Config{})
	var got []int
	for i := range n {
		r.now = time.Duration(i) * time.Microsecond
		r.send(frame(i))
		got = append(got, seqs(r.drain())...)
	}
	r.now += 10 * time.Microsecond
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	got = append(got, seqs(r.drain())...)
	if len(got) != n {
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	s := r.check()
	if rate := float64(s.Reordered) / n; rate < p*0.85 || rate > p*1.15 {
		t.Fatalf("reordered %.4f of frames, want about %.4f", rate, p)
	}
	// Frames held at most 10 µs at one per µs: a reordered frame is passed
	// by 0 to 10 others, so most reordered frames show up displaced.
	if d := displaced(got); d < int(s.Reordered)*8/10 || d > int(s.Reordered) {
		t.Fatalf("%d frames displaced of %d reordered", d, s.Reordered)
	}
	if s.Delayed != 0 {
		t.Fatalf("Delayed %d without Delay", s.Delayed)
	}
}

var hostile = faulty.Faults{Loss: 0.05, Duplicate: 0.05, Reorder: 0.1, Corrupt: 0.05, Delay: 3 * time.Microsecond, ReorderDelay: 20 * time.Microsecond}

// run drives a rig through a fixed pattern of batches and clock steps and
// returns what arrived.
func run(t *testing.T, f faulty.Faults, seed uint64, mcfg memlink.Config) ([][]byte, faulty.Stats) {
	r := newRig(t, faulty.Config{Faults: f, Seed: seed}, mcfg)
	pat := rand.New(rand.NewPCG(99, 1))
	var got [][]byte
	next := 0
	var pending [][]byte
	for step := 0; step < 3000; step++ {
		for len(pending) < 1+pat.IntN(20) {
			pending = append(pending, frame(next))
			next++
		}
		n, err := r.w.Send(pending)
		if err != nil {
			t.Fatal(err)
		}
		pending = pending[n:]
		r.check()
		r.now += time.Duration(pat.IntN(3000)) * time.Nanosecond
		if pat.IntN(4) == 0 {
			if _, err := r.w.Recv(r.bufs[:1], r.sizes[:1]); err != nil {
				t.Fatal(err)
			}
		}
		if pat.IntN(3) > 0 {
			got = append(got, r.drain()...)
		}
		r.check()
	}
	for range 100 {
		r.now += 10 * time.Microsecond
		if err := r.w.Flush(); err != nil {
			t.Fatal(err)
		}
		got = append(got, r.drain()...)
	}
	s := r.check()
	if s.Held != 0 {
		t.Fatalf("%d frames still held", s.Held)
	}
	if want := uint64(next - len(pending)); s.Sent != want {
		t.Fatalf("Sent %d, Send reported %d taken", s.Sent, want)
	}
	return got, s
}

func TestDeterminism(t *testing.T) {
	a, sa := run(t, hostile, 1, memlink.Config{})
	b, sb := run(t, hostile, 1, memlink.Config{})
	if sa != sb || !slices.EqualFunc(a, b, bytes.Equal) {
		t.Fatalf("same seed, different runs: %+v vs %+v", sa, sb)
	}
	c, sc := run(t, hostile, 2, memlink.Config{})
	if sa == sc || slices.EqualFunc(a, c, bytes.Equal) {
		t.Fatal("different seeds, same run")
	}
	if sa.Lost == 0 || sa.Duplicated == 0 || sa.Reordered == 0 || sa.Corrupted == 0 || sa.Delayed == 0 {
		t.Fatalf("a fault never happened: %+v", sa)
	}
}

// TestBackpressure runs the faults over an inner link that refuses frames
// when 8 are queued: Send must report exactly the frames it took, so that
// with no loss each frame arrives once or, duplicated, twice.
func TestBackpressure(t *testing.T) {
	for _, f := range []faulty.Faults{
		{Duplicate: 0.3, Reorder: 0.3},
		{Duplicate: 0.3, Reorder: 0.3, Corrupt: 0.2},
		{Duplicate: 0.3, Reorder: 0.2, ReorderDelay: 5 * time.Microsecond},
		{Duplicate: 0.2, Reorder: 0.2, Delay: 2 * time.Microsecond},
	} {
		t.Run(f.String(), func(t *testing.T) {
			got, s := run(t, f, 5, memlink.Config{Capacity: 8, Backpressure: true})
			if uint64(len(got)) != s.Sent+s.Duplicated || uint64(len(got)) != s.Delivered {
				t.Fatalf("%d frames arrived; stats %+v", len(got), s)
			}
			if f.Corrupt > 0 {
				return // the sequence numbers may be corrupted too
			}
			count := map[int]int{}
			for _, g := range got {
				count[seqOf(g)]++
			}
			if len(count) != int(s.Sent) {
				t.Fatalf("%d distinct frames arrived, %d sent", len(count), s.Sent)
			}
			dups := 0
			for seq, c := range count {
				if c < 1 || c > 2 {
					t.Fatalf("frame %d arrived %d times", seq, c)
				}
				dups += c - 1
			}
			if uint64(dups) != s.Duplicated || uint64(len(got)) != s.Delivered {
				t.Fatalf("%d duplicates and %d frames arrived; stats %+v", dups, len(got), s)
			}
			for _, g := range got {
				if !bytes.Equal(g, frame(seqOf(g))) {
					t.Fatalf("frame %d altered", seqOf(g))
				}
			}
		})
	}
}

func TestPartialSendCounts(t *testing.T) {
	// The inner link takes 3 frames; Send must take exactly those.
	r := newRig(t, faulty.Config{}, memlink.Config{Capacity: 3, Backpressure: true})
	batch := [][]byte{frame(0), frame(1), frame(2), frame(3), frame(4)}
	n, err := r.w.Send(batch)
	if err != nil || n != 3 {
		t.Fatalf("Send = %d, %v; want 3", n, err)
	}
	if s := r.check(); s.Sent != 3 {
		t.Fatalf("stats %+v", s)
	}
	if got := seqs(r.drain()); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("got %v", got)
	}
}

func TestDelayedBackpressure(t *testing.T) {
	// Held frames the inner link refuses stay held, and Send takes
	// nothing while they wait, so that they keep their place.
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Delay: time.Microsecond}}, memlink.Config{Capacity: 2, Backpressure: true})
	r.send(frame(0), frame(1), frame(2), frame(3))
	r.now = time.Microsecond
	if n, err := r.w.Send([][]byte{frame(4)}); n != 0 || err != nil {
		t.Fatalf("Send = %d, %v while due frames are refused", n, err)
	}
	if s := r.check(); s.Held != 2 {
		t.Fatalf("stats %+v", s)
	}
	var got []int
	for range 3 {
		got = append(got, seqs(r.drain())...)
		if err := r.w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	r.send(frame(4))
	r.now += time.Microsecond
	if _, err := r.w.Recv(r.bufs, r.sizes); err != nil {
		t.Fatal(err)
	}
	got = append(got, seqs(r.drain())...)
	if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("got %v", got)
	}
}

func TestOverflow(t *testing.T) {
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Delay: 10 * time.Microsecond}, Capacity: 4}, memlink.Config{})
	for i := range 10 {
		r.send(frame(i))
	}
	if got := seqs(r.drain()); !slices.Equal(got, []int{4, 5, 6, 7, 8, 9}) {
		t.Fatalf("passed through %v", got)
	}
	s := r.check()
	if s.Overflow != 6 || s.Held != 4 || s.Delayed != 4 {
		t.Fatalf("stats %+v", s)
	}
	r.now += 10 * time.Microsecond
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := seqs(r.drain()); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("released %v", got)
	}
}

func TestCorruptFlipsOneBit(t *testing.T) {
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Corrupt: 1}}, memlink.Config{})
	f := frame(1)
	orig := slices.Clone(f)
	r.send(f)
	if !bytes.Equal(f, orig) {
		t.Fatal("caller's frame altered")
	}
	got := r.drain()
	if len(got) != 1 || len(got[0]) != len(f) {
		t.Fatalf("got %d frames", len(got))
	}
	bits := 0
	for i := range f {
		for x := got[0][i] ^ f[i]; x != 0; x &= x - 1 {
			bits++
		}
	}
	if bits != 1 || r.check().Corrupted != 1 {
		t.Fatalf("%d bits flipped", bits)
	}
}

func TestSendCopiesHeldFrames(t *testing.T) {
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Delay: time.Microsecond}}, memlink.Config{})
	f := frame(3)
	r.send(f)
	clear(f)
	r.now = time.Microsecond
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := r.drain(); len(got) != 1 || !bytes.Equal(got[0], frame(3)) {
		t.Fatal("held frame changed with the caller's buffer")
	}
}

func TestFrameTooLarge(t *testing.T) {
	r := newRig(t, faulty.Config{Faults: faulty.Faults{Delay: time.Microsecond}}, memlink.Config{MaxFrame: 1000})
	n, err := r.w.Send([][]byte{make([]byte, 1000), make([]byte, 1001), make([]byte, 10)})
	if n != 1 || !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if r.w.MaxFrame() != 1000 {
		t.Fatalf("MaxFrame %d", r.w.MaxFrame())
	}
}

func TestWrapErrors(t *testing.T) {
	a, _ := memlink.NewPair(memlink.Config{})
	for _, c := range []faulty.Config{
		{Faults: faulty.Faults{Loss: 1.5}},
		{Faults: faulty.Faults{Reorder: -0.1}},
		{Faults: faulty.Faults{Delay: -1}},
		{Capacity: -1},
	} {
		if _, err := faulty.Wrap(a, c); err == nil {
			t.Errorf("Wrap(%+v) succeeded", c)
		}
	}
	if _, err := faulty.Wrap(nil, faulty.Config{}); err == nil {
		t.Error("Wrap(nil) succeeded")
	}
}

func TestWaitWakesForHeldFrames(t *testing.T) {
	a, _ := memlink.NewPair(memlink.Config{})
	w, err := faulty.Wrap(a, faulty.Config{Faults: faulty.Faults{Delay: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Send([][]byte{frame(0)}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Wait(time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Wait slept %v with a frame due in 2 ms", d)
	}
}

func TestZeroAllocs(t *testing.T) {
	r := newRig(t, faulty.Config{Faults: hostile, Seed: 4, Capacity: 256}, memlink.Config{Capacity: 64, Backpressure: true})
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = frame(i)
	}
	step := func() {
		if _, err := r.w.Send(batch); err != nil {
			t.Fatal(err)
		}
		r.now += 2 * time.Microsecond
		if _, err := r.w.Recv(r.bufs, r.sizes); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := r.b.Recv(r.bufs, r.sizes)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
	}
	for range 2000 {
		step()
	}
	if got := testing.AllocsPerRun(1000, step); got != 0 {
		t.Fatalf("%v allocations per Send and Recv", got)
	}
}
