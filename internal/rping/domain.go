package rping

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/softfabric/softfabric/fabric"
)

// domain is the fabric and domain a run opens on its device, and the
// offer its endpoints come from.
type domain struct {
	fab  *fabric.Fabric
	dom  *fabric.Domain
	info fabric.Info
}

// openDomain opens the device of cfg whose address is local (invalid or
// unspecified: the device's own) for MSG endpoints with rping's queue
// depths.
func openDomain(ctx context.Context, cfg Config, local netip.Addr) (*domain, error) {
	hints := &fabric.Hints{
		Provider: cfg.Provider,
		EPType:   fabric.EPMsg,
		Caps:     fabric.CapMsg | fabric.CapRMA,
		Service:  cfg.Port,
		Domain:   fabric.DomainAttr{Name: cfg.Iface},
		TX:       fabric.TxAttr{Size: sqDepth},
		RX:       fabric.RxAttr{Size: rqDepth},
	}
	if local.IsValid() && !local.IsUnspecified() {
		hints.Node = local.String()
	}
	infos, err := fabric.GetInfo(ctx, hints)
	if err != nil {
		return nil, fmt.Errorf("finding the device: %w", err)
	}
	if len(infos) > 1 {
		names := make([]string, len(infos))
		for i, in := range infos {
			names[i] = in.Domain.Name
		}
		return nil, fmt.Errorf("softfabric is up on %s: choose one with --iface", strings.Join(names, ", "))
	}
	d := &domain{info: infos[0]}
	if d.fab, err = fabric.OpenFabric(&d.info); err != nil {
		return nil, fmt.Errorf("opening %s: %w", d.info.Domain.Name, err)
	}
	if d.dom, err = d.fab.Domain(&d.info); err != nil {
		_ = d.fab.Close()
		return nil, fmt.Errorf("opening %s: %w", d.info.Domain.Name, err)
	}
	return d, nil
}

// close closes the domain; the run's objects on it are closed already.
func (d *domain) close() {
	_ = d.dom.Close()
	_ = d.fab.Close()
}
