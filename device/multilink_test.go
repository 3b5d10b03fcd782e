package device

import (
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"golang.org/x/sys/unix"
)

// pipeQueue is a queue (a link) whose socket is a pipe's read end: readable when
// the test writes to it; ready makes PrepareWait report frames waiting.
type pipeQueue struct {
	r, w  int
	ready bool
	asked time.Duration // the timeout PrepareWait was last given
	short time.Duration // what PrepareWait shortens it to, if not 0
}

func newPipeQueue(t *testing.T) *pipeQueue {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) })
	return &pipeQueue{r: p[0], w: p[1]}
}

func (l *pipeQueue) Send(f [][]byte) (int, error)      { return len(f), nil }
func (l *pipeQueue) Recv([][]byte, []int) (int, error) { return 0, nil }
func (l *pipeQueue) MaxFrame() int                     { return 1500 }
func (l *pipeQueue) FD() int                           { return l.r }
func (l *pipeQueue) PrepareWait(t time.Duration) (bool, time.Duration) {
	l.asked = t
	if l.short != 0 {
		t = min(t, l.short)
	}
	return l.ready, t
}

// TestMultiLinkWait: a device's worker over several queues sleeps on all
// their sockets at once: it wakes for any one of them, at once when a
// queue already has frames, and no later than a queue asks.
func TestMultiLinkWait(t *testing.T) {
	a, b := newPipeQueue(t), newPipeQueue(t)
	m := &multiLink{links: []link.Link{a, b}}
	start := time.Now()
	if err := m.Wait(30 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("an idle wait of 30 ms returned after %v", d)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = unix.Write(b.w, []byte{1})
	}()
	start = time.Now()
	if err := m.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("frames on the second queue woke the wait after %v", d)
	}
	var buf [8]byte
	_, _ = unix.Read(b.r, buf[:])
	a.ready = true
	start = time.Now()
	if err := m.Wait(5 * time.Second); err != nil || time.Since(start) > time.Second {
		t.Errorf("a queue with frames waiting: Wait = %v after %v, want at once", err, time.Since(start))
	}
	a.ready, b.short = false, 10*time.Millisecond
	start = time.Now()
	if err := m.Wait(5 * time.Second); err != nil || time.Since(start) > 2*time.Second {
		t.Errorf("a queue asking to be looked at in 10 ms: Wait = %v after %v", err, time.Since(start))
	}
}
