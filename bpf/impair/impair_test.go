package impair

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/softfabric/softfabric/internal/netnstest"
	"golang.org/x/sys/unix"
)

// A test datagram: the sequence number three times, so that one flipped
// bit cannot hide which datagram it was, then filler, then a CRC-32 of
// everything before it, which catches any single flipped bit.
const (
	datagramLen = 64
	crcAt       = datagramLen - 4
)

func datagram(b []byte, seq uint32) {
	for k := 0; k < 12; k += 4 {
		binary.BigEndian.PutUint32(b[k:], seq)
	}
	for k := 12; k < crcAt; k++ {
		b[k] = byte(seq*31 + uint32(k))
	}
	binary.BigEndian.PutUint32(b[crcAt:], crc32.ChecksumIEEE(b[:crcAt]))
}

// decode returns the datagram's sequence number (by majority of its three
// copies) and whether it arrived intact.
func decode(b []byte) (seq uint32, ok bool) {
	if len(b) != datagramLen {
		return math.MaxUint32, false
	}
	s0, s1, s2 := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:])
	seq = s0
	if s0 != s1 && s1 == s2 {
		seq = s1
	}
	return seq, crc32.ChecksumIEEE(b[:crcAt]) == binary.BigEndian.Uint32(b[crcAt:])
}

// tally is what B received of n datagrams numbered 0 to n-1.
type tally struct {
	n        int
	copies   []int // per sequence number
	bad      []int // corrupted copies, per sequence number
	total    int
	unknown  int // sequence number out of range
	adjacent int // duplicated datagrams whose two copies arrived back to back
}

func (r tally) missing() (m int) {
	for _, c := range r.copies {
		if c == 0 {
			m++
		}
	}
	return m
}

func (r tally) doubled() (d int) {
	for _, c := range r.copies {
		if c == 2 {
			d++
		}
	}
	return d
}

func (r tally) corrupted() (c int) {
	for _, b := range r.bad {
		c += b
	}
	return c
}

// blast sends n datagrams from a to b's port 4791 (over IPv6 when v6) and
// counts what arrives, waiting until want(sent) datagrams have arrived or
// the line has been quiet for a while. noCheck sends IPv4 with a zero UDP
// checksum, so that corrupted datagrams reach the socket.
func blast(t *testing.T, p *netnstest.Pair, n int, v6, noCheck bool, want func() int) tally {
	t.Helper()
	network, src, dst := "udp4", p.A.Addr.Addr(), p.B.Addr.Addr()
	if v6 {
		network, src, dst = "udp6", p.A.Addr6.Addr(), p.B.Addr6.Addr()
	}
	var rx, tx *net.UDPConn
	if err := p.B.Do(func() (err error) {
		rx, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, RoCEv2Port)))
		if err != nil {
			return err
		}
		return setsockopt(rx, unix.SO_RCVBUFFORCE, 16<<20)
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := p.A.Do(func() (err error) {
		tx, err = net.DialUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, RoCEv2Port)))
		if err != nil {
			return err
		}
		if noCheck {
			return setsockopt(tx, unix.SO_NO_CHECK, 1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()

	r := tally{n: n, copies: make([]int, n), bad: make([]int, n)}
	var got atomic.Int64 // r.total, for the sender to watch
	done := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		last := int64(-1)
		for {
			// Quiet for 300 ms after the last send: everything that will
			// come has come (veth delivers within microseconds).
			rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			k, err := rx.Read(buf)
			if err != nil {
				select {
				case <-sent:
					return
				default:
					continue
				}
			}
			r.total++
			got.Add(1)
			seq, ok := decode(buf[:k])
			if seq >= uint32(n) {
				r.unknown++
				continue
			}
			r.copies[seq]++
			if !ok {
				r.bad[seq]++
			}
			if int64(seq) == last && r.copies[seq] == 2 {
				r.adjacent++
			}
			last = int64(seq)
		}
	}()
	b := make([]byte, datagramLen)
	for seq := range n {
		datagram(b, uint32(seq))
		if _, err := tx.Write(b); err != nil {
			t.Fatalf("send %d: %v", seq, err)
		}
		if seq%512 == 511 {
			time.Sleep(time.Millisecond) // let the receiver keep up
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && int(got.Load()) < want() {
		time.Sleep(10 * time.Millisecond)
	}
	close(sent)
	<-done
	if errs := rcvbufErrors(p.B); errs != "" {
		t.Logf("B's UDP counters: %s", errs)
	}
	return r
}

func setsockopt(c *net.UDPConn, opt, v int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, v) }); err != nil {
		return err
	}
	return serr
}

// rcvbufErrors reports the UDP receive errors in h's namespace, which would
// be losses the impairment did not make.
func rcvbufErrors(h *netnstest.Host) string {
	out, err := h.Exec("cat", "/proc/net/snmp")
	if err != nil {
		return ""
	}
	var hdr []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if hdr == nil {
			hdr = f
			continue
		}
		var s []string
		for k := 1; k < len(f) && k < len(hdr); k++ {
			if strings.Contains(hdr[k], "Err") && f[k] != "0" {
				s = append(s, hdr[k]+"="+f[k])
			}
		}
		return strings.Join(s, " ")
	}
	return ""
}

// within checks a measured fraction against p with a bound of six standard
// deviations of a binomial over n trials (and at least 0.2 %).
func within(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	f := float64(got) / float64(n)
	bound := max(6*math.Sqrt(p*(1-p)/float64(n)), 0.002)
	t.Logf("%s: %d of %d = %.3f %% (configured %.3f %%, bound ±%.3f %%)", what, got, n, 100*f, 100*p, 100*bound)
	if math.Abs(f-p) > bound {
		t.Errorf("%s: measured %.4f, configured %.4f, outside ±%.4f", what, f, p, bound)
	}
}

// check compares what B received with the configuration and the counters.
func check(t *testing.T, imp *Impairment, before Counters, r tally, cfg Config, corrupt bool) {
	t.Helper()
	after, err := imp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	c := Counters{
		Seen: after.Seen - before.Seen, Matched: after.Matched - before.Matched,
		Dropped: after.Dropped - before.Dropped, Corrupted: after.Corrupted - before.Corrupted,
		Duplicated: after.Duplicated - before.Duplicated,
	}
	t.Logf("counters %+v; received %d datagrams, %d back-to-back duplicates", c, r.total, r.adjacent)
	if c.Matched != uint64(r.n) {
		t.Errorf("matched %d, sent %d", c.Matched, r.n)
	}
	if r.unknown != 0 {
		t.Errorf("%d datagrams with an unknown sequence number", r.unknown)
	}
	for seq, n := range r.copies {
		if n > 2 || r.bad[seq] > 1 {
			t.Fatalf("seq %d: %d copies, %d bad", seq, n, r.bad[seq])
		}
	}
	// The counters and the receiver agree exactly: veth loses nothing.
	if m := r.missing(); uint64(m) != c.Dropped {
		t.Errorf("missing %d, dropped counter %d", m, c.Dropped)
	}
	if d := r.doubled(); uint64(d) != c.Duplicated {
		t.Errorf("received twice %d, duplicated counter %d", d, c.Duplicated)
	}
	if x := r.corrupted(); uint64(x) != c.Corrupted {
		t.Errorf("corrupted %d, corrupted counter %d", x, c.Corrupted)
	}
	survivors := r.n - r.missing()
	within(t, "dropped", r.missing(), r.n, float64(cfg.DropPPM)/PPM)
	within(t, "duplicated", r.doubled(), survivors, float64(cfg.DuplicatePPM)/PPM)
	if corrupt {
		within(t, "corrupted", r.corrupted(), survivors, float64(cfg.CorruptPPM)/PPM)
	}
}

func attachIn(t *testing.T, h *netnstest.Host, dir Direction, cfg Config) *Impairment {
	t.Helper()
	var imp *Impairment
	if err := h.Do(func() (err error) {
		imp, err = Attach(h.Index, dir, cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { imp.Close() })
	return imp
}

const nDatagrams = 20000

// TestRates impairs A's egress or B's ingress at 5 % and 20 % of each kind
// and checks what B's socket receives against the rates and the counters.
// Corruption is checked over IPv4 only: it needs a zero UDP checksum
// (SO_NO_CHECK) for corrupted datagrams to reach the socket, and IPv6
// forbids a zero UDP checksum.
func TestRates(t *testing.T) {
	for _, tc := range []struct {
		name string
		pct  string
		dir  Direction
		v6   bool
	}{
		{"egress/ipv4/5%", "5%", Egress, false},
		{"egress/ipv4/20%", "20%", Egress, false},
		{"egress/ipv6/20%", "20%", Egress, true},
		{"ingress/ipv4/20%", "20%", Ingress, false},
		{"ingress/ipv6/5%", "5%", Ingress, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netnstest.NewPair(t, netnstest.Options{})
			ppm, err := ParsePercent(tc.pct)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{DropPPM: ppm, DuplicatePPM: ppm, UDPPort: RoCEv2Port}
			if !tc.v6 {
				cfg.CorruptPPM = ppm
			}
			h := p.A
			if tc.dir == Ingress {
				h = p.B
			}
			imp := attachIn(t, h, tc.dir, cfg)
			before, err := imp.Counters()
			if err != nil {
				t.Fatal(err)
			}
			r := blast(t, p, nDatagrams, tc.v6, !tc.v6, func() int {
				c, _ := imp.Counters()
				return nDatagrams - int(c.Dropped-before.Dropped) + int(c.Duplicated-before.Duplicated)
			})
			check(t, imp, before, r, cfg, !tc.v6)
		})
	}
}

// TestOthersUntouched drops every datagram to port 4791 and checks that
// ping, TCP and UDP to other ports still pass, both ways.
func TestOthersUntouched(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{})
	imp := attachIn(t, p.A, Egress, Config{DropPPM: PPM, CorruptPPM: PPM, DuplicatePPM: PPM, UDPPort: RoCEv2Port})
	attachIn(t, p.B, Ingress, Config{DropPPM: PPM, UDPPort: RoCEv2Port})
	for _, dst := range []netip.Addr{p.B.Addr.Addr(), p.B.Addr6.Addr()} {
		if out, err := p.A.Exec("ping", "-c", "3", "-i", "0.2", "-W", "2", dst.String()); err != nil {
			t.Fatalf("ping %s: %v\n%s", dst, err, out)
		}
	}
	if err := tcpEcho(p, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := udpEcho(p, 4792); err != nil {
		t.Fatal(err)
	}
	if r := blast(t, p, 100, false, false, func() int { return 0 }); r.total != 0 {
		t.Fatalf("%d datagrams to 4791 got through 100 %% drop", r.total)
	}
	c, err := imp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Matched != 100 || c.Dropped != 100 || c.Seen <= c.Matched {
		t.Fatalf("counters %+v, want 100 matched and dropped among more seen", c)
	}
}

// tcpEcho sends n bytes from A to B over TCP and reads them back.
func tcpEcho(p *netnstest.Pair, n int) error {
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(p.B.Addr.Addr().String(), "7000"))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:k]); err != nil {
				return
			}
		}
	}()
	return p.A.Do(func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(p.B.Addr.Addr().String(), "7000"), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		want := make([]byte, n)
		for k := range want {
			want[k] = byte(k * 7)
		}
		go c.Write(want)
		got := make([]byte, n)
		for k := 0; k < n; {
			m, err := c.Read(got[k:])
			if err != nil {
				return fmt.Errorf("tcp echo after %d bytes: %w", k, err)
			}
			k += m
		}
		if string(got) != string(want) {
			return errors.New("tcp echo: bytes differ")
		}
		return nil
	})
}

// udpEcho sends one datagram from A to B's port and expects it there.
func udpEcho(p *netnstest.Pair, port uint16) error {
	var rx *net.UDPConn
	dst := netip.AddrPortFrom(p.B.Addr.Addr(), port)
	if err := p.B.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return err
	}
	defer rx.Close()
	if err := p.A.Do(func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("not roce"))
		return err
	}); err != nil {
		return err
	}
	rx.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	k, err := rx.Read(buf)
	if err != nil || string(buf[:k]) != "not roce" {
		return fmt.Errorf("udp to port %d: %q, %v", port, buf[:k], err)
	}
	return nil
}

// TestSetAndClose changes the rates of a running impairment and detaches it.
func TestSetAndClose(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{})
	imp := attachIn(t, p.A, Egress, Config{UDPPort: RoCEv2Port})
	const n = 1000
	all := func() int { return n }
	if r := blast(t, p, n, false, true, all); r.total != n || r.missing() != 0 || r.corrupted() != 0 {
		t.Fatalf("rates 0: received %d of %d, %d corrupted", r.total, n, r.corrupted())
	}
	if err := imp.Set(Config{DropPPM: PPM, UDPPort: RoCEv2Port}); err != nil {
		t.Fatal(err)
	}
	if r := blast(t, p, n, false, true, func() int { return 0 }); r.total != 0 {
		t.Fatalf("drop 100 %%: received %d", r.total)
	}
	if err := imp.Set(Config{DuplicatePPM: PPM, UDPPort: RoCEv2Port}); err != nil {
		t.Fatal(err)
	}
	if r := blast(t, p, n, false, true, func() int { return 2 * n }); r.total != 2*n || r.doubled() != n {
		t.Fatalf("duplicate 100 %%: received %d, %d twice", r.total, r.doubled())
	}
	if err := imp.Set(Config{DropPPM: PPM + 1}); err == nil {
		t.Fatal("Set accepted a rate above 100 %")
	}
	if err := imp.Set(Config{DropPPM: PPM, UDPPort: RoCEv2Port}); err != nil {
		t.Fatal(err)
	}
	if got := tcxEgress(t, p.A); got != 1 {
		t.Fatalf("%d tcx egress programs attached, want 1", got)
	}
	if err := imp.Close(); err != nil {
		t.Fatal(err)
	}
	if got := tcxEgress(t, p.A); got != 0 {
		t.Fatalf("%d tcx egress programs attached after Close", got)
	}
	if r := blast(t, p, n, false, true, all); r.total != n || r.missing() != 0 {
		t.Fatalf("after Close: received %d of %d", r.total, n)
	}
}

// tcxEgress counts the tcx egress programs on h's interface.
func tcxEgress(t *testing.T, h *netnstest.Host) (n int) {
	t.Helper()
	if err := h.Do(func() error {
		r, err := link.QueryPrograms(link.QueryOptions{Target: h.Index, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			return err
		}
		n = len(r.Programs)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]uint32{"5%": 50000, "20 %": 200000, "0.5%": 5000, "100": PPM, "0": 0, "0.0001%": 1, " 12.5% ": 125000} {
		if got, err := ParsePercent(in); err != nil || got != want {
			t.Errorf("ParsePercent(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "-1%", "101%", "NaN", "0.00001%", "5%%", "five"} {
		if got, err := ParsePercent(in); err == nil {
			t.Errorf("ParsePercent(%q) = %d, want an error", in, got)
		}
	}
}
