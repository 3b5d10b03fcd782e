package model

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// The port's link state and LID, and what the hfi1 driver does to user
// contexts when they change ([K] is the Cornelis driver, opa-hfi1@bfb3da4):
//
//   - Link down (chip.c goto_offline, intr.c handle_linkup_change): the
//     STATUS page's port word loses StatusIBConf and StatusIBReady
//     (update_statusp, IB_PORT_DOWN); the chip freezes
//     (start_freeze_handling, FREEZE_SELF|FREEZE_LINK_DOWN): every send
//     context is stopped (SCF_FROZEN|SCF_HALTED), EventFrozen is set in
//     every user context's event word, and the freeze work disables every
//     receive context (rxe_freeze) and re-enables only the kernel's
//     (rxe_kernel_unfreeze); the SDMA engines leave the running state
//     until the link is ACTIVE again (sdma_freeze_notify with link_down;
//     user SDMA then fails with ECOMM); last EventLinkDown is set.
//   - Link up: StatusIBConf (ARMED) and StatusIBReady (ACTIVE) come back
//     and the SDMA engines run again (sdma_all_running). No event bit:
//     user contexts stay halted and disabled until their CTXT_RESET.
//   - CTXT_RESET of a frozen context (file_ops.c ctxt_reset): the send
//     context is disabled and enabled again, credits returned, and the
//     receive context enabled (hfi1_rcvctrl CTXT_ENB from disabled), which
//     restarts its RcvHdrQ: the queue zeroed, the tail, RcvHdrHead and
//     RcvEgrIndexHead at 0, the next RcvSeq 1. User space must restart
//     its receive state first (PSM's spio_reset_hfi_internal does).
//   - LID change (mad.c __subn_set_opa_portinfo): EventLIDChange.
//
// The model freezes and unfreezes at once (the driver's freeze work takes
// milliseconds; CTXT_RESET waits for it). Inferences: the credit-return
// word of a frozen send context shows Status (halted), as for any other
// halt (the sources only set the driver's SCF_HALTED; CREDIT_UPD on such a
// context would show it); the RTAIL page reads 0 after the restart (the
// chip resets its tail on enable; whether it writes the page then is not
// in the sources).

// initStatus fills the STATUS page as the driver leaves it with the chip
// initialised (init.c: StatusChipPresent|StatusInitted in dev and port)
// and the port ACTIVE.
func (u *Unit) initStatus() {
	storeWord(u.status, abi.StatusDevOff, abi.StatusChipPresent|abi.StatusInitted)
	storeWord(u.status, abi.StatusPortOff,
		abi.StatusChipPresent|abi.StatusInitted|abi.StatusIBConf|abi.StatusIBReady)
}

func (u *Unit) statusPort() *uint64 {
	return (*uint64)(unsafe.Pointer(&u.status[abi.StatusPortOff]))
}

// Status returns the STATUS page's words, as a context maps them.
func (u *Unit) Status() abi.Status {
	return abi.Status{Dev: loadWord(u.status, abi.StatusDevOff), Port: loadWord(u.status, abi.StatusPortOff)}
}

// LinkUp reports whether the port's link is up (ACTIVE).
func (u *Unit) LinkUp() bool { return !u.portDown.Load() }

// SetLinkUp takes the port's link down or brings it up, doing to user
// contexts what the driver does (above). Wire.SetLinkUp calls it on both
// ends; while either end is down the wire drops what it is given.
func (u *Unit) SetLinkUp(up bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.portDown.Load() != up {
		return // no change
	}
	if up {
		atomic.OrUint64(u.statusPort(), abi.StatusIBConf|abi.StatusIBReady)
		u.portDown.Store(false)
		return
	}
	u.portDown.Store(true) // the SDMA engines stop
	atomic.AndUint64(u.statusPort(), ^(abi.StatusIBConf | abi.StatusIBReady))
	for _, c := range u.ctxts {
		if c == nil {
			continue
		}
		c.frozen = true
		c.send.freeze()
		u.rcvOff[c.idx].Store(true)
	}
	u.setEvents(abi.EventFrozen)
	u.setEvents(abi.EventLinkDown)
}

// LID is the port's LID: Config.LID until SetLID changes it.
func (u *Unit) LID() uint16 { return uint16(u.lid.Load()) }

// SetLID gives the port another LID, as the subnet manager does: packets
// for the old LID are dropped from now on (IngressStats.NotLocal), and
// every user context gets EventLIDChange. The LID must be a 9B unicast
// LID (1..0xBFFF). Peers' tables are not changed.
func (u *Unit) SetLID(lid uint16) error {
	if lid == 0 || lid >= 0xc000 {
		return fmt.Errorf("model: LID %#x is not a unicast LID", lid)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.LID() == lid {
		return nil
	}
	u.lid.Store(uint32(lid))
	u.setEvents(abi.EventLIDChange)
	return nil
}

// setEvents sets bits in every assigned context's event word (without
// sharing, subcontext 0's), as hfi1_set_uevent_bits does. Under u.mu.
func (u *Unit) setEvents(bits uint64) {
	for _, c := range u.ctxts {
		if c != nil {
			atomic.OrUint64(u.eventWord(c, 0), bits)
		}
	}
}

func (u *Unit) eventWord(c *context, subctxt uint16) *uint64 {
	return (*uint64)(unsafe.Pointer(&u.events[u.eventOff(c, subctxt)]))
}

// ackEvents is ACK_EVENT (file_ops.c user_event_ack): the bits of ack up
// to _HFI1_MAX_EVENT_BIT are cleared in the file's event word, the others
// ignored. Under u.mu.
func (u *Unit) ackEvents(f *file, ack uint64) {
	atomic.AndUint64(u.eventWord(f.ctxt, f.subctxt), ^(ack & abi.EventMask))
}

// ctxtReset is CTXT_RESET (file_ops.c ctxt_reset): ENOLCK unless the send
// context has halted; it restarts with its credits returned, and after a
// freeze the receive context is enabled again, its RcvHdrQ restarted.
// Under u.mu.
func (u *Unit) ctxtReset(c *context) error {
	if err := c.send.reset(); err != nil {
		return err
	}
	if c.frozen {
		// hfi1_rcvctrl(CTXT_ENB): the queue restarts only if the
		// context is still disabled (a RECV_CTRL may have enabled it).
		c.frozen = false
		if u.rcvOff[c.idx].Load() {
			c.rcv.restart()
			u.rcvOff[c.idx].Store(false)
		}
	}
	return nil
}

// freeze stops the send context as the chip's freeze does: stores are
// ignored until CTXT_RESET, and the credit-return word says halted.
func (s *sendCtxt) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.halted {
		s.halt()
	}
}

// restart is hfi1_rcvctrl(CTXT_ENB) on a disabled receive context: the
// queue is zeroed (so that no stale RcvSeq reads as new), the tail and the
// head registers written by the driver go to 0, the next entry is 0 with
// RcvSeq 1, and eager filling starts again at buffer 0.
func (r *rcvCtxt) restart() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for off := 0; off+8 <= len(r.hdrq); off += 8 {
		storeWord(r.hdrq, off, 0)
	}
	r.tail, r.seq = 0, abi.RcvSeqFirst
	r.egrTail, r.egrOff, r.egrUsed = 0, 0, false
	for _, reg := range []int{abi.URegRcvHdrTail, abi.URegRcvHdrHead, abi.URegRcvEgrIndexTail,
		abi.URegRcvEgrIndexHead, abi.URegRcvEgrOffsetTail} {
		storeWord(r.uregs, reg, 0)
	}
	if r.rtail != nil {
		storeWord(r.rtail, 0, 0)
	}
}
