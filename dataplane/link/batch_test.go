package link

import (
	"bytes"
	"testing"
)

// framer is a TxFramer over a fixed set of buffers, recording what was
// submitted and flushed.
type framer struct {
	bufs      [][]byte
	have      bool
	cur       int
	submitted [][]byte
	flushes   int
	room      int
}

func (f *framer) Send(frames [][]byte) (int, error) { panic("a framer batch must not copy") }
func (f *framer) Recv([][]byte, []int) (int, error) { return 0, nil }
func (f *framer) MaxFrame() int                     { return 100 }
func (f *framer) TxBufSize() int                    { return len(f.bufs[0]) }
func (f *framer) TxRoom() int                       { return f.room }
func (f *framer) Flush() error                      { f.flushes++; return nil }
func (f *framer) TxBuf() []byte {
	if f.room == 0 {
		return nil
	}
	if !f.have {
		f.have = true
		f.cur = len(f.submitted)
	}
	return f.bufs[f.cur]
}
func (f *framer) TxSubmit(n int) {
	f.have = false
	f.submitted = append(f.submitted, f.bufs[f.cur][:n])
	f.room--
}

func TestBatchInPlace(t *testing.T) {
	f := &framer{room: 3}
	for range 4 {
		f.bufs = append(f.bufs, make([]byte, 128))
	}
	b := NewBatchFor(f, 8)
	if !b.InPlace() {
		t.Fatal("a batch over a framer whose buffers fit should build in place")
	}
	for i := range 3 {
		if b.Room() != 3-i {
			t.Fatalf("room %d after %d frames, want %d", b.Room(), i, 3-i)
		}
		buf := b.Next()
		if &buf[0] != &f.bufs[i][0] {
			t.Fatalf("frame %d not built in the link's buffer", i)
		}
		if again := b.Next(); &again[0] != &buf[0] {
			t.Fatal("Next before Commit must return the same buffer")
		}
		buf[0] = byte(i + 1)
		b.Commit(10 + i)
	}
	if b.Room() != 0 || b.Next() != nil {
		t.Fatal("room left after the link ran out of buffers")
	}
	if b.Len() != 3 || len(f.submitted) != 3 || len(f.submitted[2]) != 12 || f.submitted[2][0] != 3 {
		t.Fatalf("len %d, submitted %q", b.Len(), f.submitted)
	}
	n, err := b.Flush(nil)
	if n != 3 || err != nil || b.Len() != 0 || f.flushes != 1 {
		t.Fatalf("flush %d %v, len %d, flushes %d", n, err, b.Len(), f.flushes)
	}
	// An empty batch still flushes the link: what the device could not
	// take last time goes out.
	if n, _ := b.Flush(nil); n != 0 || f.flushes != 2 {
		t.Fatalf("empty flush: %d, flushes %d", n, f.flushes)
	}
}

func TestBatchCopiesWhenBuffersTooSmall(t *testing.T) {
	f := &framer{room: 1, bufs: [][]byte{make([]byte, 64)}} // MaxFrame 100
	b := NewBatchFor(f, 4)
	if b.InPlace() {
		t.Fatal("in place with buffers smaller than the largest frame")
	}
	buf := b.Next()
	if len(buf) != 100 {
		t.Fatalf("own buffer of %d bytes", len(buf))
	}
	copy(buf, bytes.Repeat([]byte{1}, 100))
	b.Commit(100)
	if b.Len() != 1 {
		t.Fatal("not committed")
	}
}
