// Package shmlink is a link.Link between a softfabric daemon, which owns the
// NIC, and one application process: whole Ethernet frames cross a shared
// memory region (a sealed memfd) through two single-producer,
// single-consumer rings, with a pipe per side as the doorbell.
//
// The daemon calls Create, sends the three descriptors of FDs to the
// application (SCM_RIGHTS over a unix socket, done elsewhere) and drives
// DaemonEnd; the application calls Map on them and drives AppEnd. What one
// end sends, the other receives.
//
// # Layout
//
// All offsets follow from the header; integers are little-endian (the ring
// indices are host-endian atomics: the repository runs on little-endian
// Linux only).
//
//	0     header, one 64-byte line:
//	        0  magic "SFSHMLK1"
//	        8  version (4), uint32
//	       12  slots per ring, uint32 (power of two, 1..MaxSlots)
//	       16  slot size in bytes, uint32: the largest frame (MinSlotSize..MaxSlotSize, multiple of 64)
//	       20  reserved, zero
//	       24  total size of the file, uint64
//	64    to-app ring control (the daemon produces, the application consumes):
//	        +0 producer index, +64 consumer index, +128 consumer-sleeping flag,
//	        each a uint32 alone on its 64-byte line but for +72, the
//	        producer-waiting-for-room flag, which shares the consumer's line
//	256   from-app ring control (the application produces), laid out alike
//	4096  to-app slots, slots × (slot size + 64) bytes; then from-app slots.
//	      Each slot: a header line (+0 sequence word, uint32; +4 length
//	      word, uint32: the frame's length and flags; +8 where a placed
//	      frame's payload lies, see place.go), then at +64 the frame, up
//	      to slot size bytes
//
// The file is the end of the slots rounded up to 4096 bytes, at most
// MaxRegionSize.
//
// # Ring protocol
//
// Indices are free-running uint32 counters, masked with slots-1. The
// producer writes frame i into its slot's frame lines; when it publishes
// the batch, it stores each slot's sequence word (i+1) and length word
// together, one atomic 64-bit store per slot, then the producer index.
// The consumer polls the header line of the next slot, not the producer
// index: the frame's length comes with the sequence word, in the same
// transfer, and its lines follow. The frame has lines of its own so that
// the consumer's polling does not pull the line away from a producer
// still building the frame there (frames are built in place, over many
// stores): the header line is written once per frame. The consumer
// publishes its consumer index after reading; the producer reads it only
// when the ring looks full. Go's sync/atomic operations are sequentially
// consistent, at least as strong as acquire/release.
//
// A consumer about to sleep (PrepareWait, Wait) drains its doorbell, sets
// its sleeping flag, then reads the next slot's sequence word again; a
// producer stores its sequence words and index, then reads the flag and,
// when it is set, clears it and rings the consumer's doorbell. Both orders
// are store-then-load with sequentially consistent atomics, so either the
// consumer sees the new frames or the producer sees the flag: a wakeup is
// never lost, and it is rung once per sleep, not once per frame.
//
// A producer that waits for room (PrepareRoom: the daemon, with frames
// parked for an application whose ring is full) works the other way
// round: it sets the waiting-for-room flag, then reads the consumer index
// again; a consumer stores its index, then reads the flag (on the line it
// just wrote, so it costs nothing while the flag is clear) and, when it is
// set, clears it and rings the producer's doorbell. Each End has one
// doorbell to wait on, rung for frames to receive and for room to send.
//
// # Doorbells
//
// Each side's doorbell is a pipe: the peer writes a byte to ring it, the
// side polls and drains the read end. The daemon keeps the read end of
// its own and the write end of the application's; the application gets
// the other two (FDs). O_NONBLOCK belongs to an open file description,
// which descriptors passed between processes share, so the daemon's ends
// are descriptions no other process holds: whatever the application does
// to its own (clears O_NONBLOCK, drains them, fills the pipes from a
// writer it opened itself), the daemon's reads and writes never block; a
// full pipe only fails a write that was not needed. (Eventfds, as the
// doorbells were, cannot be split so: the application held the very
// descriptions the daemon read and wrote, and a blocking one stalled the
// daemon's worker, and every application on its queue.) When every
// writer of a doorbell closed it (the daemon exited, or dropped the
// application), the reader's poll reports POLLHUP, and Wait fails the End
// with ErrGone. Fail wakes a Wait through an eventfd of the End's own.
//
// # Trust
//
// The daemon does not trust the application. It keeps its own indices in
// private memory and only stores them to the region, never reads them back
// (nor the from-app producer index, which it has no use for), and it
// checks every value the application can write before using it: the
// sequence word of the from-app slot it reads next, which can only be
// that slot's index plus one (a frame) or what it held a round before (no
// frame yet: the previous round's word, or zero in the first round), a
// frame length over the slot size, or a to-app consumer index behind its
// last value or ahead of what the daemon published. Any of these is counted as a bad descriptor and fails the End
// with an error wrapping ErrBadRegion; the daemon should then drop the
// application. The region is sealed against shrinking and growing, so the
// application cannot make the daemon's mapping fault. The application's
// sleeping flag and its waiting-for-room flag are only hints: setting
// either always costs the daemon a doorbell write per batch, clearing
// either only delays the application.
//
// The same checks run on the application's end (they cost a compare per
// frame), although the application trusts the daemon; Map validates the
// header.
//
// Limits of the trust model, left to the daemon around this package:
//   - The application can rewrite a frame while the daemon reads it:
//     Recv copies whatever bytes are there, and a view lent by RecvZC on the
//     daemon's end may change under its parser. The parser must be bounds
//     checked (it is Go) and must not rely on a byte it checked staying the
//     same when read again.
//   - The application can ring the daemon's doorbell as often as it likes:
//     each ring wakes the daemon, as a frame would.
//
// # Concurrency
//
// An End may be used by one goroutine sending (Send, TxBuf, TxSubmit,
// TxRoom, Flush) and another receiving (Recv, RecvZC, ReleaseRx, Wait,
// PrepareWait) at the same time; Fail and Stats may be called from any
// goroutine. The hot paths take no lock and allocate nothing. Close the
// Region only once no goroutine uses its Ends: it unmaps the memory that
// their slots and views point into.
package shmlink

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Magic and Version identify a region; Map refuses anything else.
const (
	Magic   = "SFSHMLK1"
	Version = 4
)

// Sizes and limits.
const (
	DefaultSlots    = 512
	DefaultSlotSize = 4096
	MinSlotSize     = 256
	MaxSlotSize     = 1 << 16
	MaxSlots        = 1 << 15
	MaxRegionSize   = 1 << 30
)

// Offsets of the layout (see the package comment).
const (
	cacheLine  = 64
	pageAlign  = 4096
	headerSize = cacheLine

	hdrMagic    = 0
	hdrVersion  = 8
	hdrSlots    = 12
	hdrSlotSize = 16
	hdrReserved = 20
	hdrTotal    = 24

	ctlSize  = 3 * cacheLine // producer, consumer, sleeping flag
	ctlProd  = 0
	ctlCons  = cacheLine
	ctlSleep = 2 * cacheLine
	ctlRoom  = ctlCons + 8 // the producer waits for room: on the consumer's line

	slotSeq    = 0         // a slot's sequence word
	slotLen    = 4         // its length word: the frame's length and flags
	slotPlace  = 8         // where a placed frame's payload lies (place.go)
	slotFrame  = cacheLine // its frame, from the slot's second cache line
	slotHeader = cacheLine // what a slot holds besides the frame

	ringToApp   = 0 // the daemon produces, the application consumes
	ringFromApp = 1 // the application produces, the daemon consumes
)

// ErrBadRegion is wrapped by every error of Map, and by the error an End
// fails with when the peer wrote something impossible into the region.
var ErrBadRegion = errors.New("shmlink: bad shared region")

// ErrGone is what a failed End returns when Fail was given no error.
var ErrGone = errors.New("shmlink: peer gone")

// errClosed is what the Ends of a closed Region return.
var errClosed = fmt.Errorf("%w: region closed", ErrGone)

// Config sizes a region.
type Config struct {
	Slots    int // frames per direction, power of two; 0 means DefaultSlots
	SlotSize int // bytes per frame slot (the largest frame); 0 means DefaultSlotSize (MinSlotSize..MaxSlotSize, multiple of 64)
}

// layout holds the offsets of a region of given slots and slot size.
type layout struct {
	slots, slotSize uint32
	ctl             [2]uint64 // ring control blocks
	data            [2]uint64 // slots
	stride          uint64    // bytes from one slot to the next
	end             uint64    // end of the last slot
	size            uint64    // the file's size: end rounded up
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

// checkSizes reports what is wrong with slots and slot size, or "".
func checkSizes(slots, slotSize uint64) string {
	switch {
	case slots == 0 || slots > MaxSlots || bits.OnesCount64(slots) != 1:
		return fmt.Sprintf("slots %d: want a power of two from 1 to %d", slots, MaxSlots)
	case slotSize < MinSlotSize || slotSize > MaxSlotSize || slotSize%cacheLine != 0:
		return fmt.Sprintf("slot size %d: want a multiple of %d from %d to %d", slotSize, cacheLine, MinSlotSize, MaxSlotSize)
	}
	return ""
}

// layoutFor computes the layout of sizes that passed checkSizes; the
// limits keep every sum far from overflowing.
func layoutFor(slots, slotSize uint32) layout {
	l := layout{slots: slots, slotSize: slotSize, stride: uint64(slotSize) + slotHeader}
	ring := uint64(slots) * l.stride
	dataBase := alignUp(headerSize+2*ctlSize, pageAlign)
	for r := range 2 {
		l.ctl[r] = headerSize + uint64(r)*ctlSize
		l.data[r] = dataBase + uint64(r)*ring
	}
	l.end = dataBase + 2*ring
	l.size = alignUp(l.end, pageAlign)
	return l
}

// Size is how many bytes a region of cfg takes (0 for a cfg that Create
// refuses): both rings, every page resident once they have gone round.
func Size(cfg Config) uint64 {
	cfg.Slots, cfg.SlotSize = cmp.Or(cfg.Slots, DefaultSlots), cmp.Or(cfg.SlotSize, DefaultSlotSize)
	if cfg.Slots < 0 || cfg.SlotSize < 0 || checkSizes(uint64(cfg.Slots), uint64(cfg.SlotSize)) != "" {
		return 0
	}
	return layoutFor(uint32(cfg.Slots), uint32(cfg.SlotSize)).size
}

// Region is a mapped shared region and its doorbells, on either side.
type Region struct {
	mem    []byte
	fds    [3]int // memfd, the app's doorbell's read end, the daemon's doorbell's write end
	own    [2]int // the daemon's side only: its doorbell's read end, the app's doorbell's write end
	wake   [2]int // the Ends' own eventfds (Fail): the app's, the daemon's
	cfg    Config
	l      layout
	app    *End
	daemon *End

	closed, fdsClosed atomic.Bool
}

// Create makes a region for the daemon's side: a sealed memfd of the
// layout for cfg, mapped shared, with its header written and both rings
// empty, and two doorbells, pipes: the one the application waits on and
// the one the daemon waits on. FDs gives the application the read end of
// its own and the write end of the daemon's; the daemon keeps the other
// two, whose open file descriptions no other process holds, so that the
// application cannot make the daemon's reads and writes of them block.
func Create(name string, cfg Config) (*Region, error) {
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.SlotSize == 0 {
		cfg.SlotSize = DefaultSlotSize
	}
	if cfg.Slots < 0 || cfg.SlotSize < 0 {
		return nil, fmt.Errorf("shmlink: negative size in %+v", cfg)
	}
	if msg := checkSizes(uint64(cfg.Slots), uint64(cfg.SlotSize)); msg != "" {
		return nil, errors.New("shmlink: " + msg)
	}
	l := layoutFor(uint32(cfg.Slots), uint32(cfg.SlotSize))
	if l.size > MaxRegionSize {
		return nil, fmt.Errorf("shmlink: %d slots of %d bytes need %d bytes, over %d", cfg.Slots, cfg.SlotSize, l.size, MaxRegionSize)
	}
	fds, own := [3]int{-1, -1, -1}, [2]int{-1, -1}
	fail := func(what string, err error) (*Region, error) {
		closeFDs(fds[:])
		closeFDs(own[:])
		return nil, fmt.Errorf("shmlink: %s: %w", what, err)
	}
	var err error
	if fds[0], err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING); err != nil {
		return fail("memfd_create", err)
	}
	if err := unix.Ftruncate(fds[0], int64(l.size)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("sealing", err)
	}
	var app, daemon [2]int
	if err := unix.Pipe2(app[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fail("pipe2", err)
	}
	fds[1], own[1] = app[0], app[1]
	if err := unix.Pipe2(daemon[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fail("pipe2", err)
	}
	own[0], fds[2] = daemon[0], daemon[1]
	mem, err := unix.Mmap(fds[0], 0, int(l.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	copy(mem[hdrMagic:], Magic)
	binary.LittleEndian.PutUint32(mem[hdrVersion:], Version)
	binary.LittleEndian.PutUint32(mem[hdrSlots:], l.slots)
	binary.LittleEndian.PutUint32(mem[hdrSlotSize:], l.slotSize)
	binary.LittleEndian.PutUint64(mem[hdrTotal:], l.size)
	r, err := newRegion(mem, fds, own, l)
	if err != nil {
		_ = unix.Munmap(mem)
		return fail("eventfd", err)
	}
	return r, nil
}

// Map maps a region made by Create, from its three descriptors as FDs
// returns them, for the application's side (whose DaemonEnd has no
// doorbells and must not be used). It takes ownership of the
// descriptors: Close closes them, and so does Map when it fails. It checks
// the header against the file (magic, version, sizes, that the layout fits)
// and that both rings hold a possible number of frames; its errors wrap
// ErrBadRegion.
func Map(fds [3]int) (*Region, error) {
	fail := func(format string, args ...any) (*Region, error) {
		closeFDs(fds[:])
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrBadRegion}, args...)...)
	}
	for i := 1; i < 3; i++ {
		// The daemon made them non-blocking; a hand-over through
		// os/exec may have cleared that on the shared description.
		if err := unix.SetNonblock(fds[i], true); err != nil {
			return fail("doorbell %d: %w", fds[i], err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		return fail("fstat: %w", err)
	}
	if st.Size < headerSize || st.Size > MaxRegionSize {
		return fail("file of %d bytes: want %d to %d", st.Size, headerSize, MaxRegionSize)
	}
	mem, err := unix.Mmap(fds[0], 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap: %w", err)
	}
	l, msg := checkHeader(mem)
	if msg == "" {
		msg = checkIndices(mem, l)
	}
	if msg != "" {
		_ = unix.Munmap(mem)
		return fail("%s", msg)
	}
	r, err := newRegion(mem, fds, [2]int{-1, -1}, l)
	if err != nil {
		_ = unix.Munmap(mem)
		return fail("%w", err)
	}
	return r, nil
}

// checkHeader validates the header of mem, the whole file, and returns its
// layout, or what is wrong.
func checkHeader(mem []byte) (layout, string) {
	if string(mem[hdrMagic:hdrMagic+len(Magic)]) != Magic {
		return layout{}, fmt.Sprintf("magic %q, want %q", mem[hdrMagic:hdrMagic+len(Magic)], Magic)
	}
	if v := binary.LittleEndian.Uint32(mem[hdrVersion:]); v != Version {
		return layout{}, fmt.Sprintf("version %d, want %d", v, Version)
	}
	if r := binary.LittleEndian.Uint32(mem[hdrReserved:]); r != 0 {
		return layout{}, fmt.Sprintf("reserved header word %#x, want 0", r)
	}
	slots := binary.LittleEndian.Uint32(mem[hdrSlots:])
	slotSize := binary.LittleEndian.Uint32(mem[hdrSlotSize:])
	if msg := checkSizes(uint64(slots), uint64(slotSize)); msg != "" {
		return layout{}, msg
	}
	total := binary.LittleEndian.Uint64(mem[hdrTotal:])
	if total != uint64(len(mem)) {
		return layout{}, fmt.Sprintf("header says %d bytes, the file has %d", total, len(mem))
	}
	l := layoutFor(slots, slotSize)
	if l.end > total {
		return layout{}, fmt.Sprintf("%d slots of %d bytes need %d bytes, the file has %d", slots, slotSize, l.end, total)
	}
	return l, ""
}

// checkIndices reports a ring holding more frames than it has slots.
func checkIndices(mem []byte, l layout) string {
	for r, name := range [2]string{"to-app", "from-app"} {
		prod := binary.NativeEndian.Uint32(mem[l.ctl[r]+ctlProd:])
		cons := binary.NativeEndian.Uint32(mem[l.ctl[r]+ctlCons:])
		if prod-cons > l.slots {
			return fmt.Sprintf("%s ring: producer %d, consumer %d, %d slots", name, prod, cons, l.slots)
		}
	}
	return ""
}

// newRegion makes the Ends of a mapped region, and their wake-up
// eventfds.
func newRegion(mem []byte, fds [3]int, own [2]int, l layout) (*Region, error) {
	r := &Region{mem: mem, fds: fds, own: own, wake: [2]int{-1, -1}, l: l, cfg: Config{Slots: int(l.slots), SlotSize: int(l.slotSize)}}
	for i := range r.wake {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			closeFDs(r.wake[:])
			return nil, fmt.Errorf("shmlink: eventfd: %w", err)
		}
		r.wake[i] = fd
	}
	r.app = newEnd(r, "app", mem, l, ringFromApp, ringToApp, fds[1], fds[2], r.wake[0])
	r.daemon = newEnd(r, "daemon", mem, l, ringToApp, ringFromApp, own[0], own[1], r.wake[1])
	return r, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

// FDs returns the memfd, the read end of the application's doorbell and
// the write end of the daemon's, to send to the application. They stay
// owned by the Region.
func (r *Region) FDs() [3]int { return r.fds }

// Config returns the region's sizes.
func (r *Region) Config() Config { return r.cfg }

// AppEnd is the application's end: it sends on the from-app ring, receives
// from the to-app ring and waits on the application's doorbell. Every call
// returns the same End.
func (r *Region) AppEnd() *End { return r.app }

// DaemonEnd is the daemon's end: it sends on the to-app ring, receives from
// the from-app ring and waits on the daemon's doorbell. Every call returns
// the same End.
func (r *Region) DaemonEnd() *End { return r.daemon }

// Close fails both Ends (with an error wrapping ErrGone), unmaps the
// region and closes its descriptors. Later calls do nothing. No End of the
// region may be in use while it runs: their slots and views point into the
// memory it unmaps.
func (r *Region) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	// Later calls on the Ends fail instead of touching the unmapped
	// memory, and a Wait in progress wakes up.
	r.app.Fail(errClosed)
	r.daemon.Fail(errClosed)
	r.fdsClosed.Store(true)
	var errs []error
	if err := unix.Munmap(r.mem); err != nil {
		errs = append(errs, fmt.Errorf("shmlink: munmap: %w", err))
	}
	r.mem = nil
	for _, fd := range append(append(r.fds[:], r.own[:]...), r.wake[:]...) {
		if fd < 0 {
			continue
		}
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("shmlink: close: %w", err))
		}
	}
	return errors.Join(errs...)
}
