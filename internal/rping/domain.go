package rping

import (
	"context"
	"net/netip"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/msgdomain"
)

// domain is a run's fabric and domain on its device.
type domain = msgdomain.Domain

// openDomain opens the device of cfg whose address is local (invalid or
// unspecified: the device's own) for MSG endpoints with rping's queue
// depths.
func openDomain(ctx context.Context, cfg Config, local netip.Addr) (*domain, error) {
	return msgdomain.Open(ctx, msgdomain.Options{Provider: cfg.Provider, Iface: cfg.Iface, Port: cfg.Port, Local: local,
		Caps: fabric.CapRMA, TX: sqDepth, RX: rqDepth})
}
