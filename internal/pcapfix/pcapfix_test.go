package pcapfix_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
	"github.com/softfabric/softfabric/internal/pcapfix"
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0xb}
	t0   = time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)
)

// frame is a made-up Ethernet frame of n bytes from src to dst, numbered i.
func frame(i int, src, dst [6]byte, n int) []byte {
	b := make([]byte, n)
	copy(b, dst[:])
	copy(b[6:], src[:])
	b[12], b[13] = 0x88, 0xb5 // local experimental EtherType
	for j := 14; j < n; j++ {
		b[j] = byte(i + j)
	}
	return b
}

// sent is a frame as it went, to compare with what is read back.
type sent struct {
	data []byte
	ts   time.Time
	dir  pcaplink.Direction
}

// capture sends frames both ways over a memlink pair whose end a
// pcaplink records into a file of the given format, with snap length snap.
func capture(t *testing.T, path string, f pcaplink.Format, snap int) []sent {
	t.Helper()
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	a, b := memlink.NewPair(memlink.Config{})
	now := t0
	c, err := pcaplink.Wrap(a, file, pcaplink.Options{Format: f, SnapLen: snap, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Link()
	var out []sent
	bufs, sizes := [][]byte{make([]byte, 9018), make([]byte, 9018)}, []int{0, 0}
	for i := range 6 {
		now = now.Add(time.Duration(i)*time.Millisecond + 1)
		fr := frame(i, macA, macB, 60+i*700)
		if _, err := l.Send([][]byte{fr}); err != nil {
			t.Fatal(err)
		}
		out = append(out, sent{fr, now, pcaplink.Out})
		if i%2 == 1 {
			fr := frame(100+i, macB, macA, 64+i)
			if _, err := b.Send([][]byte{fr}); err != nil {
				t.Fatal(err)
			}
			now = now.Add(3 * time.Microsecond)
			if n, err := l.Recv(bufs, sizes); n != 1 || err != nil {
				t.Fatal(n, err)
			}
			out = append(out, sent{fr, now, pcaplink.In})
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func compare(t *testing.T, got []pcapfix.Frame, want []sent, snap int, dirs bool, res time.Duration) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		n := len(w.data)
		if snap > 0 {
			n = min(n, snap)
		}
		if g.Length != len(w.data) || !bytes.Equal(g.Data, w.data[:n]) || g.Truncated() != (n < len(w.data)) {
			t.Fatalf("frame %d: %d of %d bytes, want %d of %d", i, len(g.Data), g.Length, n, len(w.data))
		}
		if !g.Time.Equal(w.ts.Truncate(res)) {
			t.Fatalf("frame %d: time %v, want %v", i, g.Time, w.ts.Truncate(res))
		}
		wd := pcaplink.Unknown
		if dirs {
			wd = w.dir
		}
		if g.Dir != wd {
			t.Fatalf("frame %d: direction %v, want %v", i, g.Dir, wd)
		}
	}
}

func TestReadPcaplinkCaptures(t *testing.T) {
	for _, tc := range []struct {
		file string
		snap int
	}{
		{"x.pcap", 0},
		{"x.pcapng", 0},
		{"snapped.pcap", 100},
		{"snapped.pcapng", 100},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			f := pcaplink.FormatOf(path)
			want := capture(t, path, f, tc.snap)
			got, err := pcapfix.ReadFrames(path)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, got, want, tc.snap, f == pcaplink.PcapNG, 1)
			if f == pcaplink.Pcap {
				// What a test replaying an rxe capture does: directions
				// from the addresses.
				pcapfix.InferDirection(got, macA)
				compare(t, got, want, tc.snap, true, 1)
			}
		})
	}
}

// TestReadForeignCaptures reads files pcaplink did not write: classic pcap
// with microsecond timestamps (tcpdump's default) and pcapng with one
// interface; neither knows directions.
func TestReadForeignCaptures(t *testing.T) {
	var want []sent
	for i := range 5 {
		src, dst := macA, macB
		if i%2 == 1 {
			src, dst = macB, macA
		}
		want = append(want, sent{frame(i, src, dst, 60+i*100), t0.Add(time.Duration(i) * time.Second), pcaplink.Unknown})
	}
	ci := func(w sent) gopacket.CaptureInfo {
		return gopacket.CaptureInfo{Timestamp: w.ts, CaptureLength: len(w.data), Length: len(w.data)}
	}

	var classic bytes.Buffer
	pw := pcapgo.NewWriter(&classic)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if err := pw.WritePacket(ci(w), w.data); err != nil {
			t.Fatal(err)
		}
	}
	got, err := pcapfix.Read(&classic)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, got, want, 0, false, time.Microsecond)

	var ng bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if err := nw.WritePacket(ci(w), w.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := nw.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "foreign.pcapng")
	if err := os.WriteFile(path, ng.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err = pcapfix.ReadFrames(path); err != nil {
		t.Fatal(err)
	}
	compare(t, got, want, 0, false, 1)

	pcapfix.InferDirection(got, macB)
	for i, f := range got {
		if want := []pcaplink.Direction{pcaplink.In, pcaplink.Out}[i%2]; f.Dir != want {
			t.Fatalf("frame %d: inferred %v, want %v", i, f.Dir, want)
		}
	}
}

// TestReadRefusesOtherLinkTypes: a capture on "any" (Linux cooked headers)
// is refused, not misread.
func TestReadRefusesOtherLinkTypes(t *testing.T) {
	var classic bytes.Buffer
	pw := pcapgo.NewWriter(&classic)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeLinuxSLL); err != nil {
		t.Fatal(err)
	}
	if _, err := pcapfix.Read(&classic); err == nil || !strings.Contains(err.Error(), "Ethernet") {
		t.Fatalf("classic SLL: %v", err)
	}
	var ng bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ng, layers.LinkTypeLinuxSLL)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 40)
	if err := nw.WritePacket(gopacket.CaptureInfo{Timestamp: t0, CaptureLength: 40, Length: 40}, data); err != nil {
		t.Fatal(err)
	}
	if err := nw.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := pcapfix.Read(&ng); err == nil || !strings.Contains(err.Error(), "Ethernet") {
		t.Fatalf("pcapng SLL: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	if _, err := pcapfix.ReadFrames(filepath.Join(t.TempDir(), "missing.pcap")); err == nil {
		t.Fatal("missing file read")
	}
	for _, b := range [][]byte{nil, []byte("not a capture at all, no")} {
		if _, err := pcapfix.Read(bytes.NewReader(b)); err == nil {
			t.Fatalf("%q read", b)
		}
	}
}
