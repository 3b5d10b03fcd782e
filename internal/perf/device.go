package perf

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
)

// Device is where perf's tests run: a softfabric device the caller has
// open (and owns, for as long as the tests run). Each RDMA test and
// ping-pong opens a fabric domain on it for its duration, which drives
// the device and leaves it open; the raw baselines (xdp, udp) use the
// device itself, bypassing the transport. One test runs at a time, so a
// domain and a baseline never share the device.
type Device struct {
	dev *device.Device
}

// OnDevice is the device d, open.
func OnDevice(d *device.Device) *Device { return &Device{dev: d} }

// Name is the device's name (its interface).
func (dv *Device) Name() string { return dv.dev.Name() }

// fab is one test's fabric: a domain whose MSG endpoints carry the
// address local (where the out-of-band exchange runs) as their GID.
type fab struct {
	f    *fabric.Fabric
	dom  *fabric.Domain
	info fabric.Info
}

// cqSize is the size of a CQ that neps endpoints share: room for every
// operation they may have outstanding.
func (fb *fab) cqSize(neps int) int {
	return max(1, neps) * (pow2(fb.info.TX.Size) + pow2(fb.info.RX.Size))
}

func pow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// open opens a domain for a test whose exchange runs from local (the
// device's first address if invalid), with endpoints of type t whose
// queues hold tx and rx operations.
func (dv *Device) open(ctx context.Context, local netip.Addr, t fabric.EPType, p fabric.Progress, tx, rx int) (*fab, error) {
	node := ""
	if local.IsValid() {
		node = local.String()
	}
	hints := &fabric.Hints{Provider: fabric.ProviderSoftfabric, EPType: t, Node: node,
		Domain: fabric.DomainAttr{Progress: p, Threading: fabric.ThreadDomain},
		TX:     fabric.TxAttr{Size: tx}, RX: fabric.RxAttr{Size: rx}}
	if p == fabric.ProgressAuto {
		hints.Domain.Threading = fabric.ThreadSafe
	}
	infos, err := fabric.DeviceInfo(ctx, dv.dev, hints)
	if err != nil {
		return nil, fmt.Errorf("opening %s for %v: %w", dv.Name(), local, err)
	}
	fb := &fab{info: infos[0]}
	if fb.f, err = fabric.OpenFabric(&fb.info); err != nil {
		return nil, err
	}
	if fb.dom, err = fb.f.Domain(&fb.info); err != nil {
		_ = fb.f.Close()
		return nil, err
	}
	return fb, nil
}

// close closes the domain; the test's objects on it are closed already.
func (fb *fab) close() {
	_ = fb.dom.Close()
	_ = fb.f.Close()
}

// workerDeltas is what each worker's counters grew by.
func workerDeltas(before, after []fabric.WorkerStats) []WorkerStats {
	out := make([]WorkerStats, len(after))
	for w, a := range after {
		var b fabric.WorkerStats
		if w < len(before) {
			b = before[w]
		}
		out[w] = WorkerStats{Worker: w, RxFrames: a.RxFrames - b.RxFrames, TxFrames: a.TxFrames - b.TxFrames,
			HandedOff: a.HandedOff - b.HandedOff, HandedIn: a.HandedIn - b.HandedIn, HandoffDrops: a.HandoffDrops - b.HandoffDrops}
	}
	return out
}

// gid is the GID the domain's endpoints carry: that of the address the
// exchange runs from.
func (fb *fab) gid() (netip.Addr, error) {
	ep, err := fb.dom.Endpoint(&fb.info)
	if err != nil {
		return netip.Addr{}, err
	}
	defer ep.Close()
	g := ep.QPInfo().GID
	if !g.IsValid() || g.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("no GID for %v on %s", fb.info.Src, fb.dom.Name())
	}
	return g, nil
}

// drainUntil drives the domain (manual progress) until t.
func (fb *fab) drainUntil(t time.Time) {
	for time.Now().Before(t) {
		fb.dom.Progress()
	}
}

// activeMTU is the largest path MTU the device's link carries.
func (dv *Device) activeMTU() (int, error) { return dv.dev.ActiveMTU(), nil }

// ipv4 is the device's first IPv4 address (as rdma_cm peers reach it:
// perftest's RDMA-CM mode is IPv4 only), invalid if it has none.
func (dv *Device) ipv4() netip.Addr {
	for _, g := range dv.dev.GIDs() {
		if g.Is4In6() || g.Is4() {
			return g.Unmap()
		}
	}
	return netip.Addr{}
}
