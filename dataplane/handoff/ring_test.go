package handoff

import (
	"encoding/binary"
	"sync"
	"testing"
)

func frame(seq uint32, n int) []byte {
	f := make([]byte, n)
	binary.BigEndian.PutUint32(f, seq)
	for i := 4; i < n; i++ {
		f[i] = byte(seq) + byte(i)
	}
	return f
}

func TestOrderAndPublish(t *testing.T) {
	r := New(4, 64)
	views := make([][]byte, 8)
	for i := range 3 {
		if !r.Push(frame(uint32(i), 10+i)) {
			t.Fatalf("push %d refused", i)
		}
	}
	if n := r.Peek(views); n != 0 {
		t.Fatalf("peek before publish: %d frames", n)
	}
	if !r.Publish() || r.Publish() {
		t.Fatal("Publish should report new frames once")
	}
	n := r.Peek(views)
	if n != 3 || r.Len() != 3 {
		t.Fatalf("peek %d len %d, want 3", n, r.Len())
	}
	for i, v := range views[:n] {
		if len(v) != 10+i || binary.BigEndian.Uint32(v) != uint32(i) {
			t.Fatalf("frame %d: %x", i, v)
		}
	}
	// Peeking again without a release returns the same frames.
	if n2 := r.Peek(views); n2 != 3 || binary.BigEndian.Uint32(views[0]) != 0 {
		t.Fatalf("second peek: %d", n2)
	}
	r.Release()
	if r.Len() != 0 || r.Peek(views) != 0 {
		t.Fatal("frames left after release")
	}
}

func TestFullAndOversizeDrop(t *testing.T) {
	r := New(2, 16)
	if !r.Push(frame(1, 16)) || !r.Push(frame(2, 16)) {
		t.Fatal("push into an empty ring refused")
	}
	if r.Push(frame(3, 16)) {
		t.Fatal("push into a full ring taken")
	}
	r.Publish()
	views := make([][]byte, 1)
	r.Peek(views)
	r.Release()
	if r.Push(frame(4, 17)) {
		t.Fatal("oversize frame taken")
	}
	if !r.Push(frame(5, 16)) {
		t.Fatal("push after release refused")
	}
	if r.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", r.Dropped())
	}
	r.Publish()
	n := r.Peek(make([][]byte, 4))
	if n != 2 {
		t.Fatalf("%d frames, want 2 (2 then 5)", n)
	}
}

// TestConcurrent runs a producer and a consumer goroutine (under -race in
// make test): every frame arrives once, in order, intact, or is counted
// as dropped.
func TestConcurrent(t *testing.T) {
	const total = 200000
	r := New(64, 128)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f := make([]byte, 128)
		for seq := uint32(0); seq < total; seq++ {
			n := 8 + int(seq%120)
			binary.BigEndian.PutUint32(f, seq)
			binary.BigEndian.PutUint32(f[4:], uint32(n))
			for i := 8; i < n; i++ {
				f[i] = byte(seq) ^ byte(i)
			}
			r.Push(f[:n])
			if seq%16 == 15 {
				r.Publish()
			}
		}
		r.Publish()
	}()
	views := make([][]byte, 32)
	var got uint64
	last := int64(-1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	finished := false
	for {
		n := r.Peek(views)
		for _, v := range views[:n] {
			seq := binary.BigEndian.Uint32(v)
			if int64(seq) <= last {
				t.Fatalf("frame %d after %d", seq, last)
			}
			last = int64(seq)
			if int(binary.BigEndian.Uint32(v[4:])) != len(v) {
				t.Fatalf("frame %d: length %d, header says %d", seq, len(v), binary.BigEndian.Uint32(v[4:]))
			}
			for i := 8; i < len(v); i++ {
				if v[i] != byte(seq)^byte(i) {
					t.Fatalf("frame %d corrupted at %d", seq, i)
				}
			}
			got++
		}
		r.Release()
		if n == 0 {
			if finished {
				break
			}
			select {
			case <-done:
				finished = true // one more pass for what was published last
			default:
			}
		}
	}
	if got+r.Dropped() != total {
		t.Fatalf("received %d + dropped %d != %d sent", got, r.Dropped(), total)
	}
	t.Logf("received %d, dropped %d", got, r.Dropped())
}

func TestNoAllocs(t *testing.T) {
	r := New(64, 256)
	f := frame(7, 200)
	views := make([][]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		for range 32 {
			r.Push(f)
		}
		r.Publish()
		r.Peek(views)
		r.Release()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}

func BenchmarkPushPeek(b *testing.B) {
	r := New(256, 2048)
	f := frame(1, 1024)
	views := make([][]byte, 64)
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	for i := 0; i < b.N; i += 64 {
		for range 64 {
			r.Push(f)
		}
		r.Publish()
		r.Peek(views)
		r.Release()
	}
}

// TestPushPlaced: a frame whose payload its link placed crosses the ring
// as its headers and trailer, with the payload's place beside it; the
// consumer gets that place back, a frame pushed whole gets none, and a
// slot reused forgets the place.
func TestPushPlaced(t *testing.T) {
	r := New(2, 64)
	payload := []byte("PAYLOAD!")
	f := frame(1, 30)
	if !r.PushPlaced(f, 10, payload) || !r.Push(frame(2, 20)) {
		t.Fatal("refused")
	}
	if r.PushPlaced(f, 25, payload) || r.PushPlaced(f, -1, payload) {
		t.Fatal("a payload past the frame taken")
	}
	r.Publish()
	views := make([][]byte, 4)
	if n := r.Peek(views); n != 2 {
		t.Fatalf("%d frames", n)
	}
	v := views[0]
	if len(v) != 30 || string(v[:10]) != string(f[:10]) || string(v[18:]) != string(f[18:]) {
		t.Fatalf("frame %x, want the headers and trailer of %x", v, f)
	}
	if p := r.Placed(0); &p[0] != &payload[0] || len(p) != len(payload) {
		t.Fatal("the placed payload did not come with the frame")
	}
	if r.Placed(1) != nil || r.Placed(2) != nil {
		t.Fatal("a frame pushed whole has a placed payload")
	}
	r.Release()
	if !r.Push(frame(3, 20)) {
		t.Fatal("refused after release")
	}
	r.Publish()
	if n := r.Peek(views); n != 1 || r.Placed(0) != nil {
		t.Fatal("a reused slot kept the place of an earlier frame")
	}
}
