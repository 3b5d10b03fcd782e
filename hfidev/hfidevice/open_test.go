package hfidevice_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// node is a model unit answering for a /dev node path: hfidev opens
// "/dev/hfi1_N" through it as it would open the driver's node.
type node struct {
	*model.Unit
	path string
}

func (n node) Open(path string, flags int) (int, error) {
	if path != n.path {
		return -1, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	return n.Unit.Open(n.Unit.Path(), flags)
}

// fakeHost is a host with two HFI units, hfi1_0 (LID 1) and hfi1_1 (LID
// 2): a fake /dev whose character devices the two modeled units serve
// (through the sys seam), joined back to back by a wire; a fake sysfs
// saying their ports are ACTIVE; and a peers file in a temporary
// directory, hfi1_N.peers for each, giving the units addresses
// DefaultGIDs and their first receive contexts. It becomes DefaultHost
// until the test ends. edit, if not nil, changes the sysfs and the peers
// files' lines before they are written.
func fakeHost(t *testing.T, edit func(sysfs fstest.MapFS, peers []string) []string) (hfidevice.Host, [2]*model.Unit, *model.Wire) {
	t.Helper()
	dev, sysfs := fstest.MapFS{}, fstest.MapFS{}
	nodes := map[string]sys.Sys{}
	var units [2]*model.Unit
	var peers []string
	for i := range units {
		cfg := model.DefaultConfig(abi.ChipWFR)
		cfg.Unit, cfg.LID = i, uint16(i+1)
		u, err := model.NewUnit(cfg)
		if err != nil {
			t.Fatal(err)
		}
		units[i] = u
		name := fmt.Sprintf("hfi1_%d", i)
		dev[name] = &fstest.MapFile{Mode: fs.ModeCharDevice | 0o666}
		nodes["/dev/"+name] = node{Unit: u, path: "/dev/" + name}
		port := name + "/ports/1/"
		sysfs[port+"lid"] = &fstest.MapFile{Data: fmt.Appendf(nil, "0x%x\n", cfg.LID)}
		sysfs[port+"state"] = &fstest.MapFile{Data: []byte("4: ACTIVE\n")}
		sysfs[port+"gids/0"] = &fstest.MapFile{Data: fmt.Appendf(nil, "fe80:0000:0000:0000:0011:7501:0101:%04x\n", i+1)}
		peers = append(peers, fmt.Sprintf("%v %d %d # %s", hfidevice.DefaultGIDs[i].Unmap(), cfg.LID, cfg.FirstUserCtxt, name))
	}
	wire := model.Connect(units[0], units[1])
	if edit != nil {
		peers = edit(sysfs, peers)
	}
	dir := t.TempDir()
	for i := range units {
		text := "# ADDR LID CTXTS\n\n"
		for _, p := range peers {
			text += p + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("hfi1_%d.peers", i)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := hfidevice.Host{Dev: dev, DevDir: "/dev", Sysfs: sysfs, PeersDir: dir,
		Sys: func(path string) sys.Sys { return nodes[path] }}
	saved := hfidevice.DefaultHost
	hfidevice.DefaultHost = h
	t.Cleanup(func() { hfidevice.DefaultHost = saved })
	return h, units, wire
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
	_, units, wire := fakeHost(t, nil)
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
		fakeHost(t, nil)
		if _, err := device.OpenAny("hfi1_7", device.OpenOptions{}); !errors.Is(err, hfidev.ErrNoDevice) {
			t.Fatalf("OpenAny(hfi1_7): %v", err)
		}
		_, err := fabric.GetInfo(context.Background(), &fabric.Hints{Domain: fabric.DomainAttr{Name: "hfi1_7"}})
		if !errors.Is(err, fabric.ErrNoData) || !errors.Is(err, hfidev.ErrNoDevice) {
			t.Fatalf("GetInfo(hfi1_7): %v", err)
		}
	})
	t.Run("port down", func(t *testing.T) {
		fakeHost(t, func(sysfs fstest.MapFS, peers []string) []string {
			sysfs["hfi1_1/ports/1/state"].Data = []byte("1: DOWN\n")
			return peers
		})
		if _, err := device.OpenAny("hfi1_1", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPortNotActive) {
			t.Fatalf("OpenAny(hfi1_1): %v", err)
		}
		infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg})
		if err != nil || infos[0].Domain.Name != "hfi1_0" || len(infos) > 1 && infos[1].Domain.Name == "hfi1_1" {
			t.Fatalf("GetInfo offers %+v (%v); want hfi1_0, not hfi1_1", infos, err)
		}
	})
	t.Run("no peers file", func(t *testing.T) {
		h, _, _ := fakeHost(t, nil)
		if err := os.Remove(filepath.Join(h.PeersDir, "hfi1_0.peers")); err != nil {
			t.Fatal(err)
		}
		if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPeers) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("OpenAny(hfi1_0): %v", err)
		}
	})
	t.Run("malformed peers file", func(t *testing.T) {
		fakeHost(t, func(_ fstest.MapFS, peers []string) []string { return append(peers, "10.0.0.9 0x10") })
		if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPeers) {
			t.Fatalf("OpenAny(hfi1_0): %v", err)
		}
	})
	t.Run("peer not in the file", func(t *testing.T) {
		h, _, _ := fakeHost(t, nil)
		// hfi1_0's file knows only itself: hfi1_1's address has no LID.
		own := fmt.Appendf(nil, "%v 1 3\n", hfidevice.DefaultGIDs[0].Unmap())
		if err := os.WriteFile(filepath.Join(h.PeersDir, "hfi1_0.peers"), own, 0o644); err != nil {
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
