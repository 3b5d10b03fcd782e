package model

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// ErrNotModeled is returned, wrapped, by calls the model does not answer
// yet; it never stands in for a behaviour silently.
var ErrNotModeled = errors.New("model: not modeled")

// PathPrefix starts every modeled device's path, so a modeled unit can
// never be mistaken for a real /dev node.
const PathPrefix = "model:"

// Unit is one modeled HFI and its character device. It implements sys.Sys.
// Control calls (open, ioctl, mmap, close) serialize on a mutex, as the
// driver's do on hfi1_mutex; data-path traffic goes through mapped regions.
type Unit struct {
	cfg  Config
	path string

	mu     sync.Mutex
	files  map[int]*file
	nextFD int
	ctxts  []*context // by user-context index; nil = free

	// Unit-wide memory the driver shares between contexts.
	events  []byte // one u64 per (ctxt, subctxt), MaxSharedCtxts per ctxt
	status  []byte // struct hfi1_status page
	credits []byte // credit-return words, see creditOff
	mapped  map[sys.Region]struct{}
	egress  atomic.Pointer[Egress]

	// rcv is the receive side of each user context by index, for Ingress:
	// read without mu, so that delivery never waits on a control call.
	rcv   []atomic.Pointer[rcvCtxt]
	drops ingressDrops
	// rcvOff[i] is set while context i's receive side is disabled: from
	// a freeze until its CTXT_RESET (linkstate.go).
	rcvOff []atomic.Bool

	sdmaHold, sdmaStopped atomic.Bool

	// The port (linkstate.go): its LID (Config.LID until SetLID) and
	// whether its link is down.
	lid      atomic.Uint32
	portDown atomic.Bool

	polls pollCounters // poll.go
}

var _ sys.Sys = (*Unit)(nil)

type file struct {
	write   bool // opened for writing
	ctxt    *context
	subctxt uint16
}

// context is a receive context with its send context.
type context struct {
	idx      int // index into Unit.ctxts
	num      uint16
	sendCtxt uint16
	jkey     uint16

	hdrq  []byte
	egr   []byte
	uregs []byte
	rtail []byte // nil without CapDMARtail
	rheq  []byte // nil on WFR
	comp  []byte // SDMA completion ring; nil without CapSDMA
	pio   *pioRegion
	sop   *pioRegion
	send  *sendCtxt
	rcv   *rcvCtxt
	sdma  *sdmaQueue // nil without CapSDMA
	tids  *rcvArray

	// frozen: a freeze halted the send context and disabled the receive
	// context; CTXT_RESET re-enables both (under Unit.mu).
	frozen bool
	// pollType is POLL_TYPE's value (under Unit.mu; poll.go).
	pollType uint16
}

// NewUnit builds a modeled unit.
func NewUnit(cfg Config) (*Unit, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	maxSend := cfg.FirstSendCtxt + cfg.UserContexts
	u := &Unit{
		cfg:     cfg,
		path:    fmt.Sprintf("%shfi1_%d", PathPrefix, cfg.Unit),
		files:   make(map[int]*file),
		nextFD:  3,
		ctxts:   make([]*context, cfg.UserContexts),
		events:  alignedBytes(abi.PageAlign(cfg.UserContexts * abi.MaxSharedCtxts * 8)),
		status:  alignedBytes(abi.PageSize),
		credits: alignedBytes(abi.PageAlign(maxSend * crStructSize)),
		mapped:  make(map[sys.Region]struct{}),
		rcv:     make([]atomic.Pointer[rcvCtxt], cfg.UserContexts),
		rcvOff:  make([]atomic.Bool, cfg.UserContexts),
	}
	u.lid.Store(uint32(cfg.LID))
	u.initStatus()
	return u, nil
}

// SetEgress installs the function every sent packet is handed to; nil
// drops them. Packets are delivered synchronously, from the store that
// completes them.
func (u *Unit) SetEgress(fn Egress) {
	if fn == nil {
		u.egress.Store(nil)
		return
	}
	u.egress.Store(&fn)
}

// Path is the name Open accepts: "model:hfi1_N".
func (u *Unit) Path() string { return u.path }

// Config returns the unit's configuration, with the port's current LID.
func (u *Unit) Config() Config {
	c := u.cfg
	c.LID = u.LID()
	return c
}

// alignedBytes returns n zeroed bytes starting 8-byte aligned, so that
// regions over them take atomic 64-bit accesses.
func alignedBytes(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// Open implements sys.Sys: only the unit's own path exists.
func (u *Unit) Open(path string, flags int) (int, error) {
	if path != u.path {
		return -1, unix.ENOENT
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	fd := u.nextFD
	u.nextFD++
	acc := flags & unix.O_ACCMODE
	u.files[fd] = &file{write: acc == unix.O_WRONLY || acc == unix.O_RDWR}
	return fd, nil
}

// Close implements sys.Sys; it frees the context as hfi1_file_close does,
// clearing the file's event word.
func (u *Unit) Close(fd int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	f, ok := u.files[fd]
	if !ok {
		return unix.EBADF
	}
	delete(u.files, fd)
	if c := f.ctxt; c != nil {
		storeWord(u.events, u.eventOff(c, f.subctxt), 0)
		u.ctxts[c.idx] = nil
		u.rcv[c.idx].Store(nil)
	}
	return nil
}

// eventOff is the byte offset of (ctxt, subctxt)'s event word:
// (uctxt_offset(uctxt) + subctxt) * sizeof(u64).
func (u *Unit) eventOff(c *context, subctxt uint16) int {
	return (c.idx*abi.MaxSharedCtxts + int(subctxt)) * 8
}

// creditOff is the byte offset of a send context's credit-return word in
// the credit area. The driver keeps one 64-byte struct credit_return per
// (group) context and the word at index context&7 in it ([K] pio.c
// cr_group_addresses, with group 0 as for user contexts).
func (u *Unit) creditOff(c *context) int {
	return int(c.sendCtxt)*crStructSize + int(c.sendCtxt&7)*8
}

// crStructSize is sizeof(struct credit_return): eight u64.
const crStructSize = 64

// Munmap implements sys.Sys.
func (u *Unit) Munmap(r sys.Region) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.mapped[r]; !ok {
		return unix.EINVAL
	}
	delete(u.mapped, r)
	return nil
}

// FreeContexts is how many user contexts no file has assigned: the
// driver's freectxts, which its sysfs shows as nfreectxts.
func (u *Unit) FreeContexts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, c := range u.ctxts {
		if c == nil {
			n++
		}
	}
	return n
}

// OpenFiles is the number of open descriptors, and Mapped the number of
// live mappings: tests use them to prove set-up failures leak nothing.
func (u *Unit) OpenFiles() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.files)
}

// Mapped is the number of regions mapped and not yet unmapped.
func (u *Unit) Mapped() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.mapped)
}
