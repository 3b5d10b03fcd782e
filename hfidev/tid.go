package hfidev

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// ErrTIDBuffer: a buffer TIDUpdate cannot pass to the driver (empty, not
// page-aligned, or longer than a u32 length).
var ErrTIDBuffer = errors.New("hfidev: TID buffer not page-aligned or too long")

// TIDMap is a buffer programmed for expected receive: the RcvArray entries
// TID_UPDATE returned for it, in buffer order. A peer sends into it with
// SDMA.SubmitExpected, naming Entries and an offset; the chip writes the
// payload straight into Buf.
type TIDMap struct {
	// Buf is the part of the buffer the entries cover, from its start:
	// all of it, or less when the context's RcvArray share ran short (a
	// partial TID_UPDATE).
	Buf []byte
	// Entries are the tidlist entries (IDX, CTRL, LEN) covering Buf.
	Entries []abi.TIDEntry
}

// From returns the entries from the one holding byte off of Buf on, and
// off's offset in that entry: what SubmitExpected takes to send to Buf at
// off. False if off is outside Buf.
func (m *TIDMap) From(off int) ([]abi.TIDEntry, int, bool) {
	if off < 0 {
		return nil, 0, false
	}
	for i, e := range m.Entries {
		if off < e.Bytes() {
			return m.Entries[i:], off, true
		}
		off -= e.Bytes()
	}
	return nil, 0, false
}

// TIDUpdate programs buf for expected receive (TID_UPDATE). buf must be
// page-aligned (sys.AllocPages gives such memory) and must stay mapped
// and untouched by the chip's other users until TIDFree: the driver pins
// its pages and the chip writes them. When the context's share of the
// RcvArray runs out part-way the map covers less than buf; when none is
// left the error wraps ENOSPC. It allocates the map; TIDUpdateInto does
// not.
func (c *Context) TIDUpdate(buf []byte) (*TIDMap, error) {
	m := &TIDMap{}
	if err := c.TIDUpdateInto(buf, m); err != nil {
		return nil, err
	}
	return m, nil
}

// TIDUpdateInto is TIDUpdate into m, whose Entries' capacity it reuses
// (growing it only when too small): on a data path that programs buffers
// as it goes, nothing is allocated once m has grown. On error m is
// unchanged.
func (c *Context) TIDUpdateInto(buf []byte, m *TIDMap) error {
	if len(buf) == 0 || uint64(len(buf)) > 1<<32-1 || uintptr(unsafe.Pointer(&buf[0]))%abi.PageSize != 0 {
		return fmt.Errorf("%w: %d bytes", ErrTIDBuffer, len(buf))
	}
	list := c.tidScratch()
	ti := abi.TIDInfo{
		VAddr:   uint64(uintptr(unsafe.Pointer(&buf[0]))),
		TIDList: uint64(uintptr(unsafe.Pointer(&list[0]))),
		Length:  uint32(len(buf)),
	}
	if err := c.tidIoctl(abi.IoctlTIDUpdate, &ti); err != nil {
		return err
	}
	runtime.KeepAlive(buf)
	m.Buf = buf[:min(int(ti.Length), len(buf))]
	m.Entries = append(m.Entries[:0], list[:ti.TIDCnt]...)
	return nil
}

// TIDFree frees entries (TID_FREE). The driver frees them in order and
// stops at the first it refuses: EINVAL for CTRL 0 or 3, an index beyond
// the share, or more entries than are in use; EBADF for one this file
// does not own. Freed entries may still be named by packets in flight:
// those arrive as ErrTID.
func (c *Context) TIDFree(entries []abi.TIDEntry) error {
	if len(entries) == 0 {
		return nil
	}
	list := c.tidScratch()
	if len(entries) > len(list) {
		list = make([]abi.TIDEntry, len(entries))
	}
	copy(list, entries)
	ti := abi.TIDInfo{TIDList: uint64(uintptr(unsafe.Pointer(&list[0]))), TIDCnt: uint32(len(entries))}
	err := c.tidIoctl(abi.IoctlTIDFree, &ti)
	runtime.KeepAlive(list)
	return err
}

// TIDInvalidated appends to dst the entries the driver took from the chip
// since the last call because their memory went away (the MMU notifier;
// TID_INVAL_READ), which also clears abi.EventTIDMMUNotify in Events.
// They are still this context's: free them with TIDFree.
func (c *Context) TIDInvalidated(dst []abi.TIDEntry) ([]abi.TIDEntry, error) {
	list := c.tidScratch()
	ti := abi.TIDInfo{TIDList: uint64(uintptr(unsafe.Pointer(&list[0])))}
	if err := c.tidIoctl(abi.IoctlTIDInvalRead, &ti); err != nil {
		return dst, err
	}
	return append(dst, list[:ti.TIDCnt]...), nil
}

// tidScratch is the tidlist the TID ioctls read and write: on the heap
// (the driver and the model write through its address, so it must not
// move), as long as the context's whole RcvArray share.
func (c *Context) tidScratch() []abi.TIDEntry {
	if c.tids == nil {
		c.tids = make([]abi.TIDEntry, max(int(c.Info.RcvTIDs), abi.TIDGroupSize))
	}
	return c.tids
}

// tidIoctl passes ti through the context's own argument buffer: one on
// the stack would escape through the system-call seam, an allocation per
// call.
func (c *Context) tidIoctl(cmd uint32, ti *abi.TIDInfo) error {
	arg := c.tidArg[:]
	ti.Marshal(arg)
	err := c.ioctl(cmd, arg)
	runtime.KeepAlive(c.tids)
	ti.Unmarshal(arg)
	return err
}
