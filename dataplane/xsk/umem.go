package xsk

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// umem is the packet memory registered with the kernel, shared by every
// socket opened with Config.Shared pointing (transitively) at its first
// socket. Chunks are handed out once, at Open, to the rings of the socket
// that claims them; a closed socket's chunks are not reused, so a UMEM
// shared by sockets that come and go should be sized for all of them.
type umem struct {
	mu        sync.Mutex // Open and Close only; never on the hot path
	mem       []byte
	frameSize uint64
	frames    uint64
	next      uint64               // first chunk not yet claimed
	refs      int                  // sockets using mem
	queues    map[qkey]*queueRings // fill/completion rings per bound queue
}

type qkey struct{ ifindex, queue int }

// queueRings are the fill and completion rings of one (device, queue)
// within a UMEM, with the chunks free for transmit. Sockets that share a
// UMEM on the same queue share these, which is why they must be driven by
// one goroutine.
type queueRings struct {
	key   qkey
	fill  *addrRing
	comp  *compRing
	free  []uint64 // free tx chunks: a stack whose capacity is every chunk ever claimed for tx
	stash []uint64 // rx chunks waiting for room in the fill ring; capacity: every rx chunk
	spare int      // rx chunks beyond the fill ring's size (Config.Spare)
	out   int      // rx chunks Keep or Borrow lent the caller
	refs  int
}

func newUmem(frameSize, frames int) (*umem, error) {
	mem, err := unix.Mmap(-1, 0, frameSize*frames, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("allocating umem of %d×%d bytes: %w", frames, frameSize, err)
	}
	return &umem{mem: mem, frameSize: uint64(frameSize), frames: uint64(frames), queues: map[qkey]*queueRings{}}, nil
}

// claim reserves n chunks and returns the address of the first; the
// chunks are contiguous. Called with mu held.
func (u *umem) claim(n int) (uint64, error) {
	if u.next+uint64(n) > u.frames {
		return 0, fmt.Errorf("umem exhausted: need %d more chunks, %d of %d left (raise Config.Frames of the first socket)", n, u.frames-u.next, u.frames)
	}
	first := u.next * u.frameSize
	u.next += uint64(n)
	return first, nil
}

// put drops one reference; the memory goes with the last. Called with mu
// held.
func (u *umem) put() {
	u.refs--
	if u.refs == 0 && u.mem != nil {
		_ = unix.Munmap(u.mem)
		u.mem = nil
	}
}

func (q *queueRings) put() {
	q.refs--
	if q.refs == 0 {
		q.fill.unmap()
		q.comp.unmap()
	}
}
