package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

var loopback = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)

// noLeaks fails t if, after its other cleanups, more goroutines run than
// when it was called. Call it first in a test so that its cleanup runs last.
func noLeaks(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("goroutines leaked: %d > %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func newListener(t *testing.T) *Listener {
	t.Helper()
	l, err := Listen(loopback)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type accepted struct {
	req  *Request
	conn *Conn
	err  error
}

// serveOne takes the next request and answers it with answer.
func serveOne(t *testing.T, l *Listener, answer func(*Request) (*Conn, error)) <-chan accepted {
	ch := make(chan accepted, 1)
	ctx := ctxT(t)
	go func() {
		r, err := l.Next(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		c, err := answer(r)
		ch <- accepted{req: r, conn: c, err: err}
	}()
	return ch
}

// pair returns a connected (dialer, acceptor) pair.
func pair(t *testing.T, l *Listener) (*Conn, *Conn) {
	t.Helper()
	ch := serveOne(t, l, func(r *Request) (*Conn, error) { return r.Accept(ctxT(t), []byte("a"), nil) })
	dc, _, err := Dial(ctxT(t), l.Addr(), []byte("d"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { dc.Close(); a.conn.Close() })
	return dc, a.conn
}

func waitDone(t *testing.T, c *Conn) error {
	t.Helper()
	select {
	case <-c.Done():
		return c.Err()
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed")
		return nil
	}
}

func TestAcceptRoundTrip(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	if !l.Addr().Addr().IsLoopback() || l.Addr().Port() == 0 {
		t.Fatalf("Addr() = %v", l.Addr())
	}
	dParams, dPriv := bytes.Repeat([]byte{0xd1}, maxParams), bytes.Repeat([]byte{0xd2}, MaxPrivateData)
	aParams, aPriv := []byte("acceptor-qpn-psn-gid"), []byte("hello back")
	ch := serveOne(t, l, func(r *Request) (*Conn, error) {
		return r.Accept(ctxT(t), aParams, aPriv)
	})
	dc, reply, err := Dial(ctxT(t), l.Addr(), dParams, dPriv)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.conn.Close()
	if !bytes.Equal(reply.Params, aParams) || !bytes.Equal(reply.PrivateData, aPriv) {
		t.Errorf("reply = %q, %q", reply.Params, reply.PrivateData)
	}
	if !bytes.Equal(a.req.Params(), dParams) || !bytes.Equal(a.req.PrivateData(), dPriv) {
		t.Errorf("request params/private mismatch (%d, %d bytes)", len(a.req.Params()), len(a.req.PrivateData()))
	}
	if p := a.req.Peer(); !p.Addr().IsLoopback() || p.Port() == 0 {
		t.Errorf("Peer() = %v", p)
	}
	select {
	case <-dc.Done():
		t.Fatal("dialer Done closed early")
	case <-a.conn.Done():
		t.Fatal("acceptor Done closed early")
	case <-time.After(20 * time.Millisecond):
	}
	if dc.Err() != nil || a.conn.Err() != nil {
		t.Fatal("Err non-nil before Done")
	}
}

func TestEmptyParams(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	ch := serveOne(t, l, func(r *Request) (*Conn, error) { return r.Accept(ctxT(t), nil, nil) })
	dc, reply, err := Dial(ctxT(t), l.Addr(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(reply.Params)+len(reply.PrivateData)+len(a.req.Params())+len(a.req.PrivateData()) != 0 {
		t.Error("expected empty blobs")
	}
	dc.Close()
	a.conn.Close()
}

func TestDisconnect(t *testing.T) {
	for _, side := range []string{"dialer", "acceptor"} {
		t.Run(side, func(t *testing.T) {
			noLeaks(t)
			l := newListener(t)
			dc, ac := pair(t, l)
			local, peer := dc, ac
			if side == "acceptor" {
				local, peer = ac, dc
			}
			if err := local.Disconnect(); err != nil {
				t.Fatalf("Disconnect: %v", err)
			}
			if err := waitDone(t, peer); err != nil {
				t.Errorf("peer Err() = %v, want nil", err)
			}
			if err := waitDone(t, local); err != nil {
				t.Errorf("local Err() = %v, want nil", err)
			}
			// Idempotent, also after the peer went away.
			for _, f := range []func() error{local.Disconnect, local.Close, peer.Disconnect, peer.Close} {
				if err := f(); err != nil {
					t.Errorf("repeated disconnect: %v", err)
				}
			}
		})
	}
}

func TestSimultaneousDisconnect(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	for range 10 {
		dc, ac := pair(t, l)
		errs := make(chan error, 2)
		go func() { errs <- dc.Disconnect() }()
		go func() { errs <- ac.Disconnect() }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("Disconnect: %v", err)
			}
		}
		if dc.Err() != nil || ac.Err() != nil {
			t.Errorf("Err() = %v, %v", dc.Err(), ac.Err())
		}
	}
}

func TestKillConnection(t *testing.T) {
	for _, how := range []string{"reset", "close"} {
		t.Run(how, func(t *testing.T) {
			noLeaks(t)
			l := newListener(t)
			dc, ac := pair(t, l)
			if how == "reset" {
				dc.nc.(*net.TCPConn).SetLinger(0)
			}
			dc.nc.Close() // without a DREQ
			if err := waitDone(t, ac); err == nil {
				t.Error("peer Err() = nil after killed connection")
			} else {
				t.Logf("peer Err() = %v", err)
			}
			if err := waitDone(t, dc); err == nil {
				t.Error("local Err() = nil after killed connection")
			}
			if err := ac.Disconnect(); err != nil {
				t.Errorf("Disconnect after break: %v", err)
			}
		})
	}
}

func TestReject(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	priv := []byte("go away")
	ch := serveOne(t, l, func(r *Request) (*Conn, error) { return nil, r.Reject(priv) })
	c, reply, err := Dial(ctxT(t), l.Addr(), []byte("p"), []byte("please"))
	if c != nil || reply.Params != nil {
		t.Error("Dial returned a connection on rejection")
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Dial error = %v, want ErrRejected", err)
	}
	var re *RejectError
	if !errors.As(err, &re) || !bytes.Equal(re.Data, priv) {
		t.Fatalf("RejectError = %#v", re)
	}
	if a := <-ch; a.err != nil {
		t.Fatalf("Reject: %v", a.err)
	} else if err := a.req.Reject(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("second Reject = %v, want ErrClosed", err)
	} else if _, err := a.req.Accept(ctxT(t), nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Accept after Reject = %v, want ErrClosed", err)
	}
}

func TestPrivateDataTooLong(t *testing.T) {
	noLeaks(t)
	long := make([]byte, MaxPrivateData+1)
	l := newListener(t)
	if _, _, err := Dial(ctxT(t), l.Addr(), nil, long); !errors.Is(err, ErrPrivateData) {
		t.Errorf("Dial = %v, want ErrPrivateData", err)
	}
	if _, _, err := Dial(ctxT(t), l.Addr(), make([]byte, maxParams+1), nil); err == nil {
		t.Error("Dial with oversized params succeeded")
	}
	ch := serveOne(t, l, func(r *Request) (*Conn, error) {
		if _, err := r.Accept(ctxT(t), nil, long); !errors.Is(err, ErrPrivateData) {
			t.Errorf("Accept = %v, want ErrPrivateData", err)
		}
		if err := r.Reject(long); !errors.Is(err, ErrPrivateData) {
			t.Errorf("Reject = %v, want ErrPrivateData", err)
		}
		return r.Accept(ctxT(t), nil, long[:MaxPrivateData]) // still answerable
	})
	dc, reply, err := Dial(ctxT(t), l.Addr(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(reply.PrivateData) != MaxPrivateData {
		t.Errorf("reply private data %d bytes", len(reply.PrivateData))
	}
	dc.Close()
	a.conn.Close()
}

func TestDialClosedPort(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	addr := l.Addr()
	l.Close()
	_, _, err := Dial(ctxT(t), addr, nil, nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to closed port = %v", err)
	}
}

func TestNextCancelAndClose(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next = %v, want context.Canceled", err)
	}
	errc := make(chan error)
	go func() { _, err := l.Next(context.Background()); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("pending Next = %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close = %v", err)
	}
}

// silentListener is a raw TCP listener that accepts and never answers.
func silentListener(t *testing.T) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return addrPort(ln.Addr())
}

func TestDialCancel(t *testing.T) {
	noLeaks(t)
	addr := silentListener(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, _, err := Dial(ctx, addr, []byte("p"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := Dial(ctx, addr, []byte("p"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial = %v, want context.DeadlineExceeded", err)
	}
}

// rawDial opens a TCP stream to l and writes b.
func rawDial(t *testing.T, l *Listener, b []byte) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	return nc
}

func TestAcceptCancel(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	nc := rawDial(t, l, hello(frame{typ: msgREQ, params: []byte("x")})) // never sends RTU
	r, err := l.Next(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Accept(ctx, []byte("y"), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Accept = %v, want DeadlineExceeded", err)
	}
	// The requester got the REP, then the stream closed.
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := readHello(nc); err != nil {
		t.Fatal(err)
	}
	if f, err := readFrame(nc); err != nil || f.typ != msgREP || string(f.params) != "y" {
		t.Fatalf("got %+v, %v", f, err)
	}
	if _, err := readFrame(nc); err != io.EOF {
		t.Errorf("after REP: %v, want EOF", err)
	}
}

func TestMalformedDropped(t *testing.T) {
	req := hello(frame{typ: msgREQ, params: []byte("abc"), private: []byte("d")})
	cases := []struct {
		name  string
		data  []byte
		close bool // half-close after writing
	}{
		{"bad magic", append([]byte("XFCM"), req[4:]...), false},
		{"bad version", append(append([]byte("SFCM"), 2), req[5:]...), false},
		{"truncated hello", []byte("SF"), true},
		{"truncated header", req[:7], true},
		{"truncated body", req[:len(req)-1], true},
		{"empty", nil, true},
		{"RTU first", hello(frame{typ: msgRTU}), false},
		{"REP first", hello(frame{typ: msgREP}), false},
		{"unknown type", append([]byte("SFCM\x01\x09"), 0, 0, 0), false},
		{"private too long", append([]byte("SFCM\x01\x01"), 0, 0, MaxPrivateData+1), false},
		{"params too long", append([]byte("SFCM\x01\x01"), 0x04, 0x01, 0), false},
		{"stalled", req[:len(req)-2], false},
	}
	noLeaks(t)
	l, err := listen(loopback, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc := rawDial(t, l, tc.data)
			if tc.close {
				nc.(*net.TCPConn).CloseWrite()
			}
			deadline := time.Now().Add(5 * time.Second)
			for l.Dropped() != uint64(i+1) {
				if time.Now().After(deadline) {
					t.Fatalf("Dropped() = %d, want %d", l.Dropped(), i+1)
				}
				time.Sleep(5 * time.Millisecond)
			}
			// The listener dropped the stream…
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := nc.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Errorf("dropped stream: read %d, %v", n, err)
			}
			// …and keeps working; the bad request never reaches Next.
			ch := serveOne(t, l, func(r *Request) (*Conn, error) {
				if string(r.Params()) != "ok" {
					t.Errorf("Next returned request with params %q", r.Params())
				}
				return nil, r.Reject(nil)
			})
			if _, _, err := Dial(ctxT(t), l.Addr(), []byte("ok"), nil); !errors.Is(err, ErrRejected) {
				t.Errorf("Dial = %v", err)
			}
			<-ch
		})
	}
}

func TestUnexpectedFrameAfterConnect(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	nc := rawDial(t, l, hello(frame{typ: msgREQ}))
	ch := serveOne(t, l, func(r *Request) (*Conn, error) { return r.Accept(ctxT(t), nil, nil) })
	nc.Write(appendFrame(nil, frame{typ: msgRTU}))
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	nc.Write(appendFrame(nil, frame{typ: msgREQ}))
	if err := waitDone(t, a.conn); !errors.Is(err, ErrProtocol) {
		t.Errorf("Err() = %v, want ErrProtocol", err)
	}
}

func TestDialProtocolError(t *testing.T) {
	noLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(hello(frame{typ: msgRTU})) // not REP/REJ
		io.Copy(io.Discard, c)
	}()
	if _, _, err := Dial(ctxT(t), addrPort(ln.Addr()), nil, nil); !errors.Is(err, ErrProtocol) {
		t.Errorf("Dial = %v, want ErrProtocol", err)
	}
}

func TestQueueFullAndCloseDrains(t *testing.T) {
	noLeaks(t)
	l := newListener(t)
	var ncs []net.Conn
	for range queueLen + 1 {
		ncs = append(ncs, rawDial(t, l, hello(frame{typ: msgREQ})))
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Dropped() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Dropped() = %d, want 1", l.Dropped())
		}
		time.Sleep(5 * time.Millisecond)
	}
	r, err := l.Next(ctxT(t)) // returned requests survive Close
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	closed := 0
	for _, nc := range ncs {
		nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed != queueLen { // all but the one returned by Next
		t.Errorf("%d streams closed, want %d", closed, queueLen)
	}
	if err := r.Reject([]byte("late")); err != nil {
		t.Errorf("Reject after Close: %v", err)
	}
}

func TestErrorStrings(t *testing.T) {
	err := error(&RejectError{Data: []byte("x")})
	if !strings.Contains(err.Error(), "rejected") {
		t.Error(err)
	}
	if msgType(9).String() != "type 9" || msgDREQ.String() != "DREQ" {
		t.Error("msgType.String")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, frame{typ: msgREQ, params: []byte("params"), private: []byte("private")}))
	f.Add(appendFrame(nil, frame{typ: msgDREQ}))
	f.Add([]byte{2, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 5, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := readFrame(bytes.NewReader(data))
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrProtocol) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(fr.params) > maxParams || len(fr.private) > MaxPrivateData {
			t.Fatalf("oversized frame accepted")
		}
		enc := appendFrame(nil, fr)
		if !bytes.HasPrefix(data, enc) {
			t.Fatalf("re-encoding %x is not a prefix of %x", enc, data)
		}
		readHello(bytes.NewReader(data))
	})
}
