package test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// TestStatusSockets: while a process holds the device, `status` shows its
// AF_XDP socket on each queue, in copy mode on veth (which has no
// zero-copy AF_XDP), with transmit frames built in place in the UMEM;
// once it is gone, none.
func TestStatusSockets(t *testing.T) {
	p := setup(t, netnstest.Options{Queues: 2}, false)
	upInProcess(t, p.A, p.B) // the sockets of an application that owns the device
	srv := p.B.Command(sfBin, "perf", "write", "--iface", p.B.Iface, "--timeout", "30s")
	var serr bytes.Buffer
	srv.Stderr = &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Wait() }()
	defer func() { _ = srv.Process.Kill(); wg.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	var st []struct {
		Owner   int `json:"owner_pid"`
		Sockets []struct {
			Queue   int    `json:"queue"`
			Mode    string `json:"mode"`
			InPlace bool   `json:"tx_in_place"`
			RxRing  int    `json:"rx_ring"`
		} `json:"sockets"`
	}
	if err := json.Unmarshal([]byte(mustSF(t, p.B, "status", "--json", p.B.Iface)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Owner != srv.Process.Pid || len(st[0].Sockets) != 2 {
		t.Fatalf("status while perf holds the device: %+v (perf pid %d)", st, srv.Process.Pid)
	}
	for q, k := range st[0].Sockets {
		if k.Queue != q || k.Mode != "copy" || !k.InPlace || k.RxRing != 2048 {
			t.Fatalf("socket %d: %+v", q, k)
		}
	}
	text := mustSF(t, p.B, "status", p.B.Iface)
	if !strings.Contains(text, "\tsocket:\t\t\tqueue 1, AF_XDP copy, transmit frames built in place in the UMEM (rings rx/tx/fill/completion 2048/2048/2048/2048, UMEM 4096 × 4096 B)\n") {
		t.Fatalf("status:\n%s", text)
	}
	_ = srv.Process.Kill()
	wg.Wait()
	if text := mustSF(t, p.B, "status", p.B.Iface); strings.Contains(text, "socket:") {
		t.Fatalf("sockets listed after their owner died:\n%s", text)
	}
}
