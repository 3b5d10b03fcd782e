package model

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// pair is two units on a wire, a context assigned on each.
type pair struct {
	u   [2]*Unit
	fd  [2]int
	w   *Wire
	cfg [2]Config
}

func newPair(t *testing.T, chip abi.Chip) *pair {
	t.Helper()
	var p pair
	for i := range p.u {
		p.cfg[i] = DefaultConfig(chip)
		p.cfg[i].Unit, p.cfg[i].LID = i, uint16(i+1)
		p.u[i] = newUnit(t, p.cfg[i])
		p.fd[i] = open(t, p.u[i])
		assign(t, p.u[i], p.fd[i])
	}
	p.w = Connect(p.u[0], p.u[1])
	return &p
}

func (p *pair) ctxt(i int) *context { return p.u[i].files[p.fd[i]].ctxt }

// mapWord maps the region of token tok through fd and returns it with
// the object's offset in it, as a context does.
func mapWord(t *testing.T, u *Unit, fd int, tok abi.Token) (sys.Region, int) {
	t.Helper()
	r, err := u.Mmap(fd, tok.MapOffset(), abi.PageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	return r, tok.PageOffset()
}

// send hands a packet for unit to's context to the sender's egress, as a
// completed PIO packet would be (PBC first).
func (p *pair) send(from int, n int, fill byte) {
	to := 1 - from
	pkt := append(make([]byte, abi.PBCSize), kdeth(&p.cfg[to], p.ctxt(to).num, n, fill)...)
	(*p.u[from].egress.Load())(0, pkt)
}

func ackErr(u *Unit, fd int, bits uint64) error {
	b := make([]byte, 8)
	le.PutUint64(b, bits)
	return u.Ioctl(fd, abi.IoctlAckEvent, b)
}

// A link down, as the driver handles it ([K] chip.c goto_offline,
// intr.c handle_linkup_change, start_freeze_handling): the status page
// loses IB_CONF and IB_READY; every user context gets FROZEN and
// LINKDOWN, its send context halts and its receive context is disabled;
// SDMA fails with ECOMM; the wire drops. Link up restores the status
// page and SDMA but not the contexts; CTXT_RESET re-enables receive with
// the RcvHdrQ restarted at entry 0, RcvSeq 1. ACK_EVENT clears the bits
// it is given, up to bit 5.
func TestLinkDown(t *testing.T) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		t.Run(chip.String(), func(t *testing.T) {
			p := newPair(t, chip)
			u, fd, c := p.u[1], p.fd[1], p.ctxt(1)
			_, bi := info(t, u, fd)
			st, stOff := mapWord(t, u, fd, bi.StatusBufBase)
			ev, evOff := mapWord(t, u, fd, bi.EventsBufBase)
			cr, crOff := mapWord(t, u, fd, bi.SCCreditsAddr)
			up := abi.StatusChipPresent | abi.StatusInitted | abi.StatusIBConf | abi.StatusIBReady
			if d, port := st.Load64(stOff+abi.StatusDevOff), st.Load64(stOff+abi.StatusPortOff); d != abi.StatusChipPresent|abi.StatusInitted || port != up {
				t.Fatalf("status dev %#x port %#x at start", d, port)
			}
			if ev.Load64(evOff) != 0 || !p.w.LinkUp() || !u.Status().LinkUp() {
				t.Fatal("events or link down at start")
			}
			p.send(0, 64, 1) // entry 0
			p.send(0, 64, 2) // entry 1

			p.w.SetLinkUp(false)
			if port := st.Load64(stOff + abi.StatusPortOff); port != abi.StatusChipPresent|abi.StatusInitted {
				t.Errorf("status port %#x with the link down", port)
			}
			for i := range p.u {
				_, bi := info(t, p.u[i], p.fd[i])
				r, off := mapWord(t, p.u[i], p.fd[i], bi.EventsBufBase)
				if got := r.Load64(off); got != abi.EventFrozen|abi.EventLinkDown {
					t.Errorf("unit %d: events %#x", i, got)
				}
			}
			if !abi.CreditReturn(cr.Load64(crOff)).Halted() {
				t.Error("send context not halted by the freeze")
			}
			p.send(0, 64, 3)
			if s := p.w.Stats(); s.LinkDown != 1 || s.Carried != 2 {
				t.Errorf("wire %+v", s)
			}
			u.Ingress(kdeth(&p.cfg[1], c.num, 64, 4)) // straight in: the context is disabled
			if s := u.IngressStats(); s.Disabled != 1 || s.Delivered != 2 {
				t.Errorf("ingress %+v", s)
			}
			iov := sdmaReq(&p.cfg[1], c.num, 0, 4096, 100)
			if _, err := u.Writev(fd, iov); !errors.Is(err, unix.ECOMM) {
				t.Errorf("SDMA with the link down: %v, want ECOMM", err)
			}

			// ACK_EVENT: the bits given, up to bit 5; a short argument faults.
			if err := ackErr(u, fd, abi.EventLinkDown|1<<40); err != nil {
				t.Fatal(err)
			}
			if got := ev.Load64(evOff); got != abi.EventFrozen {
				t.Errorf("events %#x after acking LINKDOWN", got)
			}
			if err := u.Ioctl(fd, abi.IoctlAckEvent, make([]byte, 7)); !errors.Is(err, unix.EFAULT) {
				t.Errorf("short ACK_EVENT: %v", err)
			}
			p.w.SetLinkUp(false) // no change, no event
			if got := ev.Load64(evOff); got != abi.EventFrozen {
				t.Errorf("events %#x after a second SetLinkUp(false)", got)
			}

			p.w.SetLinkUp(true)
			if port := st.Load64(stOff + abi.StatusPortOff); port != up || !p.w.LinkUp() {
				t.Errorf("status port %#x after link up", port)
			}
			if got := ev.Load64(evOff); got != abi.EventFrozen {
				t.Errorf("events %#x after link up", got)
			}
			p.send(0, 64, 5) // still disabled until CTXT_RESET
			if s := u.IngressStats(); s.Disabled != 2 {
				t.Errorf("ingress %+v", s)
			}
			if _, err := u.Writev(fd, sdmaReq(&p.cfg[1], c.num, 1, 4096, 100)); err != nil {
				t.Errorf("SDMA after link up: %v", err)
			}

			if err := u.Ioctl(fd, abi.IoctlCtxtReset, nil); err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(c.hdrq); off += 8 {
				if loadWord(c.hdrq, off) != 0 {
					t.Fatalf("RcvHdrQ not zeroed at %d", off)
				}
			}
			for _, reg := range []int{abi.URegRcvHdrTail, abi.URegRcvHdrHead, abi.URegRcvEgrIndexHead, abi.URegRcvEgrIndexTail} {
				if loadWord(c.uregs, reg) != 0 {
					t.Errorf("ureg %#x = %d after the restart", reg, loadWord(c.uregs, reg))
				}
			}
			cw := abi.CreditReturn(cr.Load64(crOff))
			if cw.Halted() || cw.FreeCounter() != 0 {
				t.Errorf("credit word %#x after CTXT_RESET", uint64(cw))
			}
			p.send(0, 64, 6)
			rhf := loadWord(c.hdrq, int(p.cfg[1].RcvHdrqEntSize)-abi.RHFSize)
			seq := abi.RHF(rhf).RcvSeq()
			if chip != abi.ChipWFR {
				seq = abi.RHFJKR(rhf).RcvSeq()
			}
			if seq != abi.RcvSeqFirst || abi.RHF(rhf).EgrIndex() != 0 || abi.RHF(rhf).EgrOffset() != 0 {
				t.Errorf("first entry after the restart: RHF %#x", rhf)
			}
			if s := u.IngressStats(); s.Delivered != 3 {
				t.Errorf("ingress %+v", s)
			}
			if err := u.Ioctl(fd, abi.IoctlCtxtReset, nil); !errors.Is(err, unix.ENOLCK) {
				t.Errorf("second CTXT_RESET: %v, want ENOLCK", err)
			}
			// An ordinary halt's reset leaves the receive queue alone.
			c.send.mu.Lock()
			c.send.halt()
			c.send.mu.Unlock()
			if err := u.Ioctl(fd, abi.IoctlCtxtReset, nil); err != nil {
				t.Fatal(err)
			}
			if loadWord(c.hdrq, int(p.cfg[1].RcvHdrqEntSize)-abi.RHFSize) != rhf {
				t.Error("a reset without a freeze restarted the receive queue")
			}
			if err := ackErr(u, fd, abi.EventMask); err != nil || ev.Load64(evOff) != 0 {
				t.Errorf("ack all: %v, events %#x", err, ev.Load64(evOff))
			}
		})
	}
}

// A context assigned while the link is down is neither frozen nor told;
// closing a file clears its event word for the next.
func TestLinkDownNewContext(t *testing.T) {
	p := newPair(t, abi.ChipWFR)
	u := p.u[1]
	p.w.SetLinkUp(false)
	if err := u.Close(p.fd[1]); err != nil {
		t.Fatal(err)
	}
	fd := open(t, u)
	assign(t, u, fd)
	_, bi := info(t, u, fd)
	ev, off := mapWord(t, u, fd, bi.EventsBufBase)
	if got := ev.Load64(off); got != 0 {
		t.Errorf("events %#x on a new context", got)
	}
	u.Ingress(kdeth(&p.cfg[1], u.files[fd].ctxt.num, 8, 1))
	if s := u.IngressStats(); s.Delivered != 1 || s.Disabled != 0 {
		t.Errorf("ingress %+v", s)
	}
}

// SetLID: EventLIDChange in every context; packets for the old LID are
// not local any more, those for the new one are delivered.
func TestSetLID(t *testing.T) {
	p := newPair(t, abi.ChipJKR)
	u, fd, c := p.u[1], p.fd[1], p.ctxt(1)
	_, bi := info(t, u, fd)
	ev, off := mapWord(t, u, fd, bi.EventsBufBase)
	if err := u.SetLID(p.cfg[1].LID); err != nil || ev.Load64(off) != 0 {
		t.Fatalf("same LID: %v, events %#x", err, ev.Load64(off))
	}
	for _, bad := range []uint16{0, 0xc000, 0xffff} {
		if err := u.SetLID(bad); err == nil {
			t.Errorf("LID %#x accepted", bad)
		}
	}
	if err := u.SetLID(9); err != nil {
		t.Fatal(err)
	}
	if got := ev.Load64(off); got != abi.EventLIDChange {
		t.Errorf("events %#x", got)
	}
	if u.LID() != 9 || u.Config().LID != 9 {
		t.Errorf("LID %d, Config().LID %d", u.LID(), u.Config().LID)
	}
	u.Ingress(kdeth(&p.cfg[1], c.num, 8, 1)) // the old LID
	cfg := p.cfg[1]
	cfg.LID = 9
	u.Ingress(kdeth(&cfg, c.num, 8, 2))
	if s := u.IngressStats(); s.NotLocal != 1 || s.Delivered != 1 {
		t.Errorf("ingress %+v", s)
	}
}

// SetFault: each kind counted once; drop and fault functions are
// independent; the sender's packet is never changed.
func TestWireFaultCounts(t *testing.T) {
	p := newPair(t, abi.ChipWFR)
	kinds := []Fault{FaultNone, FaultDrop, FaultICRC, FaultECC, FaultLen, FaultICRC, Fault(99)}
	i := 0
	var sent [][]byte
	p.w.SetFault(func(_ *Unit, pkt []byte) Fault {
		sent = append(sent, pkt)
		k := kinds[i]
		i++
		return k
	})
	for range kinds {
		p.send(0, 64, 7)
	}
	want := kdeth(&p.cfg[1], p.ctxt(1).num, 64, 7)
	for _, s := range sent {
		if string(s) != string(want) {
			t.Fatal("the wire changed the sender's packet")
		}
	}
	if s := p.w.Stats(); s != (WireStats{Carried: 6, Dropped: 1, ICRC: 2, ECC: 1, Len: 1}) {
		t.Errorf("wire %+v", s)
	}
	p.w.SetDrop(func(*Unit, []byte) bool { return true })
	p.send(0, 64, 7)
	p.w.SetDrop(nil)
	p.w.SetFault(nil)
	p.send(0, 64, 7)
	if s := p.w.Stats(); s.Dropped != 2 || s.Carried != 7 {
		t.Errorf("wire %+v", s)
	}
	if rs, _ := p.u[1].RcvStats(p.ctxt(1).num); rs.Packets != 7 || rs.LenErr != 1 {
		t.Errorf("receive %+v", rs)
	}
}
