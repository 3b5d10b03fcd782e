package shmlink

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/internal/ppoll"
)

var (
	_ link.Link             = (*End)(nil)
	_ link.Waiter           = (*End)(nil)
	_ link.ZeroCopyReceiver = (*End)(nil)
	_ link.TxFramer         = (*End)(nil)
)

// one is what Fail writes to an End's own wake-up eventfd: 1 as a
// host-endian uint64.
var one = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// bell is what a doorbell writes to the peer's pipe: a byte.
var bell = [1]byte{1}

// Stats counts what an End did. Frames are counted sent when published.
type Stats struct {
	FramesSent, BytesSent          uint64
	FramesReceived, BytesReceived  uint64
	Wakeups                        uint64 // doorbells rung to wake the peer for frames
	RoomWakeups                    uint64 // doorbells rung to tell the peer of room
	ExpectationsSent               uint64 // expectations announced (application's end)
	ExpectationsReceived           uint64 // expectations taken (daemon's end)
	PlacedSent, PlacedReceived     uint64 // frames whose payload the daemon placed
	GatheredSent, GatheredReceived uint64 // frames whose payload the daemon gathers
	BadDescriptors                 uint64 // impossible indices or lengths the peer wrote
	TxFull                         uint64 // Send or TxBuf calls that found the ring full
}

// shared points at one ring's control words and slots in the mapping.
type shared struct {
	prod   *atomic.Uint32
	cons   *atomic.Uint32
	sleep  *atomic.Uint32 // the consumer's sleeping flag
	room   *atomic.Uint32 // the producer's waiting-for-room flag
	data   []byte         // the slots
	mask   uint32
	size   uint32 // slots
	slot   uint32 // slot size: the largest frame
	stride uint32 // bytes from one slot to the next
}

// mapRing makes the typed views of ring r. With word, it is the only
// unsafe code of the package; the layout puts every control word on an
// aligned 64-byte line and every slot on a 64-byte boundary, and the
// slices stay within the mapping.
func mapRing(mem []byte, l layout, r int) shared {
	ringBytes := uint64(l.slots) * l.stride
	return shared{
		prod:   word(mem, l.ctl[r]+ctlProd),
		cons:   word(mem, l.ctl[r]+ctlCons),
		sleep:  word(mem, l.ctl[r]+ctlSleep),
		room:   word(mem, l.ctl[r]+ctlRoom),
		data:   mem[l.data[r] : l.data[r]+ringBytes : l.data[r]+ringBytes],
		mask:   l.slots - 1,
		size:   l.slots,
		slot:   l.slotSize,
		stride: uint32(l.stride),
	}
}

// word is the aligned uint32 at off in b, as an atomic.
func word(b []byte, off uint64) *atomic.Uint32 {
	_ = b[off+3]
	return (*atomic.Uint32)(unsafe.Pointer(&b[off]))
}

// head is the sequence and length words of slot i (already masked), as
// one 64-bit word: the sequence word in its low half.
func (s *shared) head(i uint32) *atomic.Uint64 {
	off := uint64(i) * uint64(s.stride)
	_ = s.data[off+7]
	return (*atomic.Uint64)(unsafe.Pointer(&s.data[off+slotSeq]))
}

// tail returns the descriptor area after the frame area of slot i
// (already masked): where a placed frame's payload lies.
func (s *shared) tail(i uint32) []byte {
	off := int(i)*int(s.stride) + slotPlace
	return s.data[off : off+placeDescSize : off+placeDescSize]
}

// buf returns the frame area of slot i (already masked), full length.
func (s *shared) buf(i uint32) []byte {
	off := int(i)*int(s.stride) + slotFrame
	return s.data[off : off+int(s.slot) : off+int(s.slot)]
}

// txSide is the producing half of an End, used by the sending goroutine.
type txSide struct {
	shared
	next   uint32 // private producer: the next slot to fill
	pub    uint32 // the producer index last published
	cons   uint32 // the peer's consumer index as last read and validated
	held   bool   // TxBuf lent slot next
	frames uint64 // written since the last publish
	bytes  uint64
	peerFD int // the write end of the consumer's doorbell pipe

	sent, sentBytes, wakeups, full atomic.Uint64
	expects, placed                atomic.Uint64

	lens []uint32 // by slot: the length word to publish with its sequence word

	gather    placeDesc // where the payload of the frame in TxBuf lies (TxGather)
	gathering bool
	gathered  atomic.Uint64
}

// rxSide is the consuming half of an End, used by the receiving goroutine.
type rxSide struct {
	shared
	next  uint32         // private consumer: the next slot to read
	ready uint32         // frames up to this index were found published
	held  uint32         // frames lent by RecvZC
	armed bool           // we set our sleeping flag and have not cleared it
	drain [64]byte       // what a drain reads of the doorbell pipe at a time
	pfd   [2]unix.PollFd // waitFD, wakeFD

	// flags the peer may set on this ring (flagExpect from the
	// application, flagPlaced from the daemon), and what the slots read
	// last carried, by slot: their flags (the length word's top byte) and,
	// when placed, where.
	allowed     uint32
	flags       []uint8
	place       []placeDesc
	last, lastN uint32 // the first slot and the count of the last Recv or RecvZC

	recv, recvBytes, expects, placed, gathered atomic.Uint64
	roomWakeups                                atomic.Uint64
}

// End is one side of a region: it sends on one ring and receives from the
// other. It implements link.Link, link.Waiter, link.ZeroCopyReceiver and
// link.TxFramer, and FD and PrepareWait for a caller that polls several
// descriptors at once. See the package comment for what may run
// concurrently.
type End struct {
	tx txSide
	_  [cacheLine]byte
	rx rxSide
	_  [cacheLine]byte

	failed atomic.Pointer[error]
	bad    atomic.Uint64
	mem    atomic.Pointer[[]MemRegion] // SetMemRegions
	waitFD int                         // the read end of this End's doorbell pipe
	wakeFD int                         // an eventfd of this End's only, for Fail to wake Wait
	name   string
	region *Region
}

func newEnd(r *Region, name string, mem []byte, l layout, txRing, rxRing int, waitFD, peerFD, wakeFD int) *End {
	e := &End{waitFD: waitFD, wakeFD: wakeFD, name: name, region: r}
	e.tx.shared = mapRing(mem, l, txRing)
	e.tx.peerFD = peerFD
	e.tx.lens = make([]uint32, l.slots)
	// Create starts from zeroes; Map checked that both rings hold a
	// possible number of frames.
	e.tx.next = e.tx.shared.prod.Load()
	e.tx.pub = e.tx.next
	e.tx.cons = e.tx.shared.cons.Load()
	e.rx.shared = mapRing(mem, l, rxRing)
	e.rx.next = e.rx.shared.cons.Load()
	e.rx.ready = e.rx.next
	e.rx.pfd[0] = unix.PollFd{Fd: int32(waitFD), Events: unix.POLLIN}
	e.rx.pfd[1] = unix.PollFd{Fd: int32(wakeFD), Events: unix.POLLIN}
	e.rx.allowed = flagPlaced
	if rxRing == ringFromApp {
		e.rx.allowed = flagExpect | flagGather
	}
	e.rx.flags = make([]uint8, l.slots)
	e.rx.place = make([]placeDesc, l.slots)
	return e
}

// MaxFrame is the slot size: the largest frame either direction carries.
func (e *End) MaxFrame() int { return int(e.tx.slot) }

// FD is the read end of the pipe this End waits on, for a caller that
// polls it itself after PrepareWait. Fail does not wake such a poll (it
// wakes Wait only); the peer closing its end does (POLLHUP).
func (e *End) FD() int { return e.waitFD }

// Err returns the error the End failed with (Fail, or a corrupt ring),
// or nil: what a receiver that only uses RecvZC, which cannot say, checks.
func (e *End) Err() error { return e.err() }

// err returns the error the End failed with, or nil.
func (e *End) err() error {
	if p := e.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Fail makes the End fail: later Send, Recv, Flush and Wait return err, or
// ErrGone when err is nil, RecvZC returns 0 and TxBuf nil. The first
// failure sticks. It wakes a Wait in progress (through an eventfd of the
// End's own, which no other process holds). Any goroutine may call it.
func (e *End) Fail(err error) {
	if err == nil {
		err = ErrGone
	}
	if e.failed.CompareAndSwap(nil, &err) && !e.region.fdsClosed.Load() && e.wakeFD >= 0 {
		_, _ = unix.Write(e.wakeFD, one[:])
	}
}

// corrupt counts a bad descriptor and fails the End with ErrBadRegion.
func (e *End) corrupt(format string, args ...any) {
	e.bad.Add(1)
	e.Fail(fmt.Errorf("shmlink: %s end: %s: %w", e.name, fmt.Sprintf(format, args...), ErrBadRegion))
}

// Stats returns the counters; any goroutine may call it.
func (e *End) Stats() Stats {
	return Stats{
		FramesSent:           e.tx.sent.Load(),
		BytesSent:            e.tx.sentBytes.Load(),
		FramesReceived:       e.rx.recv.Load(),
		BytesReceived:        e.rx.recvBytes.Load(),
		Wakeups:              e.tx.wakeups.Load(),
		RoomWakeups:          e.rx.roomWakeups.Load(),
		ExpectationsSent:     e.tx.expects.Load(),
		ExpectationsReceived: e.rx.expects.Load(),
		PlacedSent:           e.tx.placed.Load(),
		PlacedReceived:       e.rx.placed.Load(),
		GatheredSent:         e.tx.gathered.Load(),
		GatheredReceived:     e.rx.gathered.Load(),
		BadDescriptors:       e.bad.Load(),
		TxFull:               e.tx.full.Load(),
	}
}

// free returns how many slots are free, at least n if that many are. It
// reads the peer's consumer index only when the cache cannot satisfy n,
// and checks it: it may only move forward, up to what was published. A bad
// index fails the End and leaves no room.
func (e *End) free(n uint32) uint32 {
	t := &e.tx
	room := t.cons + t.size - t.next
	if room >= n {
		return room
	}
	c := t.shared.cons.Load()
	if c-t.cons > t.pub-t.cons {
		e.corrupt("consumer index %d, was %d, published up to %d", c, t.cons, t.pub)
		return 0
	}
	t.cons = c
	return t.cons + t.size - t.next
}

// publish stores the sequence words of the frames written since the last
// publish and the producer index, and rings the consumer's doorbell if it
// sleeps.
func (e *End) publish() {
	t := &e.tx
	if t.next == t.pub {
		return
	}
	// Release stores (storeRelease): a frame's lines and its sequence
	// word go to the consumer together, not one after the other. The
	// producer index's sequentially consistent store is the fence the
	// doorbell protocol needs before the flag is read below.
	for i := t.pub; i != t.next; i++ {
		j := i & t.mask
		storeRelease((*uint64)(unsafe.Pointer(t.head(j))), uint64(i+1)|uint64(t.lens[j])<<32)
	}
	t.shared.prod.Store(t.next)
	t.pub = t.next
	t.sent.Add(t.frames)
	t.sentBytes.Add(t.bytes)
	t.frames, t.bytes = 0, 0
	// After the stores: the consumer sets its flag, then reads the
	// next sequence word.
	if t.shared.sleep.Load() != 0 && t.shared.sleep.Swap(0) != 0 {
		_, _ = unix.Write(t.peerFD, bell[:])
		t.wakeups.Add(1)
	}
}

// Send copies frames into the ring and publishes them, together with any
// frames queued by TxSubmit. It returns how many it took: fewer than
// len(frames) when the ring is full (with a nil error), or up to a frame
// longer than MaxFrame (with an error wrapping link.ErrFrameTooLarge). A
// Send between TxBuf and TxSubmit reuses the slot TxBuf lent, and that
// TxSubmit is then ignored.
func (e *End) Send(frames [][]byte) (int, error) {
	if err := e.err(); err != nil {
		return 0, err
	}
	t := &e.tx
	t.held, t.gathering = false, false
	free := e.free(uint32(min(len(frames), int(t.size))))
	if err := e.err(); err != nil {
		return 0, err
	}
	var err error
	k := 0
	for ; k < len(frames) && uint32(k) < free; k++ {
		f := frames[k]
		if len(f) > int(t.slot) {
			err = fmt.Errorf("shmlink: frame of %d bytes over %d: %w", len(f), t.slot, link.ErrFrameTooLarge)
			break
		}
		i := t.next & t.mask
		copy(t.buf(i), f)
		t.lens[i] = uint32(len(f))
		t.next++
		t.frames++
		t.bytes += uint64(len(f))
	}
	if err == nil && k < len(frames) {
		t.full.Add(1)
	}
	e.publish()
	return k, err
}

// TxBuf returns the next free slot, TxBufSize bytes long, to build a frame
// in, or nil when the ring is full or the End failed. Called again before
// TxSubmit, it returns the same slot, even if the End failed meanwhile
// (Fail may come from another goroutine while a frame is being built; the
// slot stays mapped until Close, and TxSubmit then drops the frame).
func (e *End) TxBuf() []byte {
	t := &e.tx
	if t.held {
		return t.buf(t.next & t.mask)
	}
	if e.failed.Load() != nil {
		return nil
	}
	if !t.held {
		if e.free(1) == 0 {
			t.full.Add(1)
			return nil
		}
		t.held = true
	}
	return t.buf(t.next & t.mask)
}

// TxSubmit queues the frame built in the last TxBuf, n bytes long, for the
// next Flush or Send; n <= 0 (or over TxBufSize) gives the slot back
// unsent.
func (e *End) TxSubmit(n int) {
	t := &e.tx
	if !t.held {
		return
	}
	t.held = false
	g := t.gathering
	t.gathering = false
	if n <= 0 || n > int(t.slot) || e.failed.Load() != nil {
		return
	}
	i := t.next & t.mask
	t.lens[i] = uint32(n)
	if g {
		if uint64(t.gather.at)+uint64(t.gather.n) > uint64(n) {
			return // the payload would lie past the frame: not sent
		}
		t.gather.put(t.tail(i))
		t.lens[i] |= flagGather
		t.gathered.Add(1)
	}
	t.next++
	t.frames++
	t.bytes += uint64(n)
}

// TxRoom is how many more frames TxBuf and TxSubmit can take now (at least
// link.IdealBatch when that many slots are free; more may be).
func (e *End) TxRoom() int {
	if e.failed.Load() != nil {
		return 0
	}
	return int(e.free(min(e.tx.size, link.IdealBatch)))
}

// PrepareRoom readies the End for a poll(2) on FD by a producer that
// waits for room in its ring: it reports true when n slots are free (or
// the End failed), and otherwise asks the consumer to ring this End's doorbell
// when it next frees slots. Call it after PrepareWait, which drains the
// doorbell: the other order could drain the doorbell rung for room.
func (e *End) PrepareRoom(n int) bool {
	t := &e.tx
	want := uint32(min(max(n, 1), int(t.size)))
	if e.failed.Load() != nil || e.free(want) >= want {
		return true
	}
	t.shared.room.Store(1)
	// After the store: the consumer stores its index, then reads the flag.
	if e.free(want) >= want || e.failed.Load() != nil {
		t.shared.room.Store(0)
		return true
	}
	return false
}

// TxBufSize is the length of the buffers TxBuf returns: the slot size.
func (e *End) TxBufSize() int { return int(e.tx.slot) }

// TxPending is how many published frames the peer has not taken yet. It
// may be called from any goroutine (it reads the indices atomically, and
// the producer's own index only as last published).
func (e *End) TxPending() int {
	t := &e.tx
	return int(t.shared.prod.Load() - t.shared.cons.Load())
}

// Flush publishes the frames queued by TxSubmit and wakes the peer if it
// sleeps.
func (e *End) Flush() error {
	if err := e.err(); err != nil {
		return err
	}
	e.publish()
	return nil
}

// avail returns how many unread frames are ready, at most n, counting from
// the private consumer index. Past the frames it found ready before, it
// reads the sequence words of the next slots, one by one, until n are
// ready or a slot holds no frame yet, and checks each: a slot's word is
// its index plus one once its frame is published, and before that what
// the previous round left (or zero, in the first round). Anything else
// fails the End and yields nothing.
func (e *End) avail(n uint32) uint32 {
	r := &e.rx
	a := r.ready - r.next
	for a < n && a < r.size {
		i := r.next + a
		s := uint32(r.head(i & r.mask).Load())
		if s != i+1 {
			if s != i+1-r.size && (s != 0 || i >= r.size) {
				e.corrupt("sequence word %d in slot %d, want %d or %d", s, i&r.mask, i+1, i+1-r.size)
				return 0
			}
			break
		}
		a++
	}
	r.ready = r.next + a
	return min(a, n)
}

// frameLen returns the length of the frame in slot i (masked), or false,
// failing the End, when it is larger than a slot or carries a flag the
// peer may not set, or two (an expectation must be ExpectationSize long). It
// records the slot's flags, and where a placed frame's payload lies.
func (e *End) frameLen(i uint32) (uint32, bool) {
	r := &e.rx
	w := uint32(r.head(i).Load() >> 32) // read once: the peer may rewrite it
	n, fl := w&lenMask, w&^lenMask
	if n > r.slot || fl&^r.allowed != 0 || fl&(fl-1) != 0 || fl == flagExpect && n != ExpectationSize {
		e.corrupt("length word %#x in slot %d, slots of %d", w, i, r.slot)
		return 0, false
	}
	r.flags[i] = uint8(fl >> 24)
	switch fl {
	case flagPlaced:
		r.place[i] = getDesc(r.tail(i))
		r.placed.Add(1)
	case flagGather:
		r.place[i] = getDesc(r.tail(i))
		r.gathered.Add(1)
	case flagExpect:
		r.expects.Add(1)
	}
	return n, true
}

// consumed hands n frames back to the producer, and rings its doorbell
// if it waits for room.
func (e *End) consumed(n uint32) {
	r := &e.rx
	r.next += n
	r.shared.cons.Store(r.next)
	// After the store: the producer sets its flag, then reads the
	// consumer index.
	if r.shared.room.Load() != 0 && r.shared.room.Swap(0) != 0 {
		_, _ = unix.Write(e.tx.peerFD, bell[:])
		r.roomWakeups.Add(1)
	}
}

// awake clears our sleeping flag if we set it, so that the producer does
// not ring a doorbell nobody waits for.
func (e *End) awake() {
	if e.rx.armed {
		e.rx.shared.sleep.Store(0)
		e.rx.armed = false
	}
}

// Recv copies up to min(len(bufs), len(sizes)) frames into
// bufs[i][:cap(bufs[i])] and their lengths into sizes. It returns 0, nil
// when nothing is waiting, and never blocks. A frame that does not fit its
// buffer stays in the ring; Recv returns the frames before it and an error
// wrapping link.ErrFrameTooLarge. It gives back frames still lent by
// RecvZC first.
func (e *End) Recv(bufs [][]byte, sizes []int) (int, error) {
	if err := e.err(); err != nil {
		return 0, err
	}
	e.ReleaseRx()
	e.awake()
	r := &e.rx
	n := e.avail(uint32(min(len(bufs), len(sizes))))
	r.last, r.lastN = r.next, 0
	var err error
	k := uint32(0)
	var bytes uint64
	for ; k < n; k++ {
		i := (r.next + k) & r.mask
		l, ok := e.frameLen(i)
		if !ok {
			return 0, e.err()
		}
		b := bufs[k][:cap(bufs[k])]
		if int(l) > len(b) {
			err = fmt.Errorf("shmlink: frame of %d bytes does not fit a %d-byte buffer: %w", l, len(b), link.ErrFrameTooLarge)
			break
		}
		sizes[k] = copy(b, r.buf(i)[:l])
		bytes += uint64(l)
	}
	r.lastN = k
	if k > 0 {
		e.consumed(k)
		r.recv.Add(uint64(k))
		r.recvBytes.Add(bytes)
	}
	if err == nil {
		err = e.err()
	}
	return int(k), err
}

// RecvZC fills views with frames in place, in the ring's slots, and
// returns how many; 0 when nothing is waiting or the End failed. The views
// stay valid until ReleaseRx, which the next RecvZC or Recv calls
// implicitly. On the daemon's end the application can still write to them.
func (e *End) RecvZC(views [][]byte) int {
	e.ReleaseRx()
	if e.failed.Load() != nil {
		return 0
	}
	e.awake()
	r := &e.rx
	n := e.avail(uint32(len(views)))
	r.last, r.lastN = r.next, 0
	var bytes uint64
	for k := uint32(0); k < n; k++ {
		i := (r.next + k) & r.mask
		l, ok := e.frameLen(i)
		if !ok {
			clear(views[:k])
			return 0
		}
		views[k] = r.buf(i)[:l:l]
		bytes += uint64(l)
	}
	r.held, r.lastN = n, n
	if n > 0 {
		r.recv.Add(uint64(n))
		r.recvBytes.Add(bytes)
	}
	return int(n)
}

// ReleaseRx gives the frames of the last RecvZC back to the producer.
func (e *End) ReleaseRx() {
	if h := e.rx.held; h != 0 {
		e.rx.held = 0
		if e.failed.Load() == nil {
			e.consumed(h)
		}
	}
}

// PrepareWait readies the End for a poll(2) on FD by a caller that waits
// on several descriptors at once: it reports true when frames are already
// waiting (or the End failed: Recv tells why), and otherwise announces the
// sleep to the producer, which will ring the doorbell when it publishes.
// It drains the doorbell first, so a doorbell rung for an earlier sleep does
// not end this one. The timeout is returned unchanged.
func (e *End) PrepareWait(timeout time.Duration) (bool, time.Duration) {
	r := &e.rx
	if e.failed.Load() != nil || r.ready-r.next > r.held {
		return true, timeout
	}
	if e.avail(r.held+1) > r.held || e.failed.Load() != nil {
		return true, timeout
	}
	_, _ = unix.Read(e.waitFD, r.drain[:])
	r.shared.sleep.Store(1)
	r.armed = true
	// After the store: the producer stores the sequence words, then reads
	// the flag.
	if e.avail(r.held+1) > r.held || e.failed.Load() != nil {
		e.awake()
		return true, timeout
	}
	return false, timeout
}

// Wait blocks until frames are waiting, the peer rings the doorbell, Fail
// is called, or timeout passes (then it returns nil). It returns the
// End's error once it failed.
func (e *End) Wait(timeout time.Duration) error {
	if err := e.err(); err != nil {
		return err
	}
	if ready, _ := e.PrepareWait(timeout); ready {
		return e.err()
	}
	r := &e.rx
	_, err := ppoll.Wait(r.pfd[:], max(timeout, 0))
	if err == nil && r.pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 && e.avail(r.held+1) <= r.held {
		// Every writer of the doorbell closed it: the peer is gone.
		e.Fail(ErrGone)
	}
	if e.failed.Load() != nil {
		return e.err() // the region may be closed
	}
	e.awake()
	_, _ = unix.Read(e.waitFD, r.drain[:])
	if err != nil {
		return fmt.Errorf("shmlink: wait: %w", err)
	}
	return e.err()
}
