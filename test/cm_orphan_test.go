package test

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// TestDaemonAnswersOrphanDREQ: a DREQ for a connection whose application
// is gone (here: that never was) gets a DREP from the daemon, as the
// kernel's CM answers one (cm_issue_drep). An rdma_cm peer whose DREP
// was lost before our application exited would otherwise send its DREQ
// again until its own timeout, its server waiting for DISCONNECTED (the
// interop row ucmatose-sf-to-rxe-loss5 hung so once). The peer here is
// raw frames on A's veth, with no softfabric on A.
func TestDaemonAnswersOrphanDREQ(t *testing.T) {
	netnstest.Require(t)
	p := netnstest.NewPair(t, netnstest.Options{})
	up(t, p.B)
	var fd int
	if err := p.A.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: p.A.Index, Protocol: htons(unix.ETH_P_ALL)})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}

	path, err := wire.NewPath(wire.PathFields{SrcMAC: [6]byte(p.A.MAC), DstMAC: [6]byte(p.B.MAC),
		Src: p.A.Addr.Addr(), Dst: p.B.Addr.Addr(), SrcPort: wire.SourcePort(1, 1)})
	if err != nil {
		t.Fatal(err)
	}
	const (
		tid      = 0x0102030405060708
		peerID   = 0x00001111 // the DREQ's sender's comm ID
		orphanID = 0xabcd0001 // ours, of no application
		tries    = 10         // DREQs sent, as a peer retries one
	)
	hl, info := path.HeaderLen(), wire.UDSendOnly.Info()
	f := make([]byte, hl+info.HeaderLen+mad.Size+wire.ICRCSize)
	wire.BTH(f[hl:]).Encode(&wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: 1})
	wire.DETH(f[hl+info.DETH:]).Encode(mad.GSIQKey, 1)
	m := mad.MAD(f[hl+info.HeaderLen : hl+info.HeaderLen+mad.Size])
	h := mad.CMHeader(mad.AttrDREQ, tid)
	m.EncodeHeader(&h)
	mad.DREQ(m.Data()).Encode(&mad.DREQFields{LocalCommID: peerID, RemoteCommID: orphanID, RemoteQPN: 0x123})
	path.Finish(f)

	buf := make([]byte, 4096)
	var pkt wire.Packet
	deadline := time.Now().Add(5 * time.Second)
	for sent := 0; time.Now().Before(deadline); sent++ {
		if sent < tries {
			if _, err := unix.Write(fd, f); err != nil {
				t.Fatal(err)
			}
		}
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break // the receive timeout: send again
			}
			if pkt.Parse(buf[:n]) != nil || pkt.BTH().DestQP() != 1 || pkt.Src().Unmap() != p.B.Addr.Addr() {
				continue // anything else on the wire, our own DREQ included
			}
			r := mad.MAD(pkt.Payload)
			if !r.IsValid() || r.AttributeID() != mad.AttrDREP {
				t.Fatalf("B's daemon answered the DREQ with attribute %#x, want a DREP", r.AttributeID())
			}
			d := mad.DREP(r.Data())
			if r.TransactionID() != tid || d.LocalCommID() != orphanID || d.RemoteCommID() != peerID {
				t.Fatalf("DREP: TID %#x, local comm ID %#x, remote %#x; want %#x, %#x, %#x",
					r.TransactionID(), d.LocalCommID(), d.RemoteCommID(), uint64(tid), orphanID, peerID)
			}
			return
		}
	}
	t.Fatalf("no DREP from B's daemon for a DREQ of no connection (%d sent)", tries)
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
