// Package hfidevice opens softfabric devices (package device) whose
// workers drive HFI contexts through hfidev/hfilink, so that the fabric
// API, the RC and UD transport and the tools above them run over
// Omni-Path and CN5000 HFIs as they run over Ethernet. New builds a
// device over links already made; NewModelLinks and NewModelPair make two
// modeled units (hfidev/model) joined back to back, with their links or
// with a device on each, for tests, benchmarks and `softfabric perf
// --hfi-model`. Host.Open opens a host's unit by name (hfi1_N: its
// /dev node, port 1's sysfs, a peers file), registered with
// device.OpenAny; NewModelHost is a fake host whose units the model
// serves. Only the model has ever run this code: see docs/hfidev.md.
package hfidevice

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/hfidev/hfilink"
)

// ErrNoRoute: a destination GID that no port of the link table has.
var ErrNoRoute = errors.New("hfidevice: no LID for GID")

// Options describe a device over HFI links.
type Options struct {
	Name string
	// Self is this port (LID, GID); Peers the ports it reaches: the
	// links' table, which the device's resolver answers from.
	Self  hfilink.Node
	Peers []hfilink.Node
	Pace  engine.Backoff
	CPUs  []int
}

// New returns a device with one worker per link, links[i] serving worker
// i. The device owns the links: Close closes them and their contexts.
func New(links []*hfilink.Link, o Options) (*device.Device, error) {
	if len(links) == 0 {
		return nil, fmt.Errorf("%w: no links", hfilink.ErrConfig)
	}
	ls := make([]link.Link, len(links))
	for i, l := range links {
		ls[i] = l
	}
	self, peers := o.Self.GID, o.Peers
	resolve := func(_ context.Context, dst netip.Addr) (netip.Addr, [6]byte, error) {
		for _, p := range peers {
			if p.GID.Unmap() == dst.Unmap() {
				src := self
				if dst.Is4() {
					src = self.Unmap()
				}
				return src, hfilink.MAC(p.LID), nil
			}
		}
		return netip.Addr{}, [6]byte{}, fmt.Errorf("%w %v", ErrNoRoute, dst)
	}
	d := device.NewWorkers(ls, device.Options{Name: o.Name, MAC: hfilink.MAC(o.Self.LID),
		GIDs: []netip.Addr{netip.AddrFrom16(self.As16())}, MTU: links[0].MaxFrame() - wire.EthernetSize,
		Resolve: resolve, Pace: o.Pace, CPUs: o.CPUs,
		// The peers' links send QPN q to context q % n, which is worker
		// q % n's here: a queue pair's frames reach the worker owning it.
		QPNWorker: func(q uint32) int { return int(q % uint32(len(links))) }})
	for _, l := range links {
		d.OnClose(l.Close)
	}
	return d, nil
}
