package hfidev

import (
	"errors"
	"testing"
	"time"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// hookedSys is a modeled unit whose Poll runs a hook first (between
// Wait's look at the queue and the poll) and whose POLL_TYPE can be
// rewritten on the way to the driver.
type hookedSys struct {
	*model.Unit
	beforePoll func()
	pollType   *int32
}

func (h *hookedSys) Poll(fd int, w sys.Waker, timeout time.Duration) (int16, bool, error) {
	if h.beforePoll != nil {
		h.beforePoll()
	}
	return h.Unit.Poll(fd, w, timeout)
}

func (h *hookedSys) Ioctl(fd int, cmd uint32, arg []byte) error {
	if cmd == abi.IoctlPollType && h.pollType != nil {
		le.PutUint32(arg, uint32(*h.pollType))
	}
	return h.Unit.Ioctl(fd, cmd, arg)
}

// Wait on both chips (with and without DMA_RTAIL): it times out on an
// empty queue, returns true when a packet comes (the Receiver then has
// it) and false on Wake, before or during the wait.
func TestWait(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, rtail := range []bool{false, true} {
			l := newLink(t, chip, func(c *model.Config) {
				if rtail {
					c.Caps |= abi.CapDMARtail
				}
			})
			start := time.Now()
			if ok, err := l.b.Wait(20 * time.Millisecond); ok || err != nil || time.Since(start) < 20*time.Millisecond {
				t.Fatalf("rtail %v: empty: %v %v after %v", rtail, ok, err, time.Since(start))
			}
			go func() {
				time.Sleep(2 * time.Millisecond)
				l.send(t, l.a, l.b, 7, 100)
			}()
			if ok, err := l.b.Wait(time.Minute); !ok || err != nil {
				t.Fatalf("rtail %v: packet: %v %v", rtail, ok, err)
			}
			p, ok := l.b.Receiver().Poll()
			if !ok || p.Err != nil || p.Header.BTHKDETH().SWData(0) != 7 {
				t.Fatalf("rtail %v: the packet Wait saw: %v", rtail, ok)
			}
			// Held: Wait returns at once.
			if ok, err := l.b.Wait(time.Minute); !ok || err != nil {
				t.Fatalf("rtail %v: held packet: %v %v", rtail, ok, err)
			}
			l.b.Receiver().Release()

			l.b.Wake()
			if ok, err := l.b.Wait(time.Minute); ok || err != nil {
				t.Fatalf("rtail %v: woken before: %v %v", rtail, ok, err)
			}
			go func() {
				time.Sleep(2 * time.Millisecond)
				l.b.Wake()
			}()
			if ok, err := l.b.Wait(time.Minute); ok || err != nil {
				t.Fatalf("rtail %v: woken during: %v %v", rtail, ok, err)
			}
			if s := rcvStats(t, l.ub, l.b); s.AvailInterrupts != 1 {
				t.Errorf("rtail %v: %d interrupts", rtail, s.AvailInterrupts)
			}
		}
	})
}

// A packet that lands between Wait's look at the queue and its poll is
// not lost: the driver's poll checks the queue before arming the
// interrupt and reports it at once, without an interrupt and without
// sleeping.
func TestWaitNoLostWakeup(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	h := &hookedSys{Unit: l.ub}
	b, err := OpenContext(h, l.ub.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h.beforePoll = func() { l.send(t, l.a, b, 1, 8) }
	before := l.ub.PollStats()
	start := time.Now()
	if ok, err := b.Wait(time.Minute); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	if p := l.ub.PollStats(); p.Waits != before.Waits || time.Since(start) > 5*time.Second {
		t.Errorf("slept for a packet already there: %+v after %v", p, time.Since(start))
	}
	if s := rcvStats(t, l.ub, b); s.AvailInterrupts != 0 {
		t.Errorf("%d interrupts", s.AvailInterrupts)
	}
	if _, ok := b.Receiver().Poll(); !ok {
		t.Error("no packet")
	}
}

// The driver compares the tail with RcvHdrHead as software wrote it: a
// receiver that releases lazily leaves the head behind, and the poll
// would report POLLIN at once, every time. Wait looks at the queue first,
// which writes the head back, so that an idle context sleeps.
func TestWaitWritesLazyHead(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	r := l.b.Receiver()
	r.SetHeadEvery(100)
	for i := range 3 {
		l.send(t, l.a, l.b, uint32(i), 8)
	}
	for range 3 {
		if _, ok := r.Poll(); !ok {
			t.Fatal("packet missing")
		}
		r.Release()
	}
	start := time.Now()
	if ok, err := l.b.Wait(20 * time.Millisecond); ok || err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("idle with a lazy head: %v %v after %v", ok, err, time.Since(start))
	}
}

// POLL_TYPE through the API: Wait puts ANYRCV back when another type was
// set; a poll type the driver does not know makes poll report POLLERR
// (ErrPoll).
func TestWaitPollType(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	if err := l.b.SetPollType(abi.PollTypeUrgent); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(2 * time.Millisecond)
		l.send(t, l.a, l.b, 1, 8) // no KDETH.Intr: only ANYRCV wakes on it
	}()
	if ok, err := l.b.Wait(time.Minute); !ok || err != nil {
		t.Fatalf("after URGENT: %v %v", ok, err)
	}

	bad := int32(2)
	h := &hookedSys{Unit: l.ub, pollType: &bad}
	c, err := OpenContext(h, l.ub.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetPollType(abi.PollTypeUrgent); err != nil { // sent as 2
		t.Fatal(err)
	}
	bad = 3
	if _, err := c.Wait(time.Minute); !errors.Is(err, ErrPoll) {
		t.Errorf("unknown poll type: %v", err)
	}
}

// RECV_CTRL through the API: disabled, the context's packets are dropped;
// enabled again, the queue and the Receiver restart together and packets
// flow; enabling an enabled context does nothing; a frozen one is Reset's.
func TestSetRecvEnabled(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, func(c *model.Config) { c.Caps |= abi.CapDMARtail })
		r := l.b.Receiver()
		for i := range 5 {
			l.send(t, l.a, l.b, uint32(i), 8)
		}
		if err := l.b.SetRecvEnabled(true); err != nil { // enabled already: no ioctl
			t.Fatal(err)
		}
		for i := range 2 {
			if p, ok := r.Poll(); !ok || p.Header.BTHKDETH().SWData(0) != uint32(i) {
				t.Fatalf("packet %d before disabling", i)
			}
			r.Release()
		}
		if err := l.b.SetRecvEnabled(false); err != nil {
			t.Fatal(err)
		}
		l.send(t, l.a, l.b, 99, 8)
		if s := l.ub.IngressStats(); s.Disabled != 1 {
			t.Errorf("disabled: %+v", s)
		}
		if err := l.b.SetRecvEnabled(true); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Poll(); ok {
			t.Fatal("entries left after the restart")
		}
		for i := range 20 { // past RcvSeq 13
			l.send(t, l.a, l.b, uint32(100+i), 8)
			p, ok := r.Poll()
			if !ok || p.Err != nil || p.Header.BTHKDETH().SWData(0) != uint32(100+i) {
				t.Fatalf("packet %d after the restart: %v", i, ok)
			}
			r.Release()
		}

		if err := l.b.SetRecvEnabled(false); err != nil {
			t.Fatal(err)
		}
		l.wire.SetLinkUp(false)
		l.wire.SetLinkUp(true)
		if err := l.b.SetRecvEnabled(true); !errors.Is(err, ErrFrozen) {
			t.Errorf("frozen: %v", err)
		}
		for _, c := range []*Context{l.a, l.b} {
			if err := c.Reset(); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.b.SetRecvEnabled(true); err != nil { // Reset enabled it
			t.Fatal(err)
		}
		l.send(t, l.a, l.b, 200, 8)
		if p, ok := r.Poll(); !ok || p.Header.BTHKDETH().SWData(0) != 200 {
			t.Fatal("no packet after Reset")
		}
	})
}

// After Close, Wake does nothing and Wait fails.
func TestWaitAfterClose(t *testing.T) {
	u := newModel(t, model.DefaultConfig(abi.ChipWFR))
	c, err := OpenContext(u, u.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Wake()
	if _, err := c.Wait(0); err == nil {
		t.Error("Wait after Close")
	}
}
