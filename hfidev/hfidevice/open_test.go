package hfidevice_test

import (
	"context"
	"errors"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
)

// fakeHost is NewModelHost (WFR), as DefaultHost until the test ends.
func fakeHost(t *testing.T) *hfidevice.ModelHost {
	t.Helper()
	m, err := hfidevice.NewModelHost(abi.ChipWFR, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	saved := hfidevice.DefaultHost
	hfidevice.DefaultHost = m.Host
	t.Cleanup(func() { hfidevice.DefaultHost = saved })
	return m
}

// byName opens unit name through GetInfo (the domain it names) with an
// MSG endpoint.
func byName(t *testing.T, name string) *side {
	t.Helper()
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg,
		Domain: fabric.DomainAttr{Name: name, Progress: fabric.ProgressManual, Threading: fabric.ThreadDomain},
		TX:     fabric.TxAttr{Size: 64}, RX: fabric.RxAttr{Size: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Domain.Name != name || infos[0].Provider != fabric.ProviderSoftfabric {
		t.Fatalf("GetInfo for %s: %+v", name, infos)
	}
	return openInfo(t, infos[0], fabric.EPMsg, 0)
}

// Verified against the model only: units opened by name, as on a host
// with two HFIs (/dev/hfi1_N, sysfs, a peers file), whose nodes the model
// serves. GetInfo offers each unit's domain, its address the peers
// file's; MSG endpoints on the two domains connect and carry send/recv,
// RDMA write and read and atomics byte-exact.
func TestOpenByName(t *testing.T) {
	m := fakeHost(t)
	units, wire := m.Units, m.Wire
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) < 2 || infos[0].Domain.Name != "hfi1_0" || infos[1].Domain.Name != "hfi1_1" {
		t.Fatalf("GetInfo offers %+v", infos)
	}
	for i, info := range infos[:2] {
		if info.Src != hfidevice.DefaultGIDs[i].Unmap() {
			t.Errorf("%s: Src %v, want %v", info.Domain.Name, info.Src, hfidevice.DefaultGIDs[i].Unmap())
		}
	}
	a, b := byName(t, "hfi1_0"), byName(t, "hfi1_1")
	for i, u := range units {
		if u.OpenFiles() != 1 {
			t.Errorf("unit %d: %d files open, want the domain's context", i, u.OpenFiles())
		}
	}
	if m := a.dom.ActiveMTU(); m != 4096 {
		t.Errorf("active MTU %d, want 4096", m)
	}
	connect(t, a, b)
	rmaOps(t, a, b, []int{1, 2100, 4097, 65536})
	atomicOps(t, a, b)
	a.close()
	b.close()
	if w := wire.Stats(); w.Carried < 3*16 || w.Dropped != 0 {
		t.Errorf("wire: %+v", w)
	}
	t.Logf("wire: %+v", wire.Stats())
	for i, u := range units {
		if u.OpenFiles() != 0 {
			t.Errorf("unit %d: %d files open after the domain closed", i, u.OpenFiles())
		}
	}
}

// Opening by name fails clearly, and never on the model in the unit's
// place: no node, a port that is not ACTIVE, no peers file, a malformed
// one, and (at connection time) a peer missing from the file.
func TestOpenByNameErrors(t *testing.T) {
	t.Run("real host without units", func(t *testing.T) {
		if units, _ := hfidev.Units(); len(units) > 0 {
			t.Skip("this host has HFI units")
		}
		if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, hfidev.ErrNoDevice) {
			t.Fatalf("OpenAny(hfi1_0) on a host without HFIs: %v", err)
		}
	})
	t.Run("no unit", func(t *testing.T) {
		fakeHost(t)
		if _, err := device.OpenAny("hfi1_7", device.OpenOptions{}); !errors.Is(err, hfidev.ErrNoDevice) {
			t.Fatalf("OpenAny(hfi1_7): %v", err)
		}
		_, err := fabric.GetInfo(context.Background(), &fabric.Hints{Domain: fabric.DomainAttr{Name: "hfi1_7"}})
		if !errors.Is(err, fabric.ErrNoData) || !errors.Is(err, hfidev.ErrNoDevice) {
			t.Fatalf("GetInfo(hfi1_7): %v", err)
		}
	})
	t.Run("port down", func(t *testing.T) {
		m := fakeHost(t)
		m.SysfsFiles["hfi1_1/ports/1/state"].Data = []byte("1: DOWN\n")
		if _, err := device.OpenAny("hfi1_1", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPortNotActive) {
			t.Fatalf("OpenAny(hfi1_1): %v", err)
		}
		infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg})
		if err != nil || infos[0].Domain.Name != "hfi1_0" || len(infos) > 1 && infos[1].Domain.Name == "hfi1_1" {
			t.Fatalf("GetInfo offers %+v (%v); want hfi1_0, not hfi1_1", infos, err)
		}
	})
	t.Run("no peers file", func(t *testing.T) {
		m := fakeHost(t)
		if err := os.Remove(filepath.Join(m.PeersDir, "hfi1_0.peers")); err != nil {
			t.Fatal(err)
		}
		if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPeers) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("OpenAny(hfi1_0): %v", err)
		}
	})
	t.Run("malformed peers file", func(t *testing.T) {
		m := fakeHost(t)
		if err := m.WritePeers(0, append(m.Peers, "10.0.0.9 0x10")); err != nil {
			t.Fatal(err)
		}
		if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPeers) {
			t.Fatalf("OpenAny(hfi1_0): %v", err)
		}
	})
	t.Run("peer not in the file", func(t *testing.T) {
		m := fakeHost(t)
		// hfi1_0's file knows only itself: hfi1_1's address has no LID.
		if err := m.WritePeers(0, m.Peers[:1]); err != nil {
			t.Fatal(err)
		}
		a, b := byName(t, "hfi1_0"), byName(t, "hfi1_1")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := a.ep.ConnectQP(ctx, b.ep.QPInfo(), fabric.QPOptions{})
		if !errors.Is(err, hfidevice.ErrNoRoute) {
			t.Fatalf("connecting hfi1_0 to hfi1_1's address: %v", err)
		}
	})
}

// A unit whose user contexts are all assigned (the model has 16): the
// next open fails with ASSIGN_CTXT's EBUSY, as device.ErrBusy through
// device.OpenAny and fabric.ErrBusy through a fabric domain.
func TestOpenBusy(t *testing.T) {
	fakeHost(t)
	d, err := device.OpenAny("hfi1_0", device.OpenOptions{Queues: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, device.ErrBusy) || !errors.Is(err, unix.EBUSY) {
		t.Fatalf("OpenAny with every context taken: %v", err)
	}
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg, Domain: fabric.DomainAttr{Name: "hfi1_0"}})
	if err != nil || len(infos) != 1 {
		t.Fatalf("GetInfo: %d offers, %v", len(infos), err)
	}
	fab, err := fabric.OpenFabric(&infos[0])
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	if dom, err := fab.Domain(&infos[0]); !errors.Is(err, fabric.ErrBusy) || !errors.Is(err, device.ErrBusy) {
		if err == nil {
			dom.Close()
		}
		t.Fatalf("Domain with every context taken: %v", err)
	}
}
