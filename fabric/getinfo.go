package fabric

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/hfilink"
)

// Providers.
const (
	// ProviderSoftfabric serves the devices that `softfabric up`
	// prepared, over their AF_XDP sockets.
	ProviderSoftfabric = "softfabric"
	// ProviderMem serves in-process devices on an in-memory switch: the
	// domains of one program (or one test) talk without a NIC. Each is
	// named by its address (Hints.Node), from 198.18.0.0/15 by
	// convention.
	ProviderMem = "mem"
)

const (
	maxQueueSize = 4096
	memPrefix    = "mem:"
)

// GetInfo returns the offers that match hints (nil: anything), best
// first: one per device and endpoint type. It fails with ErrNoData
// (wrapped, saying why) when nothing matches: a capability, size or mode
// the provider does not have, an interface that is not up, an address no
// device has.
func GetInfo(ctx context.Context, hints *Hints) ([]Info, error) {
	var h Hints
	if hints != nil {
		h = *hints
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	devs, err := candidates(&h)
	if err != nil {
		return nil, err
	}
	types := []EPType{EPMsg, EPRDM, EPDgram}
	if h.EPType != EPUnspec {
		if h.EPType > EPRDM {
			return nil, fmt.Errorf("%w: endpoint type %d", ErrNoData, h.EPType)
		}
		types = []EPType{h.EPType}
	}
	var out []Info
	var why string
	for _, d := range devs {
		for _, t := range types {
			info, reason := offer(d, t, &h)
			if reason != "" {
				why = reason
				continue
			}
			out = append(out, info)
		}
	}
	if len(out) == 0 {
		if why == "" {
			why = "no device"
		}
		return nil, fmt.Errorf("%w: %s", ErrNoData, why)
	}
	return out, nil
}

// devInfo is a device GetInfo may offer.
type devInfo struct {
	provider string
	name     string
	addr     netip.Addr
	mtu      int
	queues   int
	// attached: a daemon serves the device, and shares memory from
	// AllocMemory (MRShared).
	attached bool
}

func candidates(h *Hints) ([]devInfo, error) {
	var node netip.Addr
	if h.Node != "" {
		a, err := netip.ParseAddr(h.Node)
		if err != nil {
			return nil, fmt.Errorf("%w: node %q is not an IP address", ErrNoData, h.Node)
		}
		node = a.Unmap()
	}
	switch h.Provider {
	case ProviderMem:
		if !node.IsValid() {
			if a, ok := strings.CutPrefix(h.Domain.Name, memPrefix); ok {
				node, _ = netip.ParseAddr(a)
			}
		}
		if !node.IsValid() {
			return nil, fmt.Errorf("%w: the mem provider needs Hints.Node (the device's address)", ErrNoData)
		}
		name := memPrefix + node.String()
		if h.Domain.Name != "" && h.Domain.Name != name {
			return nil, fmt.Errorf("%w: domain %q is not %s", ErrNoData, h.Domain.Name, name)
		}
		return []devInfo{{provider: ProviderMem, name: name, addr: node, mtu: memMTU, queues: 1}}, nil
	case "", ProviderSoftfabric:
	default:
		return nil, fmt.Errorf("%w: provider %q (have %s, %s)", ErrNoData, h.Provider, ProviderSoftfabric, ProviderMem)
	}
	hfis, err := hfiCandidates(h, node)
	if err != nil || len(hfis) > 0 && h.Domain.Name != "" {
		return hfis, err
	}
	ns, err := ctrl.NetNSID()
	if err != nil {
		return nil, err
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	out := hfis
	for _, ifc := range ifs {
		if h.Domain.Name != "" && h.Domain.Name != ifc.Name {
			continue
		}
		st, err := ctrl.LoadState(ctrl.RunDir(ns, ifc.Name))
		if err != nil {
			continue
		}
		addrs, _ := ifc.Addrs()
		var mine []netip.Addr
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				mine = append(mine, p.Addr().Unmap())
			}
		}
		d := devInfo{provider: ProviderSoftfabric, name: ifc.Name, mtu: ifc.MTU, queues: max(st.Queues, 1), attached: device.Served(ifc.Name)}
		if st.QueueLimit > 0 {
			d.queues = min(d.queues, st.QueueLimit)
		}
		for _, a := range mine {
			if node.IsValid() && a == node || !node.IsValid() && a.Is4() {
				d.addr = a
				break
			}
		}
		if node.IsValid() && !d.addr.IsValid() {
			continue
		}
		if !d.addr.IsValid() && len(mine) > 0 {
			d.addr = mine[0]
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		switch {
		case h.Domain.Name != "":
			return nil, fmt.Errorf("%w: softfabric is not up on %q (run 'softfabric up %s')", ErrNoData, h.Domain.Name, h.Domain.Name)
		case node.IsValid():
			return nil, fmt.Errorf("%w: no softfabric device has address %s", ErrNoData, node)
		}
		return nil, fmt.Errorf("%w: no softfabric device is up in this network namespace", ErrNoData)
	}
	return out, nil
}

// offer builds the Info of endpoint type t on d, or says why h rules it out.
func offer(d devInfo, t EPType, h *Hints) (Info, string) {
	caps := map[EPType]Caps{EPMsg: capsMsg, EPDgram: capsDgram, EPRDM: capsRDM}[t]
	if h.Caps&^caps != 0 {
		return Info{}, fmt.Sprintf("%v endpoints lack %v", t, h.Caps&^caps)
	}
	want := h.Caps
	if want == 0 {
		want = caps
	}
	// A primary capability without modifiers means both directions.
	if want&(CapSend|CapRecv) == 0 {
		want |= CapSend | CapRecv
	}
	if want&(CapRMA|CapAtomic) != 0 && want&(CapRead|CapWrite|CapRemoteRead|CapRemoteWrite) == 0 {
		want |= CapRead | CapWrite | CapRemoteRead | CapRemoteWrite
	}
	want &= caps
	pathMTU := activeMTU(d.mtu)
	info := Info{
		Caps:     want,
		Provider: d.provider,
		Domain: DomainAttr{Name: d.name, Threading: ThreadSafe, Progress: ProgressAuto,
			MRMode: MRLocal | MRVirtAddr | MRProvKey, MRKeySize: 4, CQDataSize: CQDataSize, Queues: d.queues},
		EP: EPAttr{Type: t, MaxMsgSize: MaxMsgSize, TagBits: 64,
			MaxOrderRAW: MaxMsgSize, MaxOrderWAR: MaxMsgSize, MaxOrderWAW: MaxMsgSize},
		TX:      TxAttr{Caps: want, Order: orderAll, Flags: FlagDeliveryComplete, InjectSize: InjectSize, Size: DefaultSize, IOVLimit: MaxIOV},
		RX:      RxAttr{Caps: want, Order: orderAll, Size: DefaultSize, IOVLimit: MaxIOV},
		Src:     d.addr,
		Service: h.Service,
	}
	if d.attached {
		info.Domain.MRMode |= MRShared
	}
	switch t {
	case EPDgram:
		info.EP.MaxMsgSize = pathMTU
		info.EP.MaxOrderRAW, info.EP.MaxOrderWAR, info.EP.MaxOrderWAW = 0, 0, 0
		info.TX.Order, info.RX.Order = 0, 0
		info.TX.Flags = FlagTransmitComplete
		info.RX.IOVLimit = MaxIOV - 1 // one scatter entry takes the GRH
	case EPRDM:
		info.EP.MaxMsgSize = RDMEagerSize
		info.TX.IOVLimit, info.RX.IOVLimit = 1, 1
		// A send completes when the target has it (in a provider
		// buffer); DELIVERY_COMPLETE, on request, when it is matched.
		info.TX.Flags = FlagTransmitComplete
	}
	if h.Domain.Threading != ThreadUnspec {
		if h.Domain.Threading > ThreadDomain {
			return Info{}, fmt.Sprintf("threading %d", h.Domain.Threading)
		}
		info.Domain.Threading = h.Domain.Threading
	}
	if h.Domain.Progress != ProgressUnspec {
		if h.Domain.Progress > ProgressManual {
			return Info{}, fmt.Sprintf("progress %d", h.Domain.Progress)
		}
		info.Domain.Progress = h.Domain.Progress
	}
	if h.Domain.MRMode != 0 && h.Domain.MRMode&MRLocal == 0 {
		return Info{}, "the provider needs MRLocal (local buffers are registered)"
	}
	if h.Domain.Queues > 0 {
		if h.Domain.Queues > d.queues {
			return Info{}, fmt.Sprintf("%s serves %d queues, %d asked", d.name, d.queues, h.Domain.Queues)
		}
		info.Domain.Queues = h.Domain.Queues
	}
	if h.TX.Order&^info.TX.Order != 0 || h.RX.Order&^info.RX.Order != 0 {
		return Info{}, fmt.Sprintf("%v endpoints do not keep that order", t)
	}
	switch {
	case h.TX.InjectSize > InjectSize:
		return Info{}, fmt.Sprintf("inject size %d > %d", h.TX.InjectSize, InjectSize)
	case h.TX.Size > maxQueueSize || h.RX.Size > maxQueueSize:
		return Info{}, fmt.Sprintf("queue size above %d", maxQueueSize)
	case h.TX.IOVLimit > info.TX.IOVLimit || h.RX.IOVLimit > info.RX.IOVLimit:
		return Info{}, "iov limit too large"
	case h.TX.Flags&FlagDeliveryComplete != 0 && t == EPDgram:
		return Info{}, "datagrams are not delivery-complete"
	}
	if h.TX.Size > 0 {
		info.TX.Size = h.TX.Size
	}
	if h.RX.Size > 0 {
		info.RX.Size = h.RX.Size
	}
	if h.TX.Flags&(FlagTransmitComplete|FlagDeliveryComplete) != 0 {
		info.TX.Flags = h.TX.Flags & (FlagTransmitComplete | FlagDeliveryComplete)
	}
	return info, ""
}

// hfiCandidates are the HFI units (hfi1_N, hfidev/hfidevice) GetInfo may
// offer: the one Domain.Name names (an error saying why when it is not
// usable), or every usable unit, whose address is node if node is valid.
// A unit serves as many queues as its own peers-file line lists receive
// contexts, no more and no fewer (Domain.Queues, if set, must be that),
// and only while that many of its user contexts are free
// (hfidevice.Host.Queues).
func hfiCandidates(h *Hints, node netip.Addr) ([]devInfo, error) {
	host := hfidevice.DefaultHost
	var units []hfidevice.Unit
	_, byName := hfidevice.UnitNumber(h.Domain.Name)
	if byName {
		u, err := host.Unit(h.Domain.Name, "")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoData, err)
		}
		units = append(units, u)
	} else if h.Domain.Name == "" {
		// Units that are not usable are not offered; opening one by
		// name says why.
		units, _ = host.Usable()
	}
	var out []devInfo
	for _, u := range units {
		addr := u.Self.GID.Unmap()
		if node.IsValid() && addr != node {
			continue
		}
		queues, err := host.Queues(u, h.Domain.Queues)
		if err != nil && byName {
			return nil, fmt.Errorf("%w: %w", ErrNoData, err)
		}
		if err != nil {
			continue
		}
		out = append(out, devInfo{provider: ProviderSoftfabric, name: u.Name, addr: addr, mtu: hfilink.DefaultMTU, queues: queues})
	}
	if len(out) == 0 && len(units) == 1 && h.Domain.Name != "" {
		return nil, fmt.Errorf("%w: %s goes by %v, not %v", ErrNoData, h.Domain.Name, units[0].Self.GID.Unmap(), node)
	}
	return out, nil
}
