package ppoll

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWait: the whole timeout, through signals that interrupt it; at
// once for a ready descriptor; a zero timeout does not block; a negative
// one waits until a descriptor is ready. No allocation.
func TestWait(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	fds := []unix.PollFd{{Fd: int32(r.Fd()), Events: unix.POLLIN}}

	// Signals every millisecond to this process: each interrupts the
	// thread blocked in ppoll, which must wait on.
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				_ = syscall.Kill(os.Getpid(), syscall.SIGURG)
			}
		}
	}()
	start := time.Now()
	n, err := Wait(fds, 50*time.Millisecond)
	close(done)
	if d := time.Since(start); n != 0 || err != nil || d < 50*time.Millisecond {
		t.Fatalf("Wait on nothing: %d, %v after %v", n, err, d)
	}

	if n, err := Wait(fds, 0); n != 0 || err != nil {
		t.Fatalf("Wait(0) on nothing: %d, %v", n, err)
	}
	go func() { time.Sleep(20 * time.Millisecond); _, _ = w.Write([]byte{1}) }()
	start = time.Now()
	if n, err := Wait(fds, -1); n != 1 || err != nil || fds[0].Revents&unix.POLLIN == 0 {
		t.Fatalf("Wait(-1) for data: %d, %v, revents %#x", n, err, fds[0].Revents)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("data woke it after %v", d)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = Wait(fds, 0) }); a != 0 {
		t.Errorf("%v allocations per Wait", a)
	}
}
