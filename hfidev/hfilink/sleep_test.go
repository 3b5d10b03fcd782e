package hfilink_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/hfilink"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/hfidev/sys"
)

func sleepModes(t *testing.T, f func(t *testing.T, poll bool)) {
	for _, poll := range []bool{false, true} {
		name := "interrupt"
		if poll {
			name = "poll"
		}
		t.Run(name, func(t *testing.T) { f(t, poll) })
	}
}

// wakeLatency has an idle link sleep while its peer sends a packet after
// idle, trials times, and returns the times from the send to Sleep's
// return, sorted.
func wakeLatency(t *testing.T, poll bool, idle time.Duration, trials int) []time.Duration {
	m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipWFR, Link: hfilink.Config{PollSleep: poll}})
	a, b := m.Links[0][0], m.Links[1][0]
	f := frame(gids4[0], gids4[1], 1, 2, wire.RCSendOnly, 5, 10, 1)
	var lat []time.Duration
	for range trials {
		sent := make(chan time.Time, 1)
		go func() {
			time.Sleep(idle)
			t0 := time.Now()
			_, _ = a.Send([][]byte{f})
			sent <- t0 // after Send: the next trial's Send follows this one
		}()
		if err := b.Sleep(time.Minute); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		lat = append(lat, back.Sub(<-sent))
		if got := recvOne(t, b); !bytes.Equal(got, f) {
			t.Fatal("the packet Sleep saw differs")
		}
	}
	slices.Sort(lat)
	return lat
}

// An idle link's Sleep returns promptly when a packet arrives: on the
// interrupt, well under the polling back-off's SleepPollMax (a polling
// Sleep idle for 15 ms looks every millisecond: half of that on average).
func TestSleepWakeLatency(t *testing.T) {
	const trials = 11
	intr := wakeLatency(t, false, 15*time.Millisecond, trials)
	poll := wakeLatency(t, true, 15*time.Millisecond, trials)
	t.Logf("send to Sleep's return, min/median/max: interrupt %v/%v/%v, polling %v/%v/%v",
		intr[0], intr[trials/2], intr[trials-1], poll[0], poll[trials/2], poll[trials-1])
	if intr[trials/2] >= hfilink.SleepPollMax/2 && !raceEnabled {
		t.Errorf("median wake-up on the interrupt %v, not well under SleepPollMax %v", intr[trials/2], hfilink.SleepPollMax)
	}
}

// Nothing arrives: Sleep returns at its timeout, in either mode.
func TestSleepTimeout(t *testing.T) {
	sleepModes(t, func(t *testing.T, poll bool) {
		m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipJKR, Link: hfilink.Config{PollSleep: poll}})
		b := m.Links[1][0]
		start := time.Now()
		if err := b.Sleep(30 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 30*time.Millisecond || d > 10*time.Second {
			t.Errorf("back after %v", d)
		}
		if err := b.Sleep(0); err != nil {
			t.Fatal(err)
		}
		s := b.Stats()
		if (s.SleepWaits == 0) == !poll || (s.SleepPolls == 0) == poll {
			t.Errorf("stats %+v", s)
		}
	})
}

// Wake ends a Sleep blocked on the interrupt at once — the model's poll
// returns because its waker was woken, not at SleepWaitMax — and a Wake
// while the link is awake leaves the waker alone: the next Sleep sees it
// on the channel without waiting.
func TestSleepWake(t *testing.T) {
	sleepModes(t, func(t *testing.T, poll bool) {
		m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipWFR, Link: hfilink.Config{PollSleep: poll}})
		u, b := m.Units[1], m.Links[1][0]
		b.Wake()
		if err := b.Sleep(time.Minute); err != nil {
			t.Fatal(err)
		}
		if s, p := b.Stats(), u.PollStats(); s.SleepWaits != 0 || p.Calls != 0 {
			t.Errorf("woken while awake: %+v, %+v", s, p)
		}
		done := make(chan time.Duration)
		go func() {
			start := time.Now()
			_ = b.Sleep(time.Minute)
			done <- time.Since(start)
		}()
		if poll {
			time.Sleep(5 * time.Millisecond)
		} else {
			waitFor(t, func() bool { return u.PollStats().Waits == 1 })
		}
		b.Wake()
		d := <-done
		t.Logf("woken after %v", d)
		if p := u.PollStats(); !poll && p.Woken != 1 {
			t.Errorf("the wait did not end on the waker: %+v", p)
		}
	})
}

// An idle link costs fewer wake-ups on the interrupt than polling: in a
// 100 ms Sleep the waits end every SleepWaitMax at most (10), where the
// polling back-off looks about every SleepPollMax (about 100).
func TestSleepIdleWakeups(t *testing.T) {
	var looks [2]uint64
	var cpu [2]time.Duration
	for i, poll := range []bool{false, true} {
		m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipWFR, Link: hfilink.Config{PollSleep: poll}})
		b := m.Links[1][0]
		before := cpuTime(t)
		if err := b.Sleep(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		cpu[i] = cpuTime(t) - before
		s := b.Stats()
		looks[i] = s.SleepWaits + s.SleepPolls
	}
	t.Logf("100 ms idle: %d waits on the interrupt (process CPU %v), %d looks polling (process CPU %v)",
		looks[0], cpu[0], looks[1], cpu[1])
	if looks[0] > uint64(100*time.Millisecond/hfilink.SleepWaitMax)+2 || looks[0]*3 > looks[1] {
		t.Errorf("%d wake-ups on the interrupt against %d polling", looks[0], looks[1])
	}
}

func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
	}
}

// failingPoll is a modeled unit whose poll fails.
type failingPoll struct{ *model.Unit }

func (failingPoll) Poll(int, sys.Waker, time.Duration) (int16, bool, error) {
	return 0, false, unix.EIO
}

// A link whose wait fails polls from then on, and says why.
func TestSleepFallback(t *testing.T) {
	u, err := model.NewUnit(model.DefaultConfig(abi.ChipWFR))
	if err != nil {
		t.Fatal(err)
	}
	c, err := hfidev.OpenContext(failingPoll{u}, u.Path(), hfidev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := hfilink.New(c, hfilink.Config{Self: hfilink.Node{LID: 1, GID: gids4[0]}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 2 {
		start := time.Now()
		if err := l.Sleep(5 * time.Millisecond); err != nil || time.Since(start) < 5*time.Millisecond {
			t.Fatalf("back after %v: %v", time.Since(start), err)
		}
	}
	if s := l.Stats(); s.SleepWaits != 1 || s.SleepPolls == 0 {
		t.Errorf("stats %+v", s)
	}
	if err := l.LastTxError(); !errors.Is(err, unix.EIO) {
		t.Errorf("LastTxError %v", err)
	}
}
