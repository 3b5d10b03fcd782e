package udpbatch

import (
	"bytes"
	"net"
	"testing"
	"time"
)

func loopback(t *testing.T) (*net.UDPConn, *net.UDPConn) {
	t.Helper()
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := net.DialUDP("udp4", nil, rc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close(); sc.Close() })
	return sc, rc
}

func TestSendRecv(t *testing.T) {
	sc, rc := loopback(t)
	s, err := New(sc, 8, 2048)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(rc, 8, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var dgs [][]byte
	for i := range 5 {
		dgs = append(dgs, bytes.Repeat([]byte{byte(i + 1)}, 10+i))
	}
	if n, err := s.Send(dgs); n != 5 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	got := 0
	for deadline := time.Now().Add(2 * time.Second); got < 5 && time.Now().Before(deadline); {
		n, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if !bytes.Equal(r.Buf(i), dgs[got]) || r.Len(i) != len(dgs[got]) {
				t.Fatalf("datagram %d: %x", got, r.Buf(i))
			}
			got++
		}
	}
	if got != 5 {
		t.Fatalf("received %d of 5", got)
	}
	if n, err := r.Recv(); n != 0 || err != nil {
		t.Fatalf("Recv with nothing waiting = %d, %v", n, err)
	}
	if _, err := s.Send([][]byte{{}}); err == nil {
		t.Fatal("an empty datagram was sent")
	}
}

// TestNoAllocs: a batch sent and a batch received allocate nothing.
func TestNoAllocs(t *testing.T) {
	sc, rc := loopback(t)
	_ = rc.SetReadBuffer(4 << 20)
	s, _ := New(sc, 32, 2048)
	r, _ := New(rc, 32, 2048)
	dgs := make([][]byte, 32)
	for i := range dgs {
		dgs[i] = make([]byte, 64)
	}
	a := testing.AllocsPerRun(200, func() {
		if _, err := s.Send(dgs); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 32; {
			n, err := r.Recv()
			if err != nil {
				t.Fatal(err)
			}
			k += n
		}
	})
	if a != 0 {
		t.Fatalf("%.1f allocations per batch", a)
	}
}

// TestEcho: a receiver sends each datagram of a batch back to its source,
// without allocating.
func TestEcho(t *testing.T) {
	sc, rc := loopback(t)
	s, _ := New(sc, 16, 2048)
	r, _ := New(rc, 16, 2048)
	dgs := make([][]byte, 16)
	for i := range dgs {
		dgs[i] = bytes.Repeat([]byte{byte(i + 1)}, 100+i)
	}
	roundTrip := func() {
		if n, err := s.Send(dgs); n != len(dgs) || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		for echoed := 0; echoed < len(dgs); {
			n, err := r.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Echo(n); err != nil {
				t.Fatal(err)
			}
			echoed += n
		}
		for got := 0; got < len(dgs); {
			n, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if !bytes.Equal(s.Buf(i), dgs[got]) {
					t.Fatalf("echo %d: %x", got, s.Buf(i))
				}
				got++
			}
		}
	}
	roundTrip()
	if a := testing.AllocsPerRun(100, roundTrip); a != 0 {
		t.Fatalf("%.1f allocations per echoed batch", a)
	}
}

// TestSegmentGRO: with UDP_SEGMENT a long datagram leaves as datagrams of
// the segment size; with UDP_GRO a receiver may get them coalesced; the
// bytes are the same either way.
func TestSegmentGRO(t *testing.T) {
	for _, gro := range []bool{false, true} {
		sc, rc := loopback(t)
		s, _ := New(sc, 4, 1<<16)
		r, _ := New(rc, 4, 1<<16)
		if err := s.SetSegment(1000); err != nil {
			t.Skipf("no UDP GSO: %v", err)
		}
		if err := r.SetGRO(gro); err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("0123456789"), 1050) // 10 segments and a half
		if n, err := s.Send([][]byte{msg}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		var got []byte
		datagrams := 0
		for deadline := time.Now().Add(2 * time.Second); len(got) < len(msg) && time.Now().Before(deadline); {
			n, err := r.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				got = append(got, r.Buf(i)...)
				datagrams++
			}
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("gro=%v: received %d bytes, want %d", gro, len(got), len(msg))
		}
		if !gro && datagrams != 11 {
			t.Fatalf("%d datagrams, want 11 (10 of 1000 bytes and one of 500)", datagrams)
		}
	}
}

// TestRecvWait: a receiver that sleeps while nothing waits gets the
// datagram that wakes it, and an error once the socket is closed.
func TestRecvWait(t *testing.T) {
	sc, rc := loopback(t)
	s, _ := New(sc, 4, 2048)
	r, _ := New(rc, 4, 2048)
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = s.Send([][]byte{[]byte("wake")})
	}()
	if n, err := r.RecvWait(); n != 1 || err != nil || string(r.Buf(0)) != "wake" {
		t.Fatalf("RecvWait = %d, %v", n, err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		rc.Close()
	}()
	if _, err := r.RecvWait(); err == nil {
		t.Fatal("RecvWait on a closed socket succeeded")
	}
}
