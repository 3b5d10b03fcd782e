package device

import (
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"golang.org/x/sys/unix"
)

// TestMultiLinkWait: a device's worker over several queues sleeps on all
// their sockets at once: it wakes for any one of them, at once when a
// queue already has frames, and no later than a queue asks.
func TestMultiLinkWait(t *testing.T) {
	a, b := newPipeLink(t), newPipeLink(t)
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
