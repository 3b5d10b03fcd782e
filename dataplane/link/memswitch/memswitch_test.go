package memswitch

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

func frame(dst, src [6]byte, payload string) []byte {
	f := make([]byte, 14+len(payload))
	copy(f, dst[:])
	copy(f[6:], src[:])
	copy(f[14:], payload)
	return f
}

func recvAll(t *testing.T, p *Port) []string {
	t.Helper()
	bufs := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	sizes := make([]int, len(bufs))
	var out []string
	for {
		n, err := p.Recv(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for i := 0; i < n; i++ {
			out = append(out, string(bufs[i][14:sizes[i]]))
		}
	}
}

func TestSwitch(t *testing.T) {
	sw := New(64)
	a, b, c := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 3}
	pa, _ := sw.Port(a, 4)
	pb, _ := sw.Port(b, 4)
	pc, _ := sw.Port(c, 4)
	if _, err := sw.Port(a, 4); !errors.Is(err, ErrAddressInUse) {
		t.Fatalf("second port with one address: %v", err)
	}
	// Unicast goes to its port only, in order.
	if n, err := pa.Send([][]byte{frame(b, a, "one"), frame(b, a, "two"), frame(c, a, "three")}); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	if got := recvAll(t, pb); len(got) != 2 || got[0] != "one" || got[1] != "two" {
		t.Fatalf("b got %q", got)
	}
	if got := recvAll(t, pc); len(got) != 1 || got[0] != "three" {
		t.Fatalf("c got %q", got)
	}
	// Broadcast reaches every other port.
	pa.Send([][]byte{frame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, a, "all")})
	if len(recvAll(t, pa)) != 0 || len(recvAll(t, pb)) != 1 || len(recvAll(t, pc)) != 1 {
		t.Fatal("broadcast")
	}
	// A full queue drops and counts; an unknown address is counted.
	for i := 0; i < 6; i++ {
		pa.Send([][]byte{frame(b, a, "x")})
	}
	pa.Send([][]byte{frame([6]byte{2, 9, 9, 9, 9, 9}, a, "nobody")})
	if s := pb.Stats(); s.Dropped != 2 {
		t.Fatalf("b stats %+v", s)
	}
	if s := pa.Stats(); s.Unknown != 1 {
		t.Fatalf("a stats %+v", s)
	}
	// Oversized and runt frames are refused.
	if _, err := pa.Send([][]byte{make([]byte, 65)}); err == nil {
		t.Fatal("oversized frame taken")
	}
	if _, err := pa.Send([][]byte{make([]byte, 10)}); err == nil {
		t.Fatal("runt taken")
	}
	// A closed port receives nothing more and frees its address.
	recvAll(t, pb)
	pb.Close()
	pa.Send([][]byte{frame(b, a, "late")})
	if len(recvAll(t, pb)) != 0 {
		t.Fatal("closed port received")
	}
	if _, err := sw.Port(b, 4); err != nil {
		t.Fatal(err)
	}
}

func TestSleepWake(t *testing.T) {
	sw := New(64)
	a, b := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	pa, _ := sw.Port(a, 4)
	pb, _ := sw.Port(b, 4)
	// A frame wakes a sleeper at once.
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() { defer wg.Done(); pb.Sleep(5 * time.Second) }()
	time.Sleep(20 * time.Millisecond)
	pa.Send([][]byte{frame(b, a, "wake")})
	wg.Wait()
	if time.Since(start) > 2*time.Second {
		t.Fatal("a frame did not wake the sleeper")
	}
	// With a frame waiting, Sleep returns at once; Wake too.
	start = time.Now()
	pb.Sleep(5 * time.Second)
	recvAll(t, pb)
	pb.Wake()
	pb.Sleep(5 * time.Second)
	if time.Since(start) > 2*time.Second {
		t.Fatal("Sleep blocked with a frame waiting or after Wake")
	}
	// The timeout ends a sleep.
	start = time.Now()
	pb.Sleep(10 * time.Millisecond)
	if d := time.Since(start); d < 10*time.Millisecond || d > 2*time.Second {
		t.Fatalf("sleep of 10 ms took %v", d)
	}
}

func TestConcurrent(t *testing.T) {
	sw := New(64)
	a, b := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	pa, _ := sw.Port(a, 1024)
	pb, _ := sw.Port(b, 1024)
	const n = 5000
	go func() {
		for i := 0; i < n; i++ {
			for {
				before := pb.Stats().Dropped
				pa.Send([][]byte{frame(b, a, string(rune('a'+i%26)))})
				if pb.Stats().Dropped == before {
					break
				}
				time.Sleep(time.Microsecond)
			}
		}
	}()
	got := 0
	bufs, sizes := [][]byte{make([]byte, 64)}, []int{0}
	deadline := time.Now().Add(10 * time.Second)
	for got < n && time.Now().Before(deadline) {
		k, _ := pb.Recv(bufs, sizes)
		if k == 1 {
			if want := byte('a' + got%26); bufs[0][14] != want || !bytes.Equal(bufs[0][:6], b[:]) {
				t.Fatalf("frame %d: %q", got, bufs[0][14:sizes[0]])
			}
			got++
		}
	}
	if got != n {
		t.Fatalf("%d of %d frames", got, n)
	}
}
