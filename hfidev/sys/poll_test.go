//go:build linux

package sys

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Poll on a pipe standing in for the context's file (no hfi1 device here):
// it times out, reports POLLIN, is woken by its Waker from another
// goroutine, and a Wake before the Poll is kept for it.
func TestUnixPoll(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	var s Unix
	w, err := s.NewWaker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	start := time.Now()
	rev, woken, err := s.Poll(p[0], w, 20*time.Millisecond)
	if err != nil || rev != 0 || woken || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("idle: revents %#x woken %v err %v after %v", rev, woken, err, time.Since(start))
	}
	if rev, woken, err := s.Poll(p[0], nil, 0); err != nil || rev != 0 || woken {
		t.Fatalf("one look: revents %#x woken %v err %v", rev, woken, err)
	}

	w.Wake()
	w.Wake() // collapses with the first
	if rev, woken, err := s.Poll(p[0], w, time.Minute); err != nil || rev != 0 || !woken {
		t.Fatalf("woken before: revents %#x woken %v err %v", rev, woken, err)
	}
	if _, woken, _ := s.Poll(p[0], w, 0); woken {
		t.Fatal("a wake was left over")
	}

	go func() {
		time.Sleep(5 * time.Millisecond)
		w.Wake()
	}()
	start = time.Now()
	if rev, woken, err := s.Poll(p[0], w, -1); err != nil || rev != 0 || !woken {
		t.Fatalf("woken while waiting: revents %#x woken %v err %v", rev, woken, err)
	}
	t.Logf("woken after %v", time.Since(start))

	go func() {
		time.Sleep(5 * time.Millisecond)
		_, _ = unix.Write(p[1], []byte{1})
	}()
	if rev, woken, err := s.Poll(p[0], w, time.Minute); err != nil || rev&unix.POLLIN == 0 || woken {
		t.Fatalf("readable: revents %#x woken %v err %v", rev, woken, err)
	}

	// A closed descriptor: POLLNVAL, as poll(2) reports it.
	if rev, _, err := s.Poll(p[0]+1000, nil, 0); err != nil || rev&unix.POLLNVAL == 0 {
		t.Fatalf("bad fd: revents %#x err %v", rev, err)
	}
	if _, _, err := s.Poll(p[0], foreignWaker{}, 0); err != unix.EINVAL {
		t.Fatalf("foreign waker: %v", err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		w.Wake()
		_, _, _ = s.Poll(p[0], w, 0)
	})
	if allocs != 0 {
		t.Errorf("Wake+Poll allocates %v times", allocs)
	}
}

type foreignWaker struct{}

func (foreignWaker) Wake()        {}
func (foreignWaker) Close() error { return nil }
