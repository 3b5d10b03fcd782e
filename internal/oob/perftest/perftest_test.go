package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// The key message as perftest's ethernet_write_keys builds it:
//
//	char msg[KEY_MSG_SIZE_GID];   // 108
//	sprintf(msg, KEY_PRINT_FMT_GID, lid, out_reads, qpn, psn, rkey, vaddr,
//	        gid.raw[0], ..., gid.raw[15], srqn);
//	write(sockfd, msg, sizeof msg);
//
// with KEY_PRINT_FMT_GID = "%04x:%04x:%06x:%06x:%08x:%016llx:" then
// "%02x:" sixteen times and "%08x:". The fields below are those ib_write_bw
// printed on the rxe guest for its own QP ("local address: LID 0000 QPN
// 0x0012 PSN 0x8808cc RKey 0x0003a2 VAddr 0x007f605ef27000", GID
// ::ffff:198.18.1.2) with out_reads 1, SRQN 0: 4+1+4+1+6+1+6+1+8+1+16+1 =
// 50 characters, 16×3 = 48 for the GID, 9 for the SRQN: 107, and the NUL
// sprintf writes fills the 108th byte of msg, all of which is sent. (The
// rxe guest's ib_write_bw sent exactly these fields to our client; its
// out_reads is 1 for a write test.)
const keyVector = "0000:0001:000012:8808cc:000003a2:00007f605ef27000:" +
	"00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:01:02:00000000:\x00"

func TestKeyMessageVector(t *testing.T) {
	if len(keyVector) != KeyMsgSize {
		t.Fatalf("vector is %d bytes, want KEY_MSG_SIZE_GID = %d", len(keyVector), KeyMsgSize)
	}
	d := Dest{LID: 0, OutReads: 1, QPInfo: fabric.QPInfo{QPN: 0x12, PSN: 0x8808cc, GID: netip.MustParseAddr("::ffff:198.18.1.2")}, RKey: 0x3a2, VA: 0x7f605ef27000}
	if got := d.Marshal(); string(got) != keyVector {
		t.Fatalf("marshal:\n got %q\nwant %q", got, keyVector)
	}
	p, err := ParseDest([]byte(keyVector))
	if err != nil {
		t.Fatal(err)
	}
	if p != d {
		t.Fatalf("parse: got %+v, want %+v", p, d)
	}
	if g := p.GID; !g.Is4In6() || g.Unmap() != netip.MustParseAddr("198.18.1.2") {
		t.Fatalf("GID %v", g)
	}
}

func TestKeyMessageWideFields(t *testing.T) {
	// Full-width values: a 24-bit QPN and PSN, 32-bit rkey, 64-bit VA, an
	// IPv6 GID; sprintf's widths are minimums, so the message stays 107
	// characters only while the values fit them, which they always do.
	d := Dest{LID: 0xffff, OutReads: 0x80, QPInfo: fabric.QPInfo{QPN: 0xffffff, PSN: 0xabcdef, GID: netip.MustParseAddr("fe80::1:2:3:4")}, RKey: 0xdeadbeef, VA: 0xffffffffffffffff, SRQN: 0x12345678}
	m := d.Marshal()
	if len(m) != KeyMsgSize || m[KeyMsgSize-1] != 0 || bytes.IndexByte(m, 0) != KeyMsgSize-1 {
		t.Fatalf("message %q: want 107 characters and a NUL", m)
	}
	want := "ffff:0080:ffffff:abcdef:deadbeef:ffffffffffffffff:fe:80:00:00:00:00:00:00:00:01:00:02:00:03:00:04:12345678:"
	if string(m[:KeyMsgSize-1]) != want {
		t.Fatalf("got %q, want %q", m[:KeyMsgSize-1], want)
	}
	p, err := ParseDest(m)
	if err != nil || p != d {
		t.Fatalf("round trip: %+v, %v", p, err)
	}
}

func TestKeyMessageBad(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:0001:000012",
		strings.Replace(keyVector, "8808cc", "88z8cc", 1),
		strings.Replace(keyVector, "000012", "1000012", 1), // QPN wider than 24 bits
	} {
		if _, err := ParseDest([]byte(s)); err == nil {
			t.Errorf("ParseDest(%q) accepted", s)
		}
	}
}

func TestVersionAndMTUMessages(t *testing.T) {
	// strncpy(user_param.version, VERSION, sizeof(user_param.version)) with
	// MAX_VERSION 16, exchanged as sizeof(rem_version) = 16 bytes.
	if got, want := VersionMsg("6.06"), []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"); !bytes.Equal(got, want) {
		t.Fatalf("version message %q, want %q", got, want)
	}
	for s, want := range map[string]float64{"6.06": 6.06, "5.70": 5.70, "4.5-0.17": 4.5, "25.01.0-0.80": 25.01, "": 0, "x": 0} {
		if got := Atof(s); got != want {
			t.Errorf("Atof(%q) = %v, want %v", s, got, want)
		}
	}
	// check_mtu: sprintf(cur, "%d", curr_mtu) and sizeof(char[2]) bytes
	// from 5.31 on: IBV_MTU_1024 = 3 is "3\0".
	if got := MTUMsg(MTUEnum(1024), 2); !bytes.Equal(got, []byte("3\x00")) {
		t.Fatalf("MTU message %q", got)
	}
	if got := MTUMsg(MTUEnum(4096), 4); !bytes.Equal(got, []byte("5\x00\x00\x00")) {
		t.Fatalf("old MTU message %q", got)
	}
	for mtu, e := range map[int]int{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5, 1500: 0} {
		if MTUEnum(mtu) != e {
			t.Errorf("MTUEnum(%d) = %d, want %d", mtu, MTUEnum(mtu), e)
		}
	}
	if ParseMTUMsg([]byte("3\x00")) != 3 || ParseMTUMsg([]byte("\x00\x00")) != 0 {
		t.Fatal("strtol10")
	}
}

func TestReportMessages(t *testing.T) {
	// xchg_bw_reports sends hton_long(size), hton_long(iters) (hton_int
	// before 5.33), hton_double(bw_peak), hton_double(bw_avg),
	// hton_double(msgRate_avg), each in its own ctx_xchg_data; on x86_64
	// hton_long is bswap_64 and hton_double swaps the double's bytes, so
	// each is the big-endian image. 1.5 is 0x3ff8000000000000.
	r := Report{Size: 65536, Iters: 5000, BWPeak: 1.5, BWAvg: 0.25, MsgRate: 0.000296}
	got := r.Messages(6.06)
	want := []string{"0000000000010000", "0000000000001388", "3ff8000000000000", "3fd0000000000000",
		hex.EncodeToString(binary.BigEndian.AppendUint64(nil, math.Float64bits(0.000296)))}
	if len(got) != len(want) {
		t.Fatalf("%d messages", len(got))
	}
	for i := range want {
		if hex.EncodeToString(got[i]) != want[i] {
			t.Errorf("message %d: %x, want %s", i, got[i], want[i])
		}
	}
	if old := r.Messages(5.32); hex.EncodeToString(old[1]) != "00001388" {
		t.Errorf("iters for a 5.32 peer: %x", old[1])
	}
}

func TestReportParse(t *testing.T) {
	r := Report{Size: 65536, Iters: 5000, BWPeak: 1.5, BWAvg: 0.25, MsgRate: 0.000296}
	for _, v := range []float64{6.06, 5.32} {
		m := r.Messages(v)
		sz := ReportSizes(v)
		for i := range m {
			if len(m[i]) != sz[i] {
				t.Fatalf("version %v: message %d is %d bytes, ReportSizes says %d", v, i, len(m[i]), sz[i])
			}
		}
		if back, err := ParseReport(m); err != nil || back != r {
			t.Fatalf("version %v: %+v, %v", v, back, err)
		}
	}
	for _, bad := range [][][]byte{nil, {make([]byte, 8)}, {make([]byte, 4), make([]byte, 8), make([]byte, 8), make([]byte, 8), make([]byte, 8)}} {
		if _, err := ParseReport(bad); err == nil {
			t.Errorf("ParseReport(%x) accepted", bad)
		}
	}
}

func TestCheckGIDs(t *testing.T) {
	v4 := netip.MustParseAddr("::ffff:198.18.1.2")
	v6 := netip.MustParseAddr("fe80::1")
	d := func(g netip.Addr) []Dest { return []Dest{{QPInfo: fabric.QPInfo{GID: g}}} }
	if CheckGIDs(v4, d(v4), "server") != nil || CheckGIDs(v6, d(v6), "server") != nil {
		t.Fatal("matching GIDs refused")
	}
	if err := CheckGIDs(v4, d(v6), "client"); err == nil || !strings.Contains(err.Error(), "client's GID") {
		t.Fatalf("mixed GIDs: %v", err)
	}
}

// TestConnExchange runs a 6.06 client against a 6.06 server over a pipe:
// the prelude, the keys, a barrier, a BW report and the close, and checks
// the bytes the client wrote.
func TestConnExchange(t *testing.T) {
	cn, sn := net.Pipe()
	defer cn.Close()
	defer sn.Close()
	var wire bytes.Buffer
	ctx := context.Background()
	client := &Conn{C: teeConn{cn, &wire}, Ctx: ctx, Timeout: 5 * time.Second}
	server := &Conn{C: sn, Ctx: ctx, Timeout: 5 * time.Second, Server: true}
	gid := netip.MustParseAddr("::ffff:198.18.1.2")
	cd := []Dest{{OutReads: 16, QPInfo: fabric.QPInfo{QPN: 0x12, PSN: 0x8808cc, GID: gid}, RKey: 0x3a2, VA: 0x7f605ef27000}}
	sd := []Dest{{OutReads: 1, QPInfo: fabric.QPInfo{QPN: 0x13, PSN: 0x1, GID: gid}, RKey: 0x4, VA: 0x1000}}
	rep := Report{Size: 65536, Iters: 5000, BWPeak: 1.5, BWAvg: 0.25, MsgRate: 0.000296}
	type out struct {
		p   Prelude
		d   []Dest
		r   Report
		err error
	}
	sc := make(chan out, 1)
	go func() {
		o := func() (o out) {
			if o.p, o.err = server.Prelude(2048); o.err != nil {
				return
			}
			if o.d, o.err = server.Keys("keys", sd); o.err != nil {
				return
			}
			if o.err = server.Barrier("after RTR", sd[0]); o.err != nil {
				return
			}
			var f [][]byte
			for _, n := range ReportSizes(o.p.RV) {
				b, err := server.Xchg("BW report", make([]byte, n))
				if err != nil {
					o.err = err
					return
				}
				f = append(f, b)
			}
			o.r, o.err = ParseReport(f)
			server.Finish()
			return
		}()
		sc <- o
	}()
	p, err := client.Prelude(1024)
	if err != nil || p.Version != Version || p.MTU != 1024 || p.Cycle != PageSize {
		t.Fatalf("client prelude %+v, %v", p, err)
	}
	theirs, err := client.Keys("keys", cd)
	if err != nil || len(theirs) != 1 || theirs[0] != sd[0] {
		t.Fatalf("client keys %+v, %v", theirs, err)
	}
	if err := client.Barrier("after RTR", cd[0]); err != nil {
		t.Fatal(err)
	}
	if err := client.ExchangeReport(rep, p.RV); err != nil {
		t.Fatal(err)
	}
	client.Finish()
	o := <-sc
	if o.err != nil || o.p.MTU != 1024 || len(o.d) != 1 || o.d[0] != cd[0] || o.r != rep {
		t.Fatalf("server %+v", o)
	}
	var want bytes.Buffer
	want.Write(VersionMsg("6.06"))
	want.Write(binary.BigEndian.AppendUint32(nil, 4096))
	want.Write(binary.BigEndian.AppendUint32(nil, 64))
	want.WriteString("3\x00")
	want.Write(cd[0].Marshal())
	want.Write(cd[0].Marshal())
	for _, m := range rep.Messages(6.06) {
		want.Write(m)
	}
	want.WriteString("done\x00")
	if !bytes.Equal(wire.Bytes(), want.Bytes()) {
		t.Fatalf("client wrote\n%q\nwant\n%q", wire.Bytes(), want.Bytes())
	}
	if want.Len() != 16+8+2+2*KeyMsgSize+5*8+5 {
		t.Fatalf("want %d bytes", want.Len())
	}
}

// teeConn records what is written.
type teeConn struct {
	net.Conn
	w *bytes.Buffer
}

func (c teeConn) Write(b []byte) (int, error) {
	c.w.Write(b)
	return c.Conn.Write(b)
}

func TestConnPeerClosed(t *testing.T) {
	cn, sn := net.Pipe()
	sn.Close()
	c := &Conn{C: cn, Ctx: context.Background(), Timeout: time.Second}
	if _, err := c.Prelude(1024); err == nil || !strings.Contains(err.Error(), "versions") {
		t.Fatalf("prelude with the server gone: %v", err)
	}
}

// answeredConn is a MsgConn whose peer disconnected after answering: its
// send fails with the peer gone, its answer is still there to read.
type answeredConn struct {
	net.Conn
	answer []byte
}

func (c *answeredConn) Write([]byte) (int, error)        { return 0, io.EOF }
func (c *answeredConn) SetReadDeadline(time.Time) error  { return nil }
func (c *answeredConn) SetWriteDeadline(time.Time) error { return nil }
func (c *answeredConn) Read(b []byte) (int, error) {
	if len(c.answer) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.answer)
	c.answer = c.answer[n:]
	return n, nil
}

// TestConnCMAnswerAfterPeerGone: over RDMA-CM a client whose send failed
// because the server disconnected, the server's answer received, has the
// step done (the interop row atomic-bw-R-sf-to-rxe-loss5 failed so once:
// our last message's ACK lost, rxe's ib_atomic_bw answered and closed); a
// TCP client, or one with no answer, fails as before.
func TestConnCMAnswerAfterPeerGone(t *testing.T) {
	key := Dest{LID: 1, RKey: 0x42}.MarshalCM()
	c := &Conn{C: &answeredConn{answer: key}, Ctx: context.Background(), Timeout: time.Second, CM: true}
	rem, err := c.Xchg("close", Dest{RKey: 7}.MarshalCM())
	if err != nil || string(rem) != string(key) {
		t.Fatalf("close with the answer in and the server gone: %q, %v", rem, err)
	}
	c = &Conn{C: &answeredConn{}, Ctx: context.Background(), Timeout: time.Second, CM: true}
	if _, err := c.Xchg("close", Dest{RKey: 7}.MarshalCM()); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("close with no answer and the server gone: %v", err)
	}
	c = &Conn{C: &answeredConn{answer: key}, Ctx: context.Background(), Timeout: time.Second}
	if _, err := c.Xchg("close", key); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("over TCP, the server gone: %v", err)
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte(keyVector))
	f.Add([]byte("ffff:0080:ffffff:abcdef:deadbeef:ffffffffffffffff:fe:80:00:00:00:00:00:00:00:01:00:02:00:03:00:04:12345678:"))
	f.Add([]byte("::::::::::::::::::::::"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := ParseDest(msg)
		if err != nil {
			return
		}
		m := d.Marshal()
		if len(m) != KeyMsgSize {
			t.Fatalf("marshal of %+v: %d bytes", d, len(m))
		}
		// A message that fits parses back to the same.
		if m[KeyMsgSize-1] == 0 {
			if back, err := ParseDest(m); err != nil || back != d {
				t.Fatalf("round trip of %q: %+v, %v; want %+v", msg, back, err, d)
			}
		}
	})
}

func FuzzParseMTUMsg(f *testing.F) {
	f.Add([]byte("3\x00"))
	f.Add([]byte("-5\x00\x00"))
	f.Add([]byte(" +99999999999999999999"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := ParseMTUMsg(b)
		if n > 1<<24 || n < -(1<<24) {
			t.Fatalf("ParseMTUMsg(%q) = %d", b, n)
		}
	})
}

func FuzzAtof(f *testing.F) {
	for _, s := range []string{"6.06", "5.70", "4.5-0.17", "25.01.0-0.80", "", "x", "-.", "+1e5", "1."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v := Atof(s); math.IsNaN(v) {
			t.Fatalf("Atof(%q) = NaN", s)
		}
		_ = VersionMsg(s)
		_ = CString([]byte(s))
	})
}

func FuzzParseReport(f *testing.F) {
	f.Add(make([]byte, 40), 8)
	f.Add(make([]byte, 36), 4)
	f.Fuzz(func(t *testing.T, b []byte, iters int) {
		sizes := []int{8, iters & 15, 8, 8, 8}
		var fs [][]byte
		for _, n := range sizes {
			n = min(n, len(b))
			fs = append(fs, b[:n])
			b = b[n:]
		}
		r, err := ParseReport(fs)
		if err != nil {
			return
		}
		if len(fs[1]) != 4 && len(fs[1]) != 8 {
			t.Fatalf("field of %d bytes accepted: %+v", len(fs[1]), r)
		}
	})
}
