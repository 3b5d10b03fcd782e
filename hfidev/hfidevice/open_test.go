package hfidevice_test

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/model"
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
	info, err := nameInfo(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return openInfo(t, info, fabric.EPMsg, 0)
}

// nameInfo is GetInfo's offer of an MSG endpoint on the domain of unit
// name, with queues queues (0: the offer's default).
func nameInfo(name string, queues int) (fabric.Info, error) {
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg,
		Domain: fabric.DomainAttr{Name: name, Progress: fabric.ProgressManual, Threading: fabric.ThreadDomain, Queues: queues},
		TX:     fabric.TxAttr{Size: 64}, RX: fabric.RxAttr{Size: 64}})
	if err != nil {
		return fabric.Info{}, err
	}
	if len(infos) != 1 || infos[0].Domain.Name != name || infos[0].Provider != fabric.ProviderSoftfabric {
		return fabric.Info{}, fmt.Errorf("GetInfo for %s: %+v", name, infos)
	}
	return infos[0], nil
}

// writePeers writes lines as both units' peers file.
func writePeers(t *testing.T, m *hfidevice.ModelHost, lines ...string) {
	t.Helper()
	for i := range m.Units {
		if err := m.WritePeers(i, lines); err != nil {
			t.Fatal(err)
		}
	}
}

// holdContexts assigns n user contexts of unit u, as another process
// would, until the test ends.
func holdContexts(t *testing.T, u *model.Unit, n int) {
	t.Helper()
	for range n {
		c, err := hfidev.OpenContext(u, u.Path(), hfidev.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
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

// A unit whose user contexts are all assigned (the model has 16; another
// process holds them): GetInfo does not offer it (ErrNoData and
// device.ErrBusy: nfreectxts is 0); opening it fails with ASSIGN_CTXT's
// EBUSY, as device.ErrBusy through device.OpenAny and fabric.ErrBusy
// through a fabric domain offered before the contexts were taken.
func TestOpenBusy(t *testing.T) {
	m := fakeHost(t)
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg, Domain: fabric.DomainAttr{Name: "hfi1_0"}})
	if err != nil || len(infos) != 1 {
		t.Fatalf("GetInfo: %d offers, %v", len(infos), err)
	}
	holdContexts(t, m.Units[0], m.Units[0].Config().UserContexts)
	if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, device.ErrBusy) || !errors.Is(err, unix.EBUSY) {
		t.Fatalf("OpenAny with every context taken: %v", err)
	}
	_, err = nameInfo("hfi1_0", 0)
	if !errors.Is(err, fabric.ErrNoData) || !errors.Is(err, device.ErrBusy) || !strings.Contains(err.Error(), "hfi1_0: 0 free user contexts (nfreectxts); 1 queue need 1") {
		t.Fatalf("GetInfo with every context taken: %v", err)
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

// Verified against the model only: units opened by name with several
// contexts, as many as their own peers-file lines list (2 and 2, 3 and
// 3, and 2 talking to 1: a peer's count does not bound ours, since we
// send to its QPN q at its line's context q % its count). GetInfo offers
// each domain with that many queues, by default and when asked; MSG
// endpoints on every worker of both domains, each QPN drawn to map to its
// worker (QPN % n), connect in pairs and carry send/recv, RDMA write and
// read of 1 B, 4 KiB and 64 KiB byte-exact; every listed context
// receives, no packet reaches a context not in use, and closing frees
// every context.
func TestOpenByNameQueues(t *testing.T) {
	for _, n := range [][2]int{{2, 2}, {3, 3}, {2, 1}} {
		t.Run(fmt.Sprintf("%d-%d", n[0], n[1]), func(t *testing.T) {
			m := fakeHost(t)
			writePeers(t, m, m.PeerLine(0, n[0]), m.PeerLine(1, n[1]))
			names := [2]string{"hfi1_0", "hfi1_1"}
			var infos [2]fabric.Info
			for i, name := range names {
				info, err := nameInfo(name, 0)
				if err != nil || info.Domain.Queues != n[i] {
					t.Fatalf("GetInfo(%s): %d queues, %v; want %d", name, info.Domain.Queues, err, n[i])
				}
				if asked, err := nameInfo(name, n[i]); err != nil || asked.Domain.Queues != n[i] {
					t.Fatalf("GetInfo(%s, %d queues): %d, %v", name, n[i], asked.Domain.Queues, err)
				}
				infos[i] = info
			}
			// Pair k: a's endpoint on worker k % n[0], b's on worker
			// (k+1) % n[1], so that every worker of both carries traffic
			// and (where both have several) pairs cross workers.
			pairs := max(n[0], n[1])
			var eps [2][]*side
			for k := range pairs {
				for i, info := range infos {
					w := (k + i) % n[i]
					if k == 0 {
						eps[i] = append(eps[i], openInfo(t, info, fabric.EPMsg, w))
						if q := eps[i][0].dom.Queues(); q != n[i] {
							t.Fatalf("%s: domain serves %d queues, want %d", names[i], q, n[i])
						}
					} else {
						eps[i] = append(eps[i], eps[i][0].endpoint(t, info, fabric.EPMsg, w))
					}
					if q := eps[i][k].ep.QPInfo().QPN; int(q%uint32(n[i])) != w {
						t.Errorf("%s: QPN %d on worker %d (QPN %% %d = %d)", names[i], q, w, n[i], q%uint32(n[i]))
					}
				}
			}
			for k := range pairs {
				a, b := eps[0][k], eps[1][k]
				connect(t, a, b)
				rmaOps(t, a, b, []int{1, 4096, 65536})
			}
			// Peers sent each packet to the context its line lists for
			// the QPN: every listed context received, none other did.
			for i, u := range m.Units {
				first := u.Config().FirstUserCtxt
				for c := range n[i] {
					if r, ok := u.RcvStats(uint16(first + c)); !ok || r.Packets == 0 || r.HdrqFull+r.EgrFull != 0 {
						t.Errorf("%s context %d: %+v (in use: %v)", names[i], first+c, r, ok)
					}
				}
				if _, ok := u.RcvStats(uint16(first + n[i])); ok {
					t.Errorf("%s: context %d in use", names[i], first+n[i])
				}
				if s := u.IngressStats(); s.Delivered == 0 || s.NoContext+s.NotLocal+s.NotKDETH+s.Malformed+s.JKey != 0 {
					t.Errorf("%s ingress: %+v", names[i], s)
				}
			}
			if w := m.Wire.Stats(); w.Dropped != 0 {
				t.Errorf("wire: %+v", w)
			}
			for i := range eps {
				for k := len(eps[i]) - 1; k >= 0; k-- { // the domain's side last
					eps[i][k].close()
				}
			}
			for i, u := range m.Units {
				if u.OpenFiles() != 0 || u.FreeContexts() != u.Config().UserContexts {
					t.Errorf("%s after close: %d files open, %d contexts free", names[i], u.OpenFiles(), u.FreeContexts())
				}
			}
		})
	}
}

// A unit serves as many queues as its own peers-file line lists receive
// contexts, and only the contexts listed: GetInfo refuses other counts
// (ErrNoData, ErrPeers, saying why), a line listing more contexts than
// the unit has, or more than are free now (device.ErrBusy); opening
// fails when the driver assigns a context the line does not list (one is
// held elsewhere) or a line names a context twice.
func TestOpenByNameQueuesErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		lines  func(m *hfidevice.ModelHost) []string
		held   int // contexts of hfi1_0 held by another process
		queues int // asked of GetInfo
		want   error
		reason string // in GetInfo's error
	}{
		{name: "more than the line lists", queues: 2, want: hfidevice.ErrPeers,
			reason: "hfi1_0: line for LID 1 lists 1 receive context; 2 queues need 2"},
		{name: "fewer than the line lists", queues: 1, want: hfidevice.ErrPeers,
			lines:  func(m *hfidevice.ModelHost) []string { return []string{m.PeerLine(0, 2), m.PeerLine(1, 1)} },
			reason: "hfi1_0: line for LID 1 lists 2 receive contexts, which peers send to by QPN; 1 queue would leave 1 unserved"},
		{name: "no line of its own", queues: 2, want: hfidevice.ErrPeers,
			lines:  func(m *hfidevice.ModelHost) []string { return []string{m.PeerLine(1, 2)} },
			reason: "hfi1_0: no line for LID 1 lists the unit's receive contexts; 2 queues need one listing 2"},
		{name: "more than the unit has", want: hfidevice.ErrPeers,
			lines:  func(m *hfidevice.ModelHost) []string { return []string{m.PeerLine(0, 17), m.PeerLine(1, 1)} },
			reason: "hfi1_0: line for LID 1 lists 17 receive contexts; the unit has 16 user contexts (nctxts)"},
		{name: "fewer free", held: 15, want: device.ErrBusy,
			lines:  func(m *hfidevice.ModelHost) []string { return []string{m.PeerLine(0, 2), m.PeerLine(1, 1)} },
			reason: "hfi1_0: 1 free user context (nfreectxts); 2 queues need 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fakeHost(t)
			if c.lines != nil {
				writePeers(t, m, c.lines(m)...)
			}
			holdContexts(t, m.Units[0], c.held)
			_, err := nameInfo("hfi1_0", c.queues)
			if !errors.Is(err, fabric.ErrNoData) || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("GetInfo: %v; want %v saying %q", err, c.want, c.reason)
			}
			// Listing every unit leaves hfi1_0 out; hfi1_1 is offered.
			infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg, Domain: fabric.DomainAttr{Queues: c.queues}})
			if err == nil && infos[0].Domain.Name == "hfi1_0" {
				t.Errorf("GetInfo offers hfi1_0: %+v", infos[0])
			}
			if c.queues > 0 {
				if _, err := device.OpenAny("hfi1_0", device.OpenOptions{Queues: c.queues}); !errors.Is(err, hfidevice.ErrPeers) {
					t.Errorf("OpenAny(hfi1_0, %d queues): %v", c.queues, err)
				}
			}
			if n := m.Units[0].OpenFiles(); n != c.held {
				t.Errorf("%d files open, want %d", n, c.held)
			}
		})
	}
	t.Run("listed context held elsewhere", func(t *testing.T) {
		m := fakeHost(t)
		holdContexts(t, m.Units[0], 1) // context 3, the line's
		if _, err := nameInfo("hfi1_0", 0); err != nil {
			t.Fatalf("GetInfo: %v (15 contexts are free)", err)
		}
		_, err := device.OpenAny("hfi1_0", device.OpenOptions{})
		if !errors.Is(err, hfidevice.ErrPeers) || !strings.Contains(err.Error(), "hfi1_0: the driver assigned receive context 4 to worker 0; the line for LID 1 lists 3") {
			t.Fatalf("OpenAny(hfi1_0): %v", err)
		}
		if n := m.Units[0].OpenFiles(); n != 1 {
			t.Errorf("%d files open, want the holder's", n)
		}
	})
	t.Run("context listed twice", func(t *testing.T) {
		m := fakeHost(t)
		writePeers(t, m, "127.0.0.1 1 3,3", m.PeerLine(1, 1))
		if _, err := device.OpenAny("hfi1_0", device.OpenOptions{}); !errors.Is(err, hfidevice.ErrPeers) || !strings.Contains(err.Error(), "context 3 listed twice") {
			t.Fatalf("OpenAny(hfi1_0): %v", err)
		}
	})
}
