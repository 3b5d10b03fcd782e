// Package msgdomain opens a domain for connected (MSG) endpoints, or
// datagram ones, on the device softfabric serves, picked as librdmacm's
// example tools pick theirs: by the local address, by interface, or the
// only device up. The RDMA-CM tools (internal/rping, internal/ucmatose)
// share it.
package msgdomain

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/softfabric/softfabric/fabric"
)

// Options select the device and size the endpoints' queues.
type Options struct {
	Provider string        // "" for softfabric's devices; fabric.ProviderMem in tests
	Iface    string        // the device's interface; "" to find it by Local
	Port     uint16        // the service passive endpoints listen on
	Local    netip.Addr    // the device's address (invalid or unspecified: any)
	Type     fabric.EPType // the endpoints' type: EPMsg when unspecified, or EPDgram
	Caps     fabric.Caps   // besides CapMsg
	TX, RX   int           // queue depths
}

// Domain is an open fabric and domain, and the offer endpoints come from.
type Domain struct {
	Fab  *fabric.Fabric
	Dom  *fabric.Domain
	Info fabric.Info
}

// Open opens the domain o names. More than one device up, with none
// chosen, is an error that says to choose one with --iface.
func Open(ctx context.Context, o Options) (*Domain, error) {
	if o.Type == fabric.EPUnspec {
		o.Type = fabric.EPMsg
	}
	hints := &fabric.Hints{
		Provider: o.Provider,
		EPType:   o.Type,
		Caps:     fabric.CapMsg | o.Caps,
		Service:  o.Port,
		Domain:   fabric.DomainAttr{Name: o.Iface},
		TX:       fabric.TxAttr{Size: o.TX},
		RX:       fabric.RxAttr{Size: o.RX},
	}
	if o.Local.IsValid() && !o.Local.IsUnspecified() {
		hints.Node = o.Local.String()
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
	d := &Domain{Info: infos[0]}
	if d.Fab, err = fabric.OpenFabric(&d.Info); err != nil {
		return nil, fmt.Errorf("opening %s: %w", d.Info.Domain.Name, err)
	}
	if d.Dom, err = d.Fab.Domain(&d.Info); err != nil {
		_ = d.Fab.Close()
		return nil, fmt.Errorf("opening %s: %w", d.Info.Domain.Name, err)
	}
	return d, nil
}

// Listen opens an event queue of eqSize and a passive endpoint for the
// domain's offer bound to it, and listens on the offer's service, as
// rdma_bind_addr and rdma_listen do; bound, if not nil, runs between the
// bind and the listen. On failure it leaves nothing open.
func (d *Domain) Listen(eqSize int, bound func()) (*fabric.EQ, *fabric.PassiveEndpoint, error) {
	eq, err := d.Fab.EQ(eqSize)
	if err != nil {
		return nil, nil, err
	}
	pep, err := d.Fab.PassiveEndpoint(&d.Info)
	if err == nil {
		if err = pep.Bind(eq); err == nil {
			if bound != nil {
				bound()
			}
			if err = pep.Listen(); err == nil {
				return eq, pep, nil
			}
		}
		_ = pep.Close()
	}
	_ = eq.Close()
	return nil, nil, err
}

// Close closes the domain and the fabric; the objects opened on them are
// closed already.
func (d *Domain) Close() {
	_ = d.Dom.Close()
	_ = d.Fab.Close()
}
