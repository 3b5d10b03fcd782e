package link

// Batch is a reusable set of transmit frames: the transport fills frames in
// place, the engine hands the batch to a Link in one call. It allocates only
// in NewBatch.
type Batch struct {
	bufs   [][]byte // full-size buffers, one per slot
	frames [][]byte // filled frames: bufs[i][:len]
}

// NewBatch returns a batch of size frames of maxFrame bytes each.
func NewBatch(size, maxFrame int) *Batch {
	b := &Batch{bufs: make([][]byte, size), frames: make([][]byte, 0, size)}
	mem := make([]byte, size*maxFrame)
	for i := range b.bufs {
		b.bufs[i] = mem[i*maxFrame : (i+1)*maxFrame : (i+1)*maxFrame]
	}
	return b
}

// Next returns the next free frame buffer at full length, or nil when the
// batch is full. The frame becomes part of the batch only on Commit.
func (b *Batch) Next() []byte {
	if len(b.frames) == len(b.bufs) {
		return nil
	}
	return b.bufs[len(b.frames)]
}

// Commit adds the buffer returned by the last Next, filled with n bytes.
func (b *Batch) Commit(n int) {
	i := len(b.frames)
	b.frames = append(b.frames, b.bufs[i][:n])
}

// Room is the number of frames that still fit.
func (b *Batch) Room() int { return len(b.bufs) - len(b.frames) }

// Len is the number of committed frames.
func (b *Batch) Len() int { return len(b.frames) }

// Frames are the committed frames.
func (b *Batch) Frames() [][]byte { return b.frames }

// Flush sends the committed frames over l. Frames the link did not take
// stay in the batch, moved to its front, for the next Flush: the link's
// backpressure becomes the transport's, and nothing is dropped here.
func (b *Batch) Flush(l Link) (int, error) {
	if len(b.frames) == 0 {
		return 0, nil
	}
	n, err := l.Send(b.frames)
	left := len(b.frames) - n
	for i := 0; i < left; i++ {
		// Swap buffers so every slot keeps a distinct full-size buffer.
		j := n + i
		b.bufs[i], b.bufs[j] = b.bufs[j], b.bufs[i]
		b.frames[i] = b.bufs[i][:len(b.frames[j])]
	}
	b.frames = b.frames[:left]
	return n, err
}
