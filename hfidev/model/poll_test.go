package model

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

func intIoctl(u *Unit, fd int, cmd uint32, v int32) error {
	b := make([]byte, 4)
	le.PutUint32(b, uint32(v))
	return u.Ioctl(fd, cmd, b)
}

// kdethIntr is kdeth with KDETH.Intr set: a packet that raises the urgent
// interrupt.
func kdethIntr(cfg *Config, ctxt uint16, n int) []byte {
	pkt := kdeth(cfg, ctxt, n, 0)
	w := le.Uint32(pkt[abi.Header9BSize-36:]) // KDETH dword 0, little-endian
	le.PutUint32(pkt[abi.Header9BSize-36:], w|1<<28)
	if !abi.Header9B(pkt).KDETHIntr() {
		panic("KDETH.Intr not where the header says")
	}
	return pkt
}

// setHead writes RcvHdrHead as software does: the dword offset of entry.
func setHead(c *context, entry int) {
	storeWord(c.uregs, abi.URegRcvHdrHead, uint64(entry*c.rcv.entDWs))
}

// POLL_TYPE and RECV_CTRL take an int each, as the driver does
// (file_ops.c:310-318, manage_rcvq): a short argument is EFAULT; POLL_TYPE
// keeps any value's low 16 bits and poll answers POLLERR for types other
// than ANYRCV and URGENT; a file without a context answers POLLERR, an
// unknown descriptor POLLNVAL, a waker of another unit EINVAL.
func TestPollTypeArgs(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	u := newUnit(t, cfg)
	fd := open(t, u)
	if rev, _, err := u.Poll(fd, nil, 0); err != nil || rev != unix.POLLERR {
		t.Errorf("poll without a context: %#x, %v", rev, err)
	}
	if rev, _, err := u.Poll(99, nil, 0); err != nil || rev != unix.POLLNVAL {
		t.Errorf("poll on an unknown fd: %#x, %v", rev, err)
	}
	assign(t, u, fd)
	for _, cmd := range []uint32{abi.IoctlPollType, abi.IoctlRecvCtrl} {
		if err := u.Ioctl(fd, cmd, make([]byte, 3)); !errors.Is(err, unix.EFAULT) {
			t.Errorf("%s with 3 bytes: %v", abi.IoctlName(cmd), err)
		}
	}
	for _, c := range []struct {
		v   int32
		rev int16 // a poll that looks once at an empty queue
	}{
		{abi.PollTypeAnyRcv, 0}, {abi.PollTypeUrgent, 0}, {2, unix.POLLERR}, {-1, unix.POLLERR},
		{0x10000, 0}, {0x10001, 0}, {0x12345, unix.POLLERR},
	} {
		if err := intIoctl(u, fd, abi.IoctlPollType, c.v); err != nil {
			t.Fatalf("POLL_TYPE %#x: %v", c.v, err)
		}
		if got := u.files[fd].ctxt.pollType; got != uint16(c.v) {
			t.Errorf("POLL_TYPE %#x kept as %#x", c.v, got)
		}
		if rev, woken, err := u.Poll(fd, nil, 0); err != nil || woken || rev != c.rev {
			t.Errorf("POLL_TYPE %#x: poll %#x %v %v, want %#x", c.v, rev, woken, err, c.rev)
		}
	}
	other := newUnit(t, cfg)
	w, _ := other.NewWaker()
	if _, _, err := u.Poll(fd, w, 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("another unit's waker: %v", err)
	}
}

// RECV_CTRL enables or disables the receive context (manage_rcvq): zero
// disables it (packets dropped, counted Disabled), any other value enables
// it — from disabled with the queue restarted at entry 0, RcvSeq 1; when
// already enabled the queue is left alone but the RTAIL page is zeroed
// (clear_rcvhdrtail, unconditional). It always succeeds, and it does not
// touch the interrupt.
func TestRecvCtrl(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	cfg.Caps |= abi.CapDMARtail
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	ent := int(cfg.RcvHdrqEntSize)
	for range 3 {
		u.Ingress(kdeth(&cfg, c.num, 8, 1))
	}
	if c.rcv.tail != 3 || loadWord(c.rtail, 0) != uint64(3*ent/4) {
		t.Fatalf("tail %d, RTAIL %d", c.rcv.tail, loadWord(c.rtail, 0))
	}
	// Enabled already: the RTAIL page zeroed, nothing else.
	if err := intIoctl(u, fd, abi.IoctlRecvCtrl, 1); err != nil {
		t.Fatal(err)
	}
	if c.rcv.tail != 3 || loadWord(c.rtail, 0) != 0 || loadWord(c.hdrq, ent-8) == 0 {
		t.Errorf("enable while enabled: tail %d, RTAIL %d, entry 0's RHF %#x", c.rcv.tail, loadWord(c.rtail, 0), loadWord(c.hdrq, ent-8))
	}
	if err := intIoctl(u, fd, abi.IoctlRecvCtrl, 0); err != nil {
		t.Fatal(err)
	}
	u.Ingress(kdeth(&cfg, c.num, 8, 2))
	if s := u.IngressStats(); s.Disabled != 1 || c.rcv.tail != 3 {
		t.Errorf("disabled: %+v, tail %d", s, c.rcv.tail)
	}
	if err := intIoctl(u, fd, abi.IoctlRecvCtrl, -7); err != nil { // any nonzero enables
		t.Fatal(err)
	}
	if c.rcv.tail != 0 || loadWord(c.hdrq, ent-8) != 0 || loadWord(c.uregs, abi.URegRcvHdrHead) != 0 {
		t.Errorf("re-enabled: tail %d, entry 0's RHF %#x", c.rcv.tail, loadWord(c.hdrq, ent-8))
	}
	u.Ingress(kdeth(&cfg, c.num, 8, 3))
	if rhf := abi.RHF(loadWord(c.hdrq, ent-8)); rhf.RcvSeq() != abi.RcvSeqFirst || c.rcv.tail != 1 {
		t.Errorf("first entry after the restart: RcvSeq %d, tail %d", rhf.RcvSeq(), c.rcv.tail)
	}
	if s, _ := u.RcvStats(c.num); s.AvailInterrupts != 0 || s.UrgentInterrupts != 0 {
		t.Errorf("interrupts without a poll: %+v", s)
	}
}

// ANYRCV (poll_next): POLLIN while the tail differs from RcvHdrHead as
// written — a head that lags reports entries already read —, otherwise
// the poll arms IntrAvail and sleeps; the next packet interrupts, wakes it
// and disarms, so the packet after raises nothing. Entries that came
// before the poll are seen by its check without an interrupt (no lost
// wake-up). Timeout and waker end a sleep too.
func TestPollAnyRcv(t *testing.T) {
	cfg := DefaultConfig(abi.ChipJKR)
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	stats := func() RcvStats { s, _ := u.RcvStats(c.num); return s }

	// Nothing armed: a packet raises no interrupt; the poll that comes
	// after sees it at once.
	u.Ingress(kdeth(&cfg, c.num, 8, 1))
	if rev, _, err := u.Poll(fd, nil, time.Minute); err != nil || rev != unix.POLLIN {
		t.Fatalf("entry waiting: %#x, %v", rev, err)
	}
	if s, p := stats(), u.PollStats(); s.AvailInterrupts != 0 || p.Waits != 0 {
		t.Errorf("entry waiting: %+v, %+v", s, p)
	}
	// Read by software, but RcvHdrHead not written back: still POLLIN.
	if rev, _, _ := u.Poll(fd, nil, 0); rev != unix.POLLIN {
		t.Errorf("lagging head: %#x", rev)
	}
	setHead(c, 1)
	start := time.Now()
	if rev, woken, err := u.Poll(fd, nil, 20*time.Millisecond); err != nil || rev != 0 || woken || time.Since(start) < 20*time.Millisecond {
		t.Errorf("empty: %#x %v %v after %v", rev, woken, err, time.Since(start))
	}
	if p := u.PollStats(); p.Waits != 1 || p.TimedOut != 1 {
		t.Errorf("timeout: %+v", p)
	}

	// The timed-out poll left IntrAvail armed: the next packet
	// interrupts (nobody waiting any more) and disarms it.
	u.Ingress(kdeth(&cfg, c.num, 8, 2))
	u.Ingress(kdeth(&cfg, c.num, 8, 3))
	if s := stats(); s.AvailInterrupts != 1 {
		t.Errorf("armed by a finished poll: %d interrupts", s.AvailInterrupts)
	}
	setHead(c, 3)

	// A sleeping poll woken by the interrupt.
	done := make(chan int16)
	go func() {
		rev, _, _ := u.Poll(fd, nil, -1)
		done <- rev
	}()
	waitFor(t, func() bool { return u.PollStats().Waits == 2 })
	u.Ingress(kdeth(&cfg, c.num, 8, 4))
	if rev := <-done; rev != unix.POLLIN {
		t.Errorf("woken by the packet: %#x", rev)
	}
	if s, p := stats(), u.PollStats(); s.AvailInterrupts != 2 || p.Interrupted != 1 {
		t.Errorf("interrupt: %+v, %+v", s, p)
	}
	u.Ingress(kdeth(&cfg, c.num, 8, 5))
	if s := stats(); s.AvailInterrupts != 2 {
		t.Errorf("disarmed by the interrupt, yet %d interrupts", s.AvailInterrupts)
	}
	setHead(c, 5)

	// The waker: before the poll, and during it.
	w, err := u.NewWaker()
	if err != nil {
		t.Fatal(err)
	}
	w.Wake()
	if rev, woken, err := u.Poll(fd, w, -1); err != nil || rev != 0 || !woken {
		t.Errorf("woken before: %#x %v %v", rev, woken, err)
	}
	go func() {
		rev, woken, _ := u.Poll(fd, w, -1)
		if !woken {
			rev = -1
		}
		done <- rev
	}()
	waitFor(t, func() bool { return u.PollStats().Waits == 3 })
	w.Wake()
	if rev := <-done; rev != 0 {
		t.Errorf("woken during: %#x", rev)
	}
	if p := u.PollStats(); p.Woken != 1 {
		t.Errorf("waker: %+v", p)
	}
}

// URGENT (poll_urgent): POLLIN once per urgent interrupt that came while a
// poll was waiting for one; a packet without KDETH.Intr raises nothing
// for it, and an urgent packet with no poll waiting is not counted (the
// driver counts in the interrupt handler, only under WAITING_URG).
func TestPollUrgent(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	if err := intIoctl(u, fd, abi.IoctlPollType, abi.PollTypeUrgent); err != nil {
		t.Fatal(err)
	}
	u.Ingress(kdethIntr(&cfg, c.num, 8)) // nobody waiting: not counted
	if rev, _, _ := u.Poll(fd, nil, 0); rev != 0 {
		t.Errorf("urgent packet before any poll: %#x", rev)
	}
	// That poll set WAITING_URG: an ordinary packet does nothing, an
	// urgent one counts.
	u.Ingress(kdeth(&cfg, c.num, 8, 1))
	if rev, _, _ := u.Poll(fd, nil, 0); rev != 0 {
		t.Errorf("ordinary packet: %#x", rev)
	}
	u.Ingress(kdethIntr(&cfg, c.num, 8))
	if rev, _, _ := u.Poll(fd, nil, 0); rev != unix.POLLIN {
		t.Errorf("urgent packet: %#x", rev)
	}
	if rev, _, _ := u.Poll(fd, nil, 0); rev != 0 {
		t.Errorf("reported twice: %#x", rev)
	}
	if s, _ := u.RcvStats(c.num); s.UrgentInterrupts != 2 || s.AvailInterrupts != 0 {
		t.Errorf("%+v", s)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
	}
}
