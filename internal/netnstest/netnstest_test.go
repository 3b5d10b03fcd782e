package netnstest

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestPairPingAndTCP(t *testing.T) {
	p := NewPair(t, Options{Queues: 2})
	if out, err := p.A.Exec("ping", "-c", "1", "-W", "2", p.B.Addr.Addr().String()); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", p.B.Addr.Addr().String()+":7000")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	var got string
	if err := p.A.Do(func() error {
		c, err := net.DialTimeout("tcp", p.B.Addr.Addr().String()+":7000", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		b := make([]byte, 5)
		_, err = c.Read(b)
		got = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got != "hello" {
		t.Fatalf("got %q", got)
	}
	out, err := p.A.Exec("ip", "-d", "link", "show", "eth0")
	if err != nil || !strings.Contains(out, "numrxqueues 2") {
		t.Fatalf("queues: %v\n%s", err, out)
	}
}

func TestWiredPair(t *testing.T) {
	p := NewWiredPair(t, Options{Queues: 2})
	if out, err := p.A.Exec("ping", "-c", "1", "-W", "2", p.B.Addr.Addr().String()); err != nil {
		t.Fatalf("ping through the wire namespace: %v\n%s", err, out)
	}
	if out, err := p.Wire.Exec("ip", "link", "show", p.WireB); err != nil || !strings.Contains(out, "master br0") {
		t.Fatalf("wire: %v\n%s", err, out)
	}
}
