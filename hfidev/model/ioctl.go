package model

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

var le = binary.LittleEndian

// Ioctl implements sys.Sys, following hfi1_file_ioctl: only ASSIGN_CTXT and
// GET_VERS work before a context exists (else EINVAL), unknown commands
// give EINVAL, and each handler checks its size before copying.
func (u *Unit) Ioctl(fd int, cmd uint32, arg []byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	f, ok := u.files[fd]
	if !ok {
		return unix.EBADF
	}
	// copy_{from,to}_user on a buffer shorter than the structure faults;
	// the real seam refuses the same call before the kernel sees it.
	if len(arg) < abi.IOCSize(cmd) {
		return unix.EFAULT
	}
	if cmd != abi.IoctlAssignCtxt && cmd != abi.IoctlGetVers && f.ctxt == nil {
		return unix.EINVAL
	}
	switch cmd {
	case abi.IoctlGetVers:
		le.PutUint32(arg, abi.UserVersion)
		return nil
	case abi.IoctlAssignCtxt:
		return u.assignCtxt(f, arg)
	case abi.IoctlCtxtInfo:
		u.ctxtInfo(f).Marshal(arg)
		return nil
	case abi.IoctlUserInfo:
		u.baseInfo(f).Marshal(arg)
		return nil
	case abi.IoctlCreditUpd:
		f.ctxt.send.force()
		return nil
	case abi.IoctlCtxtReset:
		return u.ctxtReset(f.ctxt)
	case abi.IoctlAckEvent:
		u.ackEvents(f, le.Uint64(arg))
		return nil
	case abi.IoctlTIDUpdate, abi.IoctlTIDFree, abi.IoctlTIDInvalRead:
		return tidIoctl(f.ctxt.tids, cmd, arg)
	case abi.IoctlRecvCtrl:
		u.recvCtrl(f, int32(le.Uint32(arg)) != 0)
		return nil
	case abi.IoctlPollType:
		// (typeof(uctxt->poll_type))uval: the int's low 16 bits, unchecked.
		f.ctxt.pollType = uint16(le.Uint32(arg))
		return nil
	case abi.IoctlSetPKey:
		return fmt.Errorf("%s: %w", abi.IoctlName(cmd), ErrNotModeled)
	}
	return unix.EINVAL
}

// assignCtxt follows the Cornelis driver's assign_ctxt and
// hfi1_do_assign_ctxt, check for check.
func (u *Unit) assignCtxt(f *file, arg []byte) error {
	var ui abi.UserInfo
	ui.Unmarshal(arg)
	if ui.UserVersion>>abi.SWMajorShift != abi.SWMajor {
		return unix.ENODEV
	}
	pidx := ui.Pad & abi.UserPadPortMask
	kdethHdr := ui.Pad >> abi.UserPadKDETHHdrShift & abi.UserPadKDETHHdrMask
	if int(pidx) >= u.cfg.Ports || kdethHdr == 1 || ui.Pad>>abi.UserPadUnusedShift != 0 {
		return unix.EINVAL
	}
	if f.ctxt != nil {
		return unix.EINVAL
	}
	if ui.SubctxtCnt > abi.MaxSharedCtxts {
		return unix.EINVAL
	}
	if ui.SubctxtCnt != 0 {
		return fmt.Errorf("context sharing (subctxt_cnt %d): %w", ui.SubctxtCnt, ErrNotModeled)
	}
	for i, c := range u.ctxts {
		if c == nil {
			c = u.newContext(i)
			u.ctxts[i] = c
			u.rcvOff[i].Store(false)
			u.rcv[i].Store(c.rcv)
			f.ctxt = c
			return nil
		}
	}
	return unix.EBUSY
}

func (u *Unit) newContext(i int) *context {
	cfg := &u.cfg
	c := &context{
		idx:      i,
		num:      uint16(cfg.FirstUserCtxt + i),
		sendCtxt: uint16(cfg.FirstSendCtxt + i),
		jkey:     cfg.JKey,
	}
	ci := u.ctxtInfoFor(c, 0)
	c.hdrq = alignedBytes(abi.RegionLen(abi.MmapRcvHdrQ, &ci, cfg.Chip))
	c.egr = alignedBytes(abi.RegionLen(abi.MmapRcvEgrBuf, &ci, cfg.Chip))
	c.uregs = alignedBytes(abi.RegionLen(abi.MmapURegs, &ci, cfg.Chip))
	if cfg.Caps&abi.CapDMARtail != 0 {
		c.rtail = alignedBytes(abi.PageSize)
	}
	if cfg.Chip != abi.ChipWFR {
		c.rheq = alignedBytes(abi.RegionLen(abi.MmapRcvRHEQ, &ci, cfg.Chip))
	}
	if cfg.Caps&abi.CapSDMA != 0 {
		c.comp = alignedBytes(abi.RegionLen(abi.MmapSDMAComp, &ci, cfg.Chip))
		c.sdma = newSDMAQueue(c.comp, int(cfg.SDMARingSize))
	}
	off := u.creditOff(c)
	c.send = &sendCtxt{
		num:       c.sendCtxt,
		credits:   int(cfg.Credits),
		threshold: cfg.creditThreshold(),
		hold:      cfg.HoldCreditReturns,
		word:      u.credits[off : off+8],
		egress:    &u.egress,
		buf:       make([]byte, int(cfg.Credits)*abi.PIOBlockSize),
	}
	// A freshly enabled send context has returned nothing yet.
	storeWord(c.send.word, 0, 0)
	c.tids = newRcvArray(cfg, (*uint64)(unsafe.Pointer(&u.events[u.eventOff(c, 0)])))
	c.rcv = newRcvCtxt(cfg, c)
	pioLen := abi.RegionLen(abi.MmapPIOBufs, &ci, cfg.Chip)
	c.pio = newPIORegion(pioLen, false, c.send)
	c.sop = newPIORegion(pioLen, true, c.send)
	return c
}

func (u *Unit) ctxtInfoFor(c *context, subctxt uint16) abi.CtxtInfo {
	cfg := &u.cfg
	return abi.CtxtInfo{
		RuntimeFlags:   cfg.Caps,
		RcvEgrSize:     cfg.RcvEgrSize,
		NumActive:      1,
		Unit:           uint16(cfg.Unit),
		Ctxt:           c.num,
		Subctxt:        subctxt,
		RcvTIDs:        cfg.RcvTIDs,
		Credits:        cfg.Credits,
		NumaNode:       cfg.NumaNode,
		RecCPU:         0xffff, // rec_cpu_num −1: no affinity in the model
		SendCtxt:       c.sendCtxt,
		EgrTIDs:        cfg.EgrTIDs,
		RcvHdrqCnt:     cfg.RcvHdrqCnt,
		RcvHdrqEntSize: cfg.RcvHdrqEntSize,
		SDMARingSize:   cfg.SDMARingSize,
	}
}

func (u *Unit) ctxtInfo(f *file) *abi.CtxtInfo {
	ci := u.ctxtInfoFor(f.ctxt, f.subctxt)
	return &ci
}

// baseInfo builds the tokens as get_base_info does: every token carries the
// context, the file's subcontext and the in-page offset of the object.
func (u *Unit) baseInfo(f *file) *abi.BaseInfo {
	c, sub := f.ctxt, f.subctxt
	swInterface := uint8(3)
	if u.cfg.Chip != abi.ChipWFR {
		swInterface = 4
	}
	bi := &abi.BaseInfo{
		HWVersion:       abi.MakeHWVersion(u.cfg.Chip, swInterface, 0),
		SWVersion:       abi.UserVersion,
		JKey:            c.jkey,
		BTHQP:           abi.KDETHQPPrefix,
		SCCreditsAddr:   abi.MakeToken(abi.MmapPIOCred, c.num, sub, uint64(u.creditOff(c))),
		PIOBufBaseSOP:   abi.MakeToken(abi.MmapPIOBufsSOP, c.num, sub, 0),
		PIOBufBase:      abi.MakeToken(abi.MmapPIOBufs, c.num, sub, 0),
		RcvHdrBufBase:   abi.MakeToken(abi.MmapRcvHdrQ, c.num, sub, 0),
		RcvEgrBufBase:   abi.MakeToken(abi.MmapRcvEgrBuf, c.num, sub, 0),
		SDMACompBufBase: abi.MakeToken(abi.MmapSDMAComp, c.num, sub, 0),
		UserRegBase:     abi.MakeToken(abi.MmapURegs, c.num, sub, 0),
		EventsBufBase:   abi.MakeToken(abi.MmapEvents, c.num, sub, uint64(u.eventOff(c, sub))),
		StatusBufBase:   abi.MakeToken(abi.MmapStatus, c.num, sub, 0),
	}
	if u.cfg.Caps&abi.CapDMARtail != 0 {
		bi.RcvHdrTailBase = abi.MakeToken(abi.MmapRTail, c.num, sub, 0)
	}
	return bi
}
