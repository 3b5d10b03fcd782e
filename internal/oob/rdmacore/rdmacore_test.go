package rdmacore

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

func dest(lid uint16, qpn, psn uint32, gid netip.Addr) Dest {
	return Dest{LID: lid, QPInfo: fabric.QPInfo{QPN: qpn, PSN: psn, GID: gid}}
}

//	char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
//	sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, gid);  /* gid_to_wire_gid */
//	write(sockfd, msg, sizeof msg);
//
// sizeof msg is 51 characters and the NUL: 52 bytes, the NUL last. On
// RoCE the LID is 0. gid_to_wire_gid prints the GID's 16 bytes in order as
// 32 lowercase hex digits (see ctrl.TestWireGIDVector), so the IPv4-mapped
// GID of 198.18.0.1 is 00000000000000000000ffffc6120001. Without -g the
// tools send memset-zero GIDs: 32 zeros.
func TestDestVectors(t *testing.T) {
	gid := netip.MustParseAddr("198.18.0.1")
	for _, tc := range []struct {
		d    Dest
		want string
	}{
		{dest(0, 0x11, 0xabcdef, gid), "0000:000011:abcdef:00000000000000000000ffffc6120001\x00"},
		{dest(0x1a, 0xfffffe, 0x000001, netip.MustParseAddr("fd00:198:18::2")), "001a:fffffe:000001:fd000198001800000000000000000002\x00"},
		// srq_pingpong's unused slots (memset(my_dest, 0, ...)) and a
		// tool run without -g.
		{Dest{}, "0000:000000:000000:00000000000000000000000000000000\x00"},
		// QPN and PSN are 24 bits.
		{dest(0, 0x1000011, 0xff000001, gid), "0000:000011:000001:00000000000000000000ffffc6120001\x00"},
	} {
		got := tc.d.Marshal()
		if string(got) != tc.want || len(got) != MsgSize || MsgSize != 52 {
			t.Errorf("marshal %+v = %q (%d bytes), want %q", tc.d, got, len(got), tc.want)
		}
		if a := tc.d.Append([]byte("x")); string(a) != "x"+tc.want {
			t.Errorf("append %+v = %q", tc.d, a)
		}
		back, err := ParseDest(got)
		wantGID := tc.d.GID
		if !wantGID.IsValid() {
			wantGID = netip.IPv6Unspecified()
		}
		if err != nil || back.LID != tc.d.LID || back.QPN != tc.d.QPN&0xffffff || back.PSN != tc.d.PSN&0xffffff || back.GID.Unmap() != wantGID.Unmap() || !back.GID.Is6() {
			t.Errorf("parse %q = %+v, %v", got, back, err)
		}
	}
	// sscanf's %x takes upper case too.
	if d, err := ParseDest([]byte("0000:00ABCD:0000FF:00000000000000000000FFFFC6120001\x00")); err != nil || d.QPN != 0xabcd || d.PSN != 0xff || d.GID.Unmap() != gid {
		t.Errorf("upper case: %+v, %v", d, err)
	}
	if Done != "done\x00" { // write(sockfd, "done", sizeof "done")
		t.Errorf("done = %q", Done)
	}
}

func TestParseDestBad(t *testing.T) {
	for _, s := range []string{
		"",
		"\x00",
		"0000:000011:abcdef",
		"0000:000011:abcdef:00000000000000000000ffffc6120001:",
		"0000:1000011:abcdef:00000000000000000000ffffc6120001", // QPN over 24 bits
		"10000:000011:abcdef:00000000000000000000ffffc6120001", // LID over 16 bits
		"0000:000011:abcdeg:00000000000000000000ffffc6120001",
		"0000:000011:abcdef:00000000000000000000ffffc612000",
		"0000:000011:abcdef:00000000000000000000ffffc61200zz",
	} {
		if d, err := ParseDest([]byte(s)); err == nil {
			t.Errorf("ParseDest(%q) = %+v, want an error", s, d)
		}
	}
}

func TestHasGID(t *testing.T) {
	for g, want := range map[string]bool{"": false, "::": false, "fe80::": false, "::ffff:198.18.0.1": true, "fd00::1": true} {
		var a netip.Addr
		if g != "" {
			a = netip.MustParseAddr(g)
		}
		if got := dest(0, 1, 1, a).HasGID(); got != want {
			t.Errorf("HasGID(%q) = %v", g, got)
		}
	}
	if NtopGID(netip.Addr{}) != "::" || NtopGID(netip.MustParseAddr("198.18.0.1")) != "::ffff:198.18.0.1" {
		t.Error("NtopGID")
	}
}

// TestExchangeBytes plays both sides of an srq_pingpong-shaped exchange
// over a pipe: the client's messages, the server's, then "done", exactly
// as the C tools write them.
func TestExchangeBytes(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	gid := netip.MustParseAddr("::ffff:127.0.0.1")
	mine := make([]Dest, SRQMaxQP)
	mine[0], mine[1] = dest(0, 0x100, 0x1, gid), dest(0, 0x101, 0x2, gid)
	theirs := []Dest{dest(0, 0x200, 0x3, gid)}
	errc := make(chan error, 1)
	go func() {
		got, err := ReadDests(s, SRQMaxQP)
		if err == nil && (got[0] != mine[0] || got[1] != mine[1] || got[2].QPN != 0) {
			t.Errorf("server read %+v", got[:3])
		}
		if err == nil {
			err = WriteDests(s, theirs)
		}
		if err == nil {
			err = ReadDone(s)
		}
		errc <- err
	}()
	var wire bytes.Buffer
	for _, d := range mine {
		wire.Write(d.Marshal())
	}
	if wire.Len() != SRQMaxQP*MsgSize || !bytes.HasSuffix(wire.Bytes(), []byte("0000:000000:000000:"+ZeroWireGID+"\x00")) {
		t.Fatalf("wire %d bytes", wire.Len())
	}
	if err := WriteDests(c, mine); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDests(c, 1)
	if err != nil || got[0] != theirs[0] {
		t.Fatalf("client read %+v, %v", got, err)
	}
	if err := WriteDone(c); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestReadDestsShort(t *testing.T) {
	if _, err := ReadDests(bytes.NewReader(make([]byte, MsgSize-1)), 1); err == nil {
		t.Fatal("short read accepted")
	}
	if err := ReadDone(bytes.NewReader([]byte("done"))); err == nil {
		t.Fatal("short done accepted")
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:000011:abcdef:00000000000000000000ffffc6120001\x00"))
	f.Add([]byte("0000:000000:000000:00000000000000000000000000000000\x00"))
	f.Add([]byte("0000:00ABCD:0000FF:00000000000000000000FFFFC6120001"))
	f.Add([]byte(":::"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParseDest(msg)
		if err != nil {
			return
		}
		// What parses marshals to a message that parses to the same.
		m := d.Marshal()
		if len(m) != MsgSize {
			t.Fatalf("marshal of %+v: %d bytes", d, len(m))
		}
		back, err := ParseDest(m)
		if err != nil || back != d {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", msg, back, err, d)
		}
	})
}

func FuzzReadDests(f *testing.F) {
	f.Add([]byte("0000:000011:abcdef:00000000000000000000ffffc6120001\x000000:000000:000000:00000000000000000000000000000000\x00"), 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		n = n & 7
		ds, err := ReadDests(bytes.NewReader(b), n)
		if err == nil && len(ds) != n {
			t.Fatalf("%d dests, want %d", len(ds), n)
		}
	})
}
