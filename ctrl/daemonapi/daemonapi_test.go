package daemonapi

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// pair returns two connected SOCK_SEQPACKET unix sockets.
func pair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestRoundTripWithDescriptors(t *testing.T) {
	a, b := pair(t)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	req := Request{Op: OpConnect, QPN: 17, Peer: netip.MustParseAddr("198.18.0.2"), DestQPN: 99}
	if err := Write(a, req, []int{efd, efd}); err != nil {
		t.Fatal(err)
	}
	var got Request
	fds, err := Read(b, &got)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(fds)
	if got != req || len(fds) != 2 {
		t.Fatalf("got %+v with %d descriptors, want %+v with 2", got, len(fds), req)
	}
	// The descriptors are live: a write on one is read on the original.
	if _, err := unix.Write(fds[0], []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	var v [8]byte
	if _, err := unix.Read(efd, v[:]); err != nil || v[0] != 1 {
		t.Fatalf("eventfd through SCM_RIGHTS: %v %v", v, err)
	}
}

func TestReplyErrors(t *testing.T) {
	for _, base := range []error{ErrDenied, ErrQPNInUse, ErrVersion, ErrInvalid} {
		r := Fail(fmt.Errorf("%w: because", base))
		if err := r.Error(); !errors.Is(err, base) || err.Error() != base.Error()+": because" {
			t.Errorf("%v through a reply: %v", base, err)
		}
	}
	if err := (&Reply{}).Error(); err != nil {
		t.Errorf("empty reply: %v", err)
	}
}

func TestReadClosed(t *testing.T) {
	a, b := pair(t)
	a.Close()
	var r Request
	if _, err := Read(b, &r); !IsClosed(err) {
		t.Fatalf("read after the peer closed: %v", err)
	}
}

// FuzzRead: whatever an application writes on the control socket, Read
// returns a message or an error, and never panics.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"op":"attach","version":1,"name":"x"}`))
	f.Add([]byte(`{"op":"connect","qpn":5,"peer":"198.18.0.2","dest_qpn":7}`))
	f.Add([]byte(`{"op":"report","transport":{"retransmits":1}}`))
	f.Add([]byte(`{"peer":"nonsense"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		x, y := pair(t)
		if _, _, err := x.WriteMsgUnix(b, nil, nil); err != nil {
			return
		}
		var r Request
		fds, err := Read(y, &r)
		closeAll(fds)
		if err == nil && len(fds) != 0 {
			t.Fatalf("descriptors from nowhere: %v", fds)
		}
	})
}
