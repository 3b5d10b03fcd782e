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
