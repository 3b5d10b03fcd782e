package link

// Batch is a reusable set of transmit frames: the transport fills frames in
// place, the engine hands the batch to a Link in one call. It allocates only
// when it is made.
//
// A batch made by NewBatchFor over a TxFramer hands out the link's own
// transmit buffers instead of buffers of its own: the frames are built
// where the device sends them from, and Flush only publishes them.
type Batch struct {
	bufs   [][]byte // full-size buffers, one per slot (nil over a framer)
	frames [][]byte // filled frames: bufs[i][:len], or the framer's buffers
	framer TxFramer
	size   int      // slots, over a framer
	expect Expecter // the link, when it takes expectations
	gather Gatherer // the link, when it gathers payloads (framer only)
}

// NewBatchFor returns a batch of size frames for sending on l: built in
// l's transmit buffers when l is a TxFramer whose buffers hold its largest
// frame, in buffers of the batch's own otherwise.
func NewBatchFor(l Link, size int) *Batch {
	var b *Batch
	if f, ok := l.(TxFramer); ok && f.TxBufSize() >= l.MaxFrame() {
		b = &Batch{framer: f, size: size, frames: make([][]byte, 0, size)}
	} else {
		b = NewBatch(size, l.MaxFrame())
	}
	b.expect, _ = l.(Expecter)
	if b.framer != nil {
		b.gather, _ = l.(Gatherer)
	}
	return b
}

// Gathers reports whether the batch's link can gather payloads.
func (b *Batch) Gathers() bool { return b.gather != nil }

// Gather announces that the frame built in the buffer of the last Next
// carries payload at byte at by reference (link.Gatherer), and reports
// whether the link took it: if not, the caller copies the payload in.
// Commit ends it.
func (b *Batch) Gather(at int, payload []byte) bool {
	return b.gather != nil && b.gather.TxGather(at, payload)
}

// Expects reports whether the batch's link takes expectations: whether
// Expect does anything.
func (b *Batch) Expects() bool { return b.expect != nil }

// Expect hands e to the batch's link if it is an Expecter. Call it before
// committing the frame that makes the peer send the data (a READ
// request), so that the link's notice to the peer goes first.
func (b *Batch) Expect(e *Expectation) {
	if b.expect != nil {
		b.expect.Expect(e)
	}
}

// InPlace reports whether the batch builds frames in the link's buffers.
func (b *Batch) InPlace() bool { return b.framer != nil }

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
	if b.framer != nil {
		if len(b.frames) == b.size {
			return nil
		}
		return b.framer.TxBuf()
	}
	if len(b.frames) == len(b.bufs) {
		return nil
	}
	return b.bufs[len(b.frames)]
}

// Commit adds the buffer returned by the last Next, filled with n bytes.
func (b *Batch) Commit(n int) {
	if b.framer != nil {
		f := b.framer.TxBuf()[:n] // the same buffer Next returned
		b.framer.TxSubmit(n)
		b.frames = append(b.frames, f)
		return
	}
	i := len(b.frames)
	b.frames = append(b.frames, b.bufs[i][:n])
}

// Room is the number of frames that still fit: Next returns a buffer
// while it is positive.
func (b *Batch) Room() int {
	if b.framer != nil {
		return min(b.size-len(b.frames), b.framer.TxRoom())
	}
	return len(b.bufs) - len(b.frames)
}

// Len is the number of committed frames.
func (b *Batch) Len() int { return len(b.frames) }

// Frames are the committed frames.
func (b *Batch) Frames() [][]byte { return b.frames }

// Flush sends the committed frames over l. Frames the link did not take
// stay in the batch, moved to its front, for the next Flush: the link's
// backpressure becomes the transport's, and nothing is dropped here.
//
// Over a framer the frames are already queued in the link: Flush hands
// them to the device and empties the batch, and l is not used.
// It flushes the link even when the batch is empty, so that frames the
// device could not take on the last Flush go out without waiting for new
// ones.
func (b *Batch) Flush(l Link) (int, error) {
	if b.framer != nil {
		n := len(b.frames)
		clear(b.frames) // the views belong to the device now
		b.frames = b.frames[:0]
		return n, b.framer.Flush()
	}
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
