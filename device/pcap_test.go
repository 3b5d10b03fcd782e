package device

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
	"github.com/softfabric/softfabric/internal/pcapfix"
)

func TestDebugCaptureUnset(t *testing.T) {
	t.Setenv(envPcap, "")
	a, _ := memlink.NewPair(memlink.Config{})
	l, closer, err := debugCapture(a, "eth9", nil)
	if err != nil || l != a || closer != nil {
		t.Fatalf("unset: %v, %v, %v", l, closer != nil, err)
	}
}

// TestDebugCapture records through SOFTFABRIC_DEBUG_PCAP with a limit and a
// snap length, and reads the file back.
func TestDebugCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcapng")
	t.Setenv(envPcap, path)
	t.Setenv(envPcapLimit, "3")
	t.Setenv(envPcapSnapLen, "20")
	a, b := memlink.NewPair(memlink.Config{})
	var stderr bytes.Buffer
	l, closer, err := debugCapture(a, "eth9", &stderr)
	if err != nil {
		t.Fatal(err)
	}
	frame := bytes.Repeat([]byte{7}, 100)
	for range 4 {
		if _, err := l.Send([][]byte{frame}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Send([][]byte{frame}); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Recv([][]byte{make([]byte, 200)}, []int{0}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if err := closer(); err != nil {
		t.Fatal(err)
	}
	frames, err := pcapfix.ReadFrames(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 3 {
		t.Fatalf("%d frames, want 3", len(frames))
	}
	for i, f := range frames {
		if f.Dir != pcaplink.Out || f.Length != 100 || !bytes.Equal(f.Data, frame[:20]) {
			t.Fatalf("frame %d: %v, %d of %d bytes", i, f.Dir, len(f.Data), f.Length)
		}
	}
	want := "softfabric: SOFTFABRIC_DEBUG_PCAP: 3 frames recorded in " + path + " (1 received, 4 sent), 2 not recorded (limit 3: raise SOFTFABRIC_DEBUG_PCAP_LIMIT)\n"
	if stderr.String() != want {
		t.Fatalf("stderr %q, want %q", stderr.String(), want)
	}
}

func TestDebugCaptureBadEnv(t *testing.T) {
	dir := t.TempDir()
	a, _ := memlink.NewPair(memlink.Config{})
	for _, env := range [][3]string{
		{filepath.Join(dir, "x.pcap"), "many", ""},
		{filepath.Join(dir, "x.pcap"), "-1", ""},
		{filepath.Join(dir, "x.pcap"), "", "big"},
		{filepath.Join(dir, "no", "such", "dir.pcap"), "", ""},
	} {
		t.Setenv(envPcap, env[0])
		t.Setenv(envPcapLimit, env[1])
		t.Setenv(envPcapSnapLen, env[2])
		if _, _, err := debugCapture(a, "eth9", nil); err == nil || !strings.Contains(err.Error(), "SOFTFABRIC_DEBUG_PCAP") {
			t.Errorf("%q: %v", env, err)
		}
	}
}
