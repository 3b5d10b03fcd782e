package fabric

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softfabric/softfabric/device"
)

// borrowed is a device the application opened itself (DeviceInfo): a
// domain on it drives it and leaves it open when it closes.
type borrowed struct{ dev *device.Device }

// DeviceInfo returns the offers of a device the caller has open already:
// an in-memory device in tests, or a device it also uses outside the
// fabric (one at a time). hints narrow them as GetInfo's do (Provider and
// Domain.Name are ignored; Node picks the device address that Src, and
// so the endpoints' GID, carry: the device's first GID when empty). A
// domain opened from one of them drives dev but does not own it: closing
// the domain leaves dev open for its owner.
func DeviceInfo(ctx context.Context, dev *device.Device, hints *Hints) ([]Info, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: no device", ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var h Hints
	if hints != nil {
		h = *hints
	}
	d := devInfo{provider: ProviderSoftfabric, name: dev.Name(), mtu: dev.MTU(), queues: dev.Workers(), attached: dev.Attached()}
	if h.Node != "" {
		a, err := netip.ParseAddr(h.Node)
		if err != nil {
			return nil, fmt.Errorf("%w: node %q is not an IP address", ErrNoData, h.Node)
		}
		if _, ok := dev.GID(a.Unmap()); !ok {
			return nil, fmt.Errorf("%w: %s has no GID for %v", ErrNoData, dev.Name(), a)
		}
		d.addr = a.Unmap()
	} else if gids := dev.GIDs(); len(gids) > 0 {
		d.addr = gids[0].Unmap()
	}
	types := []EPType{EPMsg, EPRDM, EPDgram}
	if h.EPType != EPUnspec {
		types = []EPType{h.EPType}
	}
	h.Domain.Name = ""
	var out []Info
	why := "no endpoint type"
	for _, t := range types {
		info, reason := offer(d, t, &h)
		if reason != "" {
			why = reason
			continue
		}
		info.own = &borrowed{dev: dev}
		out = append(out, info)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoData, why)
	}
	return out, nil
}

// device opens the device of info, or returns the one it borrows.
func (info *Info) device() (*device.Device, error) {
	if info.own != nil {
		return info.own.dev, nil
	}
	return openDevice(info)
}

// closeDevice closes the domain's device, or hands a borrowed one back
// to its owner (without the domain's hooks).
func (d *Domain) closeDevice() error {
	if d.info.own == nil {
		return d.dev.Close()
	}
	for i := range d.workers {
		d.dev.SetWaiting(i, nil)
	}
	return nil
}

// ActiveMTU is the largest path MTU the domain's link carries: what
// ConnectQP uses when QPOptions.PathMTU is 0, and a DGRAM endpoint's
// largest message.
func (d *Domain) ActiveMTU() int { return d.dev.ActiveMTU() }
