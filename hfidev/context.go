package hfidev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

var le = binary.LittleEndian

// Options tune ASSIGN_CTXT. The zero value asks for port 0 and the
// driver's default KDETH receive-header size.
type Options struct {
	// Port is the 0-based port index (hfi1_user_info.pad bit 0).
	Port uint8
	// KDETHRcvHdrSize is the receive-header size in dwords
	// (pad bits 5:1); 0 means the driver's default, 1 is invalid.
	KDETHRcvHdrSize uint8
}

func (o Options) pad() uint32 {
	return uint32(o.Port)&abi.UserPadPortMask |
		(uint32(o.KDETHRcvHdrSize)&abi.UserPadKDETHHdrMask)<<abi.UserPadKDETHHdrShift
}

// Mapping is one mapped region of a context.
type Mapping struct {
	Type   abi.MmapType
	Token  abi.Token
	Region sys.Region
	// Off is the token's in-page offset: where the object starts in Region
	// (nonzero for the credit-return word and the event word).
	Off int
}

// Context is an assigned hfi1 receive context with its send context, all
// its regions mapped.
type Context struct {
	sys  sys.Sys
	fd   int
	path string

	// Version is what GET_VERS returned.
	Version uint32
	// Info is CTXT_INFO's answer; Base is USER_INFO's.
	Info abi.CtxtInfo
	Base abi.BaseInfo
	// Chip is decoded from Base.HWVersion.
	Chip abi.Chip

	maps   [abi.MmapRcvRHEQ + 1]Mapping
	pio    *PIO
	rcv    *Receiver
	sdma   *SDMA
	tids   []abi.TIDEntry        // the TID ioctls' tidlist; see tidScratch
	tidArg [abi.TIDInfoSize]byte // the TID ioctls' argument; see tidIoctl
	ackArg [8]byte               // ACK_EVENT's argument
	intArg [4]byte               // RECV_CTRL's and POLL_TYPE's argument

	// Waiting on the chip's interrupt (wait.go). wakeMu keeps Wake, from
	// any goroutine, off a waker Close has closed.
	wakeMu   sync.Mutex
	waker    sys.Waker
	pollType int32 // what POLL_TYPE was last given: the driver starts at ANYRCV
	rcvOff   bool  // SetRecvEnabled(false) disabled the receive context
}

// OpenContext opens the device at path through s and sets up a context as
// the driver expects: GET_VERS, ASSIGN_CTXT with user version 6.3,
// CTXT_INFO, USER_INFO, then mmap of every region by its token with the
// exact length and protection. On failure everything done so far is undone.
func OpenContext(s sys.Sys, path string, opt Options) (*Context, error) {
	fd, err := s.Open(path, unix.O_RDWR)
	if err != nil {
		return nil, fmt.Errorf("hfidev: open %s: %w", path, err)
	}
	c := &Context{sys: s, fd: fd, path: path}
	if err := c.setup(opt); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Context) ioctl(cmd uint32, arg []byte) error {
	if err := c.sys.Ioctl(c.fd, cmd, arg); err != nil {
		return fmt.Errorf("hfidev: %s %s: %w", c.path, abi.IoctlName(cmd), err)
	}
	return nil
}

func (c *Context) setup(opt Options) error {
	var buf [abi.BaseInfoSize]byte

	if err := c.ioctl(abi.IoctlGetVers, buf[:4]); err != nil {
		return err
	}
	c.Version = le.Uint32(buf[:4])
	if c.Version>>abi.SWMajorShift != abi.SWMajor {
		return fmt.Errorf("%w: driver speaks %d.%d, we speak %d.%d", ErrVersion,
			c.Version>>abi.SWMajorShift, c.Version&0xffff, abi.SWMajor, abi.SWMinor)
	}

	ui := abi.UserInfo{UserVersion: abi.UserVersion, Pad: opt.pad()}
	ui.Marshal(buf[:abi.UserInfoSize])
	if err := c.ioctl(abi.IoctlAssignCtxt, buf[:abi.UserInfoSize]); err != nil {
		return err
	}

	clear(buf[:])
	if err := c.ioctl(abi.IoctlCtxtInfo, buf[:abi.CtxtInfoSize]); err != nil {
		return err
	}
	c.Info.Unmarshal(buf[:abi.CtxtInfoSize])

	clear(buf[:])
	if err := c.ioctl(abi.IoctlUserInfo, buf[:abi.BaseInfoSize]); err != nil {
		return err
	}
	c.Base.Unmarshal(buf[:abi.BaseInfoSize])
	switch c.Chip = c.Base.HWVersion.Chip(); c.Chip {
	case abi.ChipWFR, abi.ChipJKR:
	default:
		return fmt.Errorf("%w: hw_version %#x (chip %d)", ErrUnsupportedChip, uint32(c.Base.HWVersion), c.Chip)
	}

	b := &c.Base
	regions := []struct {
		tok  abi.Token
		want abi.MmapType
		use  bool
	}{
		{b.PIOBufBase, abi.MmapPIOBufs, true},
		{b.PIOBufBaseSOP, abi.MmapPIOBufsSOP, true},
		{b.SCCreditsAddr, abi.MmapPIOCred, true},
		{b.RcvHdrBufBase, abi.MmapRcvHdrQ, true},
		{b.RcvEgrBufBase, abi.MmapRcvEgrBuf, true},
		{b.UserRegBase, abi.MmapURegs, true},
		{b.EventsBufBase, abi.MmapEvents, true},
		{b.StatusBufBase, abi.MmapStatus, true},
		{b.RcvHdrTailBase, abi.MmapRTail, c.Info.RuntimeFlags&abi.CapDMARtail != 0},
		{b.SDMACompBufBase, abi.MmapSDMAComp, c.Info.RuntimeFlags&abi.CapSDMA != 0},
		// hfi1's USER_INFO has no RHEQ token; OPX builds it ([O] opx_hfi1_cn5000.h).
		{abi.MakeToken(abi.MmapRcvRHEQ, c.Info.Ctxt, c.Info.Subctxt, 0), abi.MmapRcvRHEQ, c.Chip != abi.ChipWFR},
	}
	for _, r := range regions {
		if !r.use {
			continue
		}
		if err := c.mapRegion(r.tok, r.want); err != nil {
			return err
		}
	}
	c.pio = newPIO(c)
	c.rcv = newReceiver(c)
	c.sdma = newSDMA(c)
	w, err := c.sys.NewWaker()
	if err != nil {
		return fmt.Errorf("hfidev: %s waker: %w", c.path, err)
	}
	c.waker = w
	return nil
}

func (c *Context) mapRegion(tok abi.Token, want abi.MmapType) error {
	if !tok.Valid() || tok.Type() != want || tok.Ctxt() != c.Info.Ctxt&0xff || tok.Subctxt() != c.Info.Subctxt {
		return fmt.Errorf("%w: %v token %#x for ctxt %d.%d", ErrBadToken, want, uint64(tok), c.Info.Ctxt, c.Info.Subctxt)
	}
	length := abi.RegionLen(want, &c.Info, c.Chip)
	r, err := c.sys.Mmap(c.fd, tok.MapOffset(), length, abi.RegionProt(want), abi.MapShared)
	if err != nil {
		return fmt.Errorf("hfidev: %s mmap %v (token %#x, %d bytes): %w", c.path, want, uint64(tok), length, err)
	}
	c.maps[want] = Mapping{Type: want, Token: tok, Region: r, Off: tok.PageOffset()}
	if tok.PageOffset()+8 > r.Len() {
		return fmt.Errorf("%w: %v offset %#x beyond %d-byte mapping", ErrBadToken, want, tok.PageOffset(), r.Len())
	}
	return nil
}

// Region returns the mapping of type t; its Region is nil if the context
// has none (RTAIL without CapDMARtail, RHEQ on WFR, …).
func (c *Context) Region(t abi.MmapType) Mapping {
	if int(t) >= len(c.maps) {
		return Mapping{}
	}
	return c.maps[t]
}

// CreditReturn reads the send context's credit-return word.
func (c *Context) CreditReturn() abi.CreditReturn {
	m := &c.maps[abi.MmapPIOCred]
	return abi.CreditReturn(m.Region.Load64(m.Off))
}

// Events reads this (context, subcontext)'s event bits (abi.EventFrozen,
// abi.EventLinkDown, abi.EventLIDChange, abi.EventTIDMMUNotify…). They
// stay set until acknowledged (AckEvents; TIDInvalidated clears
// abi.EventTIDMMUNotify).
func (c *Context) Events() uint64 {
	m := &c.maps[abi.MmapEvents]
	return m.Region.Load64(m.Off)
}

// AckEvents clears event bits (ACK_EVENT): the driver clears those of
// bits up to abi.EventMaxBit in this context's word and ignores the rest.
// It does not allocate.
func (c *Context) AckEvents(bits uint64) error {
	le.PutUint64(c.ackArg[:], bits)
	return c.ioctl(abi.IoctlAckEvent, c.ackArg[:])
}

// Status reads the unit's STATUS page: dev and port status bits
// (abi.StatusIBReady in Port while the link is ACTIVE).
func (c *Context) Status() abi.Status {
	m := &c.maps[abi.MmapStatus]
	return abi.Status{Dev: m.Region.Load64(abi.StatusDevOff), Port: m.Region.Load64(abi.StatusPortOff)}
}

// LinkUp reports whether the port's link is ACTIVE (the STATUS page's
// abi.StatusIBReady).
func (c *Context) LinkUp() bool { return c.Status().LinkUp() }

// CreditUpdate asks the chip for a credit return now (CREDIT_UPD).
func (c *Context) CreditUpdate() error { return c.ioctl(abi.IoctlCreditUpd, nil) }

// PIO is the context's PIO sender.
func (c *Context) PIO() *PIO { return c.pio }

// SDMA is the context's user SDMA submitter; nil without HFI1_CAP_SDMA.
func (c *Context) SDMA() *SDMA { return c.sdma }

// Receiver is the context's RcvHdrQ poller.
func (c *Context) Receiver() *Receiver { return c.rcv }

// Reset restarts a halted send context (CTXT_RESET; ENOLCK if it has not
// halted) and rewinds the PIO sender to match.
//
// After a freeze (Events has abi.EventFrozen: the chip froze, on a link
// down for one, halting the send context and disabling the receive
// context) CTXT_RESET also enables the receive context again, which
// restarts its RcvHdrQ at entry 0 with RcvSeq 1, zeroed, and its eager
// index at 0. Reset then first acknowledges abi.EventFrozen and restarts
// the Receiver to match, as PSM does (spio_reset_hfi_internal): entries
// not yet polled are lost, and a packet held by Poll must not be used
// afterwards. A freeze that comes between the acknowledgement and the
// ioctl is not told apart (as in PSM).
func (c *Context) Reset() error {
	if c.Events()&abi.EventFrozen != 0 {
		if err := c.AckEvents(abi.EventFrozen); err != nil {
			return err
		}
		c.rcv.restart()
		c.rcvOff = false // CTXT_RESET enables the receive context after a freeze
	}
	if err := c.ioctl(abi.IoctlCtxtReset, nil); err != nil {
		return err
	}
	c.pio.reset()
	return nil
}

// restart puts the receiver where the chip's receive context starts when
// it is enabled (hfi1_rcvctrl CTXT_ENB): head 0, RcvSeq 1, eager head 0,
// nothing held or left to write.
func (r *Receiver) restart() {
	r.head, r.seq, r.unwritten, r.egrHead, r.held = 0, abi.RcvSeqFirst, 0, 0, false
}

// Close unmaps every region and closes the device, which releases the
// context. It returns the first error, having tried everything.
func (c *Context) Close() error {
	var errs []error
	for i := range c.maps {
		m := &c.maps[i]
		if m.Region == nil {
			continue
		}
		if err := c.sys.Munmap(m.Region); err != nil {
			errs = append(errs, fmt.Errorf("hfidev: munmap %v: %w", m.Type, err))
		}
		*m = Mapping{}
	}
	c.wakeMu.Lock()
	if c.waker != nil {
		if err := c.waker.Close(); err != nil {
			errs = append(errs, fmt.Errorf("hfidev: close waker: %w", err))
		}
		c.waker = nil
	}
	c.wakeMu.Unlock()
	if c.fd >= 0 {
		if err := c.sys.Close(c.fd); err != nil {
			errs = append(errs, fmt.Errorf("hfidev: close %s: %w", c.path, err))
		}
		c.fd = -1
	}
	return errors.Join(errs...)
}
