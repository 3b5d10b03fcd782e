package perf

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

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
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
const ptKeyVector = "0000:0001:000012:8808cc:000003a2:00007f605ef27000:" +
	"00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:01:02:00000000:\x00"

func TestPerftestKeyMessageVector(t *testing.T) {
	if len(ptKeyVector) != ptKeySizeGID {
		t.Fatalf("vector is %d bytes, want KEY_MSG_SIZE_GID = %d", len(ptKeyVector), ptKeySizeGID)
	}
	d := ptDest{LID: 0, OutReads: 1, QPN: 0x12, PSN: 0x8808cc, RKey: 0x3a2, VA: 0x7f605ef27000,
		GID: netip.MustParseAddr("::ffff:198.18.1.2").As16()}
	if got := d.marshal(); string(got) != ptKeyVector {
		t.Fatalf("marshal:\n got %q\nwant %q", got, ptKeyVector)
	}
	p, err := parsePTDest([]byte(ptKeyVector))
	if err != nil {
		t.Fatal(err)
	}
	if p != d {
		t.Fatalf("parse: got %+v, want %+v", p, d)
	}
	if g := netip.AddrFrom16(p.GID); !g.Is4In6() || g.Unmap() != netip.MustParseAddr("198.18.1.2") {
		t.Fatalf("GID %v", g)
	}
}

func TestPerftestKeyMessageWideFields(t *testing.T) {
	// Full-width values: a 24-bit QPN and PSN, 32-bit rkey, 64-bit VA, an
	// IPv6 GID; sprintf's widths are minimums, so the message stays 107
	// characters only while the values fit them, which they always do.
	d := ptDest{LID: 0xffff, OutReads: 0x80, QPN: 0xffffff, PSN: 0xabcdef, RKey: 0xdeadbeef, VA: 0xffffffffffffffff,
		GID: netip.MustParseAddr("fe80::1:2:3:4").As16(), SRQN: 0x12345678}
	m := d.marshal()
	if len(m) != ptKeySizeGID || m[ptKeySizeGID-1] != 0 || bytes.IndexByte(m, 0) != ptKeySizeGID-1 {
		t.Fatalf("message %q: want 107 characters and a NUL", m)
	}
	want := "ffff:0080:ffffff:abcdef:deadbeef:ffffffffffffffff:fe:80:00:00:00:00:00:00:00:01:00:02:00:03:00:04:12345678:"
	if string(m[:ptKeySizeGID-1]) != want {
		t.Fatalf("got %q, want %q", m[:ptKeySizeGID-1], want)
	}
	p, err := parsePTDest(m)
	if err != nil || p != d {
		t.Fatalf("round trip: %+v, %v", p, err)
	}
}

func TestPerftestKeyMessageBad(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:0001:000012",
		strings.Replace(ptKeyVector, "8808cc", "88z8cc", 1),
		strings.Replace(ptKeyVector, "000012", "1000012", 1), // QPN wider than 24 bits
	} {
		if _, err := parsePTDest([]byte(s)); err == nil {
			t.Errorf("parsePTDest(%q) accepted", s)
		}
	}
}

func TestPerftestVersionAndMTUMessages(t *testing.T) {
	// strncpy(user_param.version, VERSION, sizeof(user_param.version)) with
	// MAX_VERSION 16, exchanged as sizeof(rem_version) = 16 bytes.
	if got, want := ptVersion("6.06"), []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"); !bytes.Equal(got, want) {
		t.Fatalf("version message %q, want %q", got, want)
	}
	for s, want := range map[string]float64{"6.06": 6.06, "5.70": 5.70, "4.5-0.17": 4.5, "25.01.0-0.80": 25.01, "": 0, "x": 0} {
		if got := atof(s); got != want {
			t.Errorf("atof(%q) = %v, want %v", s, got, want)
		}
	}
	// check_mtu: sprintf(cur, "%d", curr_mtu) and sizeof(char[2]) bytes
	// from 5.31 on: IBV_MTU_1024 = 3 is "3\0".
	if got := ptMTUMessage(mtuEnum(1024), 2); !bytes.Equal(got, []byte("3\x00")) {
		t.Fatalf("MTU message %q", got)
	}
	if got := ptMTUMessage(mtuEnum(4096), 4); !bytes.Equal(got, []byte("5\x00\x00\x00")) {
		t.Fatalf("old MTU message %q", got)
	}
	for mtu, e := range map[int]int{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5, 1500: 0} {
		if mtuEnum(mtu) != e {
			t.Errorf("mtuEnum(%d) = %d, want %d", mtu, mtuEnum(mtu), e)
		}
	}
	if strtol10([]byte("3\x00")) != 3 || strtol10([]byte("\x00\x00")) != 0 {
		t.Fatal("strtol10")
	}
}

func TestPerftestReportMessages(t *testing.T) {
	// xchg_bw_reports sends hton_long(size), hton_long(iters) (hton_int
	// before 5.33), hton_double(bw_peak), hton_double(bw_avg),
	// hton_double(msgRate_avg), each in its own ctx_xchg_data; on x86_64
	// hton_long is bswap_64 and hton_double swaps the double's bytes, so
	// each is the big-endian image. 1.5 is 0x3ff8000000000000.
	r := ptReport{Size: 65536, Iters: 5000, BWPeak: 1.5, BWAvg: 0.25, MsgRate: 0.000296}
	got := r.messages(6.06)
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
	if old := r.messages(5.32); hex.EncodeToString(old[1]) != "00001388" {
		t.Errorf("iters for a 5.32 peer: %x", old[1])
	}
}

// fakePerftestServer plays a perftest 6.06 BW server's side of the
// exchange (server half of ctx_xchg_data / ctx_hand_shake: read, then
// write), for op, with one QP on device d, as the ib_*_bw mains sequence
// it. It returns the report the client sent (write, read) and how many
// messages it received (send).
func fakePerftestServer(ctx context.Context, d *device.Device, ln net.Listener, op string, size, iters int) (ptReport, int, error) {
	var rep ptReport
	nc, err := ln.Accept()
	if err != nil {
		return rep, 0, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	xchg := func(mine []byte) ([]byte, error) {
		rem := make([]byte, len(mine))
		if _, err := io.ReadFull(nc, rem); err != nil {
			return nil, err
		}
		_, err := nc.Write(mine)
		return rem, err
	}
	v, err := xchg(ptVersion("6.06"))
	if err != nil || atof(string(v)) < 5.70 {
		return rep, 0, errors.Join(errors.New("versions"), err)
	}
	for _, x := range []uint32{4096, 64} {
		if _, err := xchg(binary.BigEndian.AppendUint32(nil, x)); err != nil {
			return rep, 0, err
		}
	}
	m, err := xchg(ptMTUMessage(3, 2))
	if err != nil || strtol10(m) < 1 {
		return rep, 0, errors.Join(errors.New("mtu"), err)
	}
	scq, rcq := verbs.NewCQ(1024), verbs.NewCQ(1024)
	rq := verbs.NewRecvQueue(1024)
	buf, err := d.MRs().Register(make([]byte, 2*size), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		return rep, 0, err
	}
	q, err := d.NewRC(device.QPConfig{SendCQ: scq, RecvCQ: rcq, RQ: rq}, mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		return rep, 0, err
	}
	defer d.Destroy(q)
	gid, _ := d.GID(netip.Addr{})
	me := ptDest{OutReads: 128, QPN: q.QPN(), PSN: 0x123456 & psn.Mask, RKey: buf.RKey(), VA: buf.Addr() + uint64(size), GID: gid.As16()}
	k, err := xchg(me.marshal())
	if err != nil {
		return rep, 0, err
	}
	peer, err := parsePTDest(k)
	if err != nil {
		return rep, 0, err
	}
	if err := d.ConnectRC(ctx, q, me.PSN, device.Remote{QPN: peer.QPN, PSN: peer.PSN, GID: netip.AddrFrom16(peer.GID)}, device.ConnectOptions{PathMTU: 1024}); err != nil {
		return rep, 0, err
	}
	// The rest runs while the device is polled, as the verbs device of a
	// real server would run by itself.
	type step struct {
		msg []byte
		err error
	}
	steps := make(chan step, 1)
	hs := func() {
		go func() {
			r, err := xchg(me.marshal())
			steps <- step{r, err}
		}()
	}
	wait := func(posted func() int) ([]byte, int, error) {
		received := 0
		for {
			_, _ = d.Progress()
			if posted != nil {
				received += posted()
			}
			select {
			case s := <-steps:
				return s.msg, received, s.err
			default:
			}
		}
	}
	post := func(n int) {
		sge := [1]mr.SGE{{Addr: buf.Addr(), Length: uint32(size), LKey: buf.LKey()}}
		for i := 0; i < n; i++ {
			_ = q.PostRecv(&verbs.RecvWR{SGL: sge[:]})
		}
	}
	cs := make([]verbs.Completion, 64)
	received := 0
	if op == "send" {
		hs() // after connect
		if _, _, err := wait(nil); err != nil {
			return rep, 0, err
		}
		hs() // keys again
		if _, _, err := wait(nil); err != nil {
			return rep, 0, err
		}
		post(min(512, iters)) // ctx_set_recv_wqes
		posted := min(512, iters)
		hs() // receives posted
		if _, _, err := wait(nil); err != nil {
			return rep, 0, err
		}
		poll := func() int {
			n := rcq.Poll(cs)
			for i := 0; i < n && posted < iters; i++ {
				post(1)
				posted++
			}
			return n
		}
		hs() // close: the client writes it after its last send completes
		_, received, err = wait(poll)
		// Everything was delivered before the client closed; count the
		// completions not polled yet.
		for end := time.Now().Add(time.Second); received < iters && time.Now().Before(end); {
			_, _ = d.Progress()
			received += poll()
		}
		return rep, received, err
	}
	for i := 0; i < 3; i++ { // keys again, after RTR, end of test
		hs()
		if _, _, err := wait(nil); err != nil {
			return rep, 0, err
		}
	}
	var f [5][]byte
	for i, n := range []int{8, 8, 8, 8, 8} {
		go func() {
			r, err := xchg(make([]byte, n))
			steps <- step{r, err}
		}()
		if f[i], _, err = wait(nil); err != nil {
			return rep, 0, err
		}
	}
	rep = ptReport{Size: binary.BigEndian.Uint64(f[0]), Iters: binary.BigEndian.Uint64(f[1]),
		BWPeak: math.Float64frombits(binary.BigEndian.Uint64(f[2])), BWAvg: math.Float64frombits(binary.BigEndian.Uint64(f[3])),
		MsgRate: math.Float64frombits(binary.BigEndian.Uint64(f[4]))}
	hs() // close
	_, _, err = wait(nil)
	return rep, 0, err
}

func TestRunPerftestAgainstFakeServer(t *testing.T) {
	for _, op := range []string{"write", "send", "read"} {
		t.Run(op, func(t *testing.T) {
			a, b := pair(t, memlink.Faults{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const size = 4096
			iters := 700
			type out struct {
				rep ptReport
				n   int
				err error
			}
			srv := make(chan out, 1)
			go func() {
				rep, n, err := fakePerftestServer(ctx, b, ln, op, size, iters)
				srv <- out{rep, n, err}
			}()
			run, err := RunPerftest(ctx, a, ln.Addr().String(), Config{Op: op, Size: size, Iters: iters})
			s := <-srv
			if err != nil || s.err != nil {
				t.Fatalf("client: %v; server: %v", err, s.err)
			}
			if run.ServerVersion != "6.06" || len(run.Server) != 1 || run.Server[0].OutReads != 128 {
				t.Fatalf("server as seen: %+v", run)
			}
			if run.Result.Iters != iters || run.Result.Bytes != size {
				t.Fatalf("result %+v", run.Result)
			}
			switch op {
			case "send":
				if s.n != iters {
					t.Fatalf("server received %d messages, want %d", s.n, iters)
				}
			default:
				want := run.Result.BWAvgMBps * 1e6 / (1 << 20)
				if s.rep.Size != size || s.rep.Iters != uint64(iters) || math.Abs(s.rep.BWAvg-want) > 1e-9 || s.rep.MsgRate != run.Result.MsgRateMpps {
					t.Fatalf("report %+v (want bw_avg %v MiB/s)", s.rep, want)
				}
			}
		})
	}
}
