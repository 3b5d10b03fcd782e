package xsk

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
)

var _ link.Link = (*Socket)(nil)

// MaxFrame is the largest frame Send takes and Recv delivers: a chunk less
// the kernel's rx headroom, or MaxFrameMultiBuffer with MultiBuffer.
func (s *Socket) MaxFrame() int { return s.maxFrame }

// Recv copies waiting frames into bufs and never blocks. A frame longer than
// its buffer is dropped and reported, wrapped in link.ErrFrameTooLarge, after
// the frames before it.
func (s *Socket) Recv(bufs [][]byte, sizes []int) (int, error) {
	s.ReleaseRx()
	want := min(len(bufs), len(sizes))
	if want == 0 {
		return 0, nil
	}
	avail := s.rx.avail(s.rx.size)
	if avail == 0 {
		s.refill()
		return 0, nil
	}
	var (
		n     int
		i     uint32 // descriptors consumed
		bytes int
		err   error
	)
	for n < want && i < avail {
		d := s.rx.at(i)
		buf := bufs[n][:cap(bufs[n])]
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			// The common case: one descriptor, one frame.
			i++
			if int(d.Len) > len(buf) {
				s.st.rxTooLarge.Add(1)
				err = fmt.Errorf("xsk: %d-byte frame, %d-byte buffer: %w", d.Len, len(buf), link.ErrFrameTooLarge)
				break
			}
			sizes[n] = copy(buf, s.mem[d.Addr:d.Addr+uint64(d.Len)])
			bytes += sizes[n]
			n++
			continue
		}
		end, ok := s.frameEnd(i, avail)
		if !ok {
			break // the rest of the frame is not published yet
		}
		total, fits := 0, true
		for j := i; j < end; j++ {
			d := s.rx.at(j)
			if total+int(d.Len) > len(buf) {
				fits = false
				break
			}
			total += copy(buf[total:], s.mem[d.Addr:d.Addr+uint64(d.Len)])
		}
		i = end
		if !fits {
			s.st.rxTooLarge.Add(1)
			err = fmt.Errorf("xsk: multi-buffer frame larger than its %d-byte buffer: %w", len(buf), link.ErrFrameTooLarge)
			break
		}
		sizes[n] = total
		bytes += total
		n++
	}
	s.recycle(i)
	s.st.rxFrames.Add(uint64(n))
	s.st.rxBytes.Add(uint64(bytes))
	return n, err
}

// frameEnd returns one past the last descriptor of the multi-buffer frame
// starting at descriptor i, and false when that frame is not complete
// within the avail descriptors seen.
func (s *Socket) frameEnd(i, avail uint32) (uint32, bool) {
	for j := i; j < avail; j++ {
		if s.rx.at(j).Options&unix.XDP_PKT_CONTD == 0 {
			return j + 1, true
		}
	}
	return 0, false
}

// recycle gives the chunks of the first n rx descriptors back to the fill
// ring and the descriptors back to the kernel.
//
// The fill ring holds as many entries as there are rx chunks, yet it can
// look full while we hold chunks: the kernel takes fill entries in batches
// and publishes its consumer index only when its cached batch runs out.
// Chunks that do not fit wait in the stash, which has room for every rx
// chunk, and go first on the next recycle or refill.
func (s *Socket) recycle(n uint32) {
	q := s.q
	for j := range n {
		if s.nkept > 0 && s.kept[j] {
			s.kept[j] = false
			s.nkept--
			continue
		}
		q.stash = append(q.stash, s.rx.at(j).Addr&s.chunkMask)
	}
	s.rx.release(n)
	s.refill()
}

// refill moves stashed chunks to the fill ring as far as it has room.
func (s *Socket) refill() {
	q := s.q
	k := uint32(len(q.stash))
	if k == 0 {
		return
	}
	k = min(k, q.fill.free(k))
	if k == 0 {
		return
	}
	rest := uint32(len(q.stash)) - k
	for _, addr := range q.stash[rest:] {
		q.fill.put(addr)
	}
	q.stash = q.stash[:rest]
	q.fill.submit()
	if s.wakeup && q.fill.needWakeup() {
		_ = wakeRx(s.fd)
	}
}

// RecvZC fills views with frames still in the UMEM, without copying, and
// returns how many. The views stay valid until ReleaseRx, which the next
// RecvZC or Recv calls implicitly. A multi-buffer frame is copied into one of
// a few internal buffers, valid just as long.
func (s *Socket) RecvZC(views [][]byte) int {
	s.ReleaseRx()
	avail := s.rx.avail(s.rx.size)
	if avail == 0 {
		// An empty poll, most of a polling loop's: no counter touched.
		s.refill()
		return 0
	}
	if len(s.zcEnds) < len(views) {
		s.zcEnds = make([]uint32, len(views)) // once per views' size
	}
	var (
		n     int
		i     uint32
		bytes int
		mb    int
	)
	for n < len(views) && i < avail {
		d := s.rx.at(i)
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			i++
			views[n] = s.mem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
			bytes += int(d.Len)
			s.zcEnds[n] = i
			n++
			continue
		}
		end, ok := s.frameEnd(i, avail)
		if !ok || mb == len(s.mbBufs) {
			break
		}
		buf := s.mbBufs[mb]
		total := 0
		for j := i; j < end; j++ {
			d := s.rx.at(j)
			total += copy(buf[total:], s.mem[d.Addr:d.Addr+uint64(d.Len)])
		}
		i = end
		mb++
		views[n] = buf[:total:total]
		bytes += total
		s.zcEnds[n] = i
		n++
	}
	s.zcHeld, s.zcN = i, n
	s.st.rxFrames.Add(uint64(n))
	s.st.rxBytes.Add(uint64(bytes))
	return n
}

// ReleaseRx gives the chunks of the last RecvZC back to the kernel, but
// those Keep took; their views must not be used afterwards.
func (s *Socket) ReleaseRx() {
	if s.zcHeld != 0 {
		n := s.zcHeld
		s.zcHeld, s.zcN = 0, 0
		s.recycle(n)
	}
}

// A Chunk is a piece of a received frame that Keep took out of the
// socket's recycling: its place in the UMEM and its length.
type Chunk struct {
	Addr uint64
	Len  uint32
}

// Keep takes frame i of the last RecvZC out of the release that gives its
// chunks back to the kernel, and appends them to dst (one, or several for
// a multi-buffer frame): they stay the caller's, readable through View,
// until it gives them back with Return. A spare chunk takes each one's
// place in the fill ring; keeping more than Config.Spare at once leaves
// the kernel fewer chunks to receive into. After ReleaseRx, Keep takes
// nothing.
func (s *Socket) Keep(i int, dst []Chunk) []Chunk {
	if i < 0 || i >= s.zcN {
		return dst
	}
	first := uint32(0)
	if i > 0 {
		first = s.zcEnds[i-1]
	}
	for j := first; j < s.zcEnds[i]; j++ {
		if s.kept[j] {
			continue
		}
		s.kept[j] = true
		s.nkept++
		s.q.out++
		d := s.rx.at(j)
		dst = append(dst, Chunk{Addr: d.Addr, Len: d.Len})
	}
	return dst
}

// Borrow copies frame f into rx chunks that wait in the socket for room
// in the fill ring (the spare ones, Config.Spare), as many as it needs,
// and appends them to dst, as Keep does with a received frame's: the
// caller's until Return. It reports false, having taken nothing, when
// too few wait.
func (s *Socket) Borrow(f []byte, dst []Chunk) ([]Chunk, bool) {
	n := (len(f) + int(s.frameSize) - 1) / int(s.frameSize)
	stash := s.q.stash
	if n == 0 || n > len(stash) {
		return dst, false
	}
	for _, base := range stash[len(stash)-n:] {
		k := copy(s.mem[base:base+s.frameSize], f)
		dst = append(dst, Chunk{Addr: base, Len: uint32(k)})
		f = f[k:]
	}
	s.q.stash = stash[:len(stash)-n]
	s.q.out += n
	return dst, true
}

// Spare is Config.Spare where the socket has a fill ring of its own,
// else 0: how many chunks Keep may hold without cost to the kernel.
func (s *Socket) Spare() int { return s.spare }

// View is the bytes of a chunk Keep took, valid until Return.
func (s *Socket) View(c Chunk) []byte {
	return s.mem[c.Addr : c.Addr+uint64(c.Len) : c.Addr+uint64(c.Len)]
}

// Return gives chunks that Keep took back to the kernel.
func (s *Socket) Return(cs []Chunk) {
	for _, c := range cs {
		s.q.stash = append(s.q.stash, c.Addr&s.chunkMask)
	}
	s.q.out -= len(cs)
	s.refill()
}

// starved reports whether rx chunks wait in the stash that the fill ring
// had no room for (it can look full while the kernel holds entries it has
// not published taking), beyond the spare chunks the caller does not
// hold, which wait there as a matter of course.
func (s *Socket) starved() bool { return len(s.q.stash) > s.q.spare-s.q.out }

// Send copies frames into free chunks and posts them on the tx ring, kicks
// the kernel and reclaims completed chunks. It returns how many frames it
// took: fewer than len(frames) when the tx ring or the free chunks ran out
// (backpressure: retry the rest later) or, with an error, when a frame is
// larger than MaxFrame or empty.
func (s *Socket) Send(frames [][]byte) (int, error) {
	if s.tx.free(uint32(len(frames))) < uint32(len(frames)) && s.tx.pending() > 0 {
		// Frames queued by TxSubmit, or left by a stopped device queue,
		// hold the ring: push them out first to make room.
		_ = s.Flush()
	}
	s.reclaim()
	var (
		n     int
		bytes int
		err   error
	)
	fs := int(s.frameSize)
	q := s.q
	for _, f := range frames {
		l := len(f)
		if l > s.maxFrame || l == 0 {
			err = fmt.Errorf("xsk: sending a %d-byte frame, max %d: %w", l, s.maxFrame, link.ErrFrameTooLarge)
			break
		}
		nd := 1
		if l > fs {
			nd = (l + fs - 1) / fs
		}
		if s.tx.free(uint32(nd)) < uint32(nd) || len(q.free) < nd {
			break
		}
		for off := 0; off < l; off += fs {
			addr := q.free[len(q.free)-1]
			q.free = q.free[:len(q.free)-1]
			c := copy(s.mem[addr:addr+s.frameSize], f[off:])
			var opts uint32
			if off+c < l {
				opts = unix.XDP_PKT_CONTD
			}
			s.tx.put(addr, c, opts)
		}
		bytes += l
		n++
	}
	s.st.txFrames.Add(uint64(n))
	s.st.txBytes.Add(uint64(bytes))
	if ferr := s.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	return n, err
}

// TxBuf returns a free chunk to build a frame in, or nil when no chunk or
// tx slot is free. Calling it again before TxSubmit returns the same chunk.
// Frames built here are single-buffer: at most len of the returned slice.
func (s *Socket) TxBuf() []byte {
	if !s.txHave {
		if len(s.q.free) == 0 {
			s.reclaim()
			if len(s.q.free) == 0 {
				return nil
			}
		}
		if s.tx.free(1) == 0 {
			return nil
		}
		q := s.q
		s.txChunk = q.free[len(q.free)-1]
		q.free = q.free[:len(q.free)-1]
		s.txHave = true
	}
	return s.mem[s.txChunk : s.txChunk+s.frameSize : s.txChunk+s.frameSize]
}

// TxRoom is how many frames TxBuf and TxSubmit can take now: free chunks
// (reclaiming completed ones when there are none) and free tx slots.
func (s *Socket) TxRoom() int {
	if len(s.q.free) == 0 {
		s.reclaim()
	}
	free := len(s.q.free)
	if s.txHave {
		free++
	}
	return min(free, int(s.tx.free(1)))
}

// TxBufSize is the length of the buffers TxBuf returns: a UMEM chunk
// (the rx headroom is not needed on transmit).
func (s *Socket) TxBufSize() int { return int(s.frameSize) }

// TxSubmit queues the frame built in the last TxBuf, n bytes long, for the
// next Flush (or Send). n ≤ 0 gives the chunk back unsent.
func (s *Socket) TxSubmit(n int) {
	if !s.txHave {
		return
	}
	s.txHave = false
	if n <= 0 || n > int(s.frameSize) || s.tx.free(1) == 0 {
		// The last case only if a Send between TxBuf and TxSubmit took the
		// slot TxBuf saw; the chunk goes back rather than leaking.
		s.q.free = append(s.q.free, s.txChunk)
		return
	}
	s.tx.put(s.txChunk, n, 0)
	s.st.txFrames.Add(1)
	s.st.txBytes.Add(uint64(n))
}

// Flush publishes the queued tx descriptors, kicks the kernel as often as it
// keeps making progress, and reclaims completions. Frames the device could
// not take yet (its queue stopped) stay on the tx ring for the next Flush;
// TxPending tells how many.
func (s *Socket) Flush() error {
	s.tx.submit()
	err := s.kickTx()
	s.reclaim()
	return err
}

// TxPending is the number of descriptors on the tx ring the kernel has not
// taken yet.
func (s *Socket) TxPending() int { return int(s.tx.pending()) }

// kickStallLimit bounds the sendto calls in a row that move nothing: a
// stopped device queue would otherwise spin us here.
const kickStallLimit = 2

func (s *Socket) kickTx() error {
	if s.tx.pending() == 0 {
		return nil
	}
	stalls := 0
	for {
		if s.wakeup && !s.tx.needWakeup() {
			// A zero-copy driver is polling the ring: no syscall needed.
			return nil
		}
		before := s.tx.consumer.Load()
		errno := kick(s.fd)
		s.st.kicks.Add(1)
		switch errno {
		case unix.EBUSY:
			s.st.txDropped.Add(1)
		case 0, unix.EAGAIN, unix.ENOBUFS:
			// EAGAIN: budget used up, completion ring full, or device
			// queue stopped. EBUSY: the device dropped a frame (it is
			// completed, so it looks sent, as on any lossy link). ENOBUFS:
			// no skb memory this time.
		default:
			// ENETDOWN, ENXIO: the device went away or down.
			return fmt.Errorf("xsk: kick: %w", errno)
		}
		s.reclaim()
		if s.zeroCopy || s.tx.pending() == 0 {
			// Zero-copy drivers send the rest from their NAPI poll.
			return nil
		}
		if s.tx.consumer.Load() == before {
			s.st.kickStalls.Add(1)
			if stalls++; stalls >= kickStallLimit {
				return nil
			}
		} else {
			stalls = 0
		}
	}
}

// reclaim moves completed tx chunks back to the free stack. The stack's
// capacity is every tx chunk, so the append never allocates.
func (s *Socket) reclaim() {
	c := s.q.comp
	n := c.avail(c.size)
	if n == 0 {
		return
	}
	for i := range n {
		s.q.free = append(s.q.free, c.at(i)&s.chunkMask)
	}
	c.release(n)
}

// stashWait bounds Wait while chunks wait for room in the fill ring.
const stashWait = time.Millisecond

// ErrTimeout is returned by Wait when the timeout passed with nothing
// received; it is os.ErrDeadlineExceeded.
var ErrTimeout = os.ErrDeadlineExceeded

// PrepareWait readies the socket for a poll(2) on its FD by a caller that
// waits on several descriptors at once (a device worker, which also waits
// for frames handed over by other workers): it reports whether frames are
// already waiting, and returns timeout, shortened while received chunks
// wait for room in the fill ring (see Wait).
func (s *Socket) PrepareWait(timeout time.Duration) (bool, time.Duration) {
	if s.rx.avail(1) > 0 {
		return true, timeout
	}
	if s.refill(); s.starved() && timeout > stashWait {
		timeout = stashWait
	}
	return false, timeout
}

// Wait blocks until the rx ring has frames, the timeout passes (ErrTimeout)
// or the socket is closed. It parks the goroutine in Go's netpoller, not
// the OS thread: the kernel signals readability when it publishes rx
// descriptors. The socket is in the netpoller only while Wait waits (see
// Socket), through a duplicate of its descriptor: a few more system calls
// a wait, on a path that waits anyway.
func (s *Socket) Wait(timeout time.Duration) error {
	s.waitMu.RLock()
	defer s.waitMu.RUnlock()
	if s.closing.Load() {
		return errClosed
	}
	if s.rx.avail(1) > 0 {
		return nil
	}
	if s.refill(); s.starved() && timeout > stashWait {
		// Chunks the fill ring had no room for: the kernel may run dry
		// and drop without waking us, so look again soon.
		timeout = stashWait
	}
	c, err := s.watch()
	if err != nil {
		return fmt.Errorf("xsk: wait: %w", err)
	}
	defer s.unwatch(c)
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("xsk: wait: %w", err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("xsk: wait: %w", err)
	}
	err = rc.Read(s.waitFn)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ErrTimeout
	case s.closing.Load():
		return errClosed
	}
	return fmt.Errorf("xsk: wait: %w", err)
}

// watch registers a duplicate of the socket's descriptor with the
// netpoller for one Wait; Close closes it to wake that Wait.
func (s *Socket) watch() (*socket.Conn, error) {
	fd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	c, err := socket.New(fd, "xsk")
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.closing.Load() {
		_ = c.Close()
		return nil, errClosed
	}
	if s.watching == nil {
		s.watching = map[*socket.Conn]struct{}{}
	}
	s.watching[c] = struct{}{}
	return c, nil
}

// unwatch takes the duplicate of a finished Wait out of the netpoller.
func (s *Socket) unwatch(c *socket.Conn) {
	s.watchMu.Lock()
	delete(s.watching, c)
	s.watchMu.Unlock()
	_ = c.Close()
}
