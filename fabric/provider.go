package fabric

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memswitch"
	"github.com/softfabric/softfabric/device"
)

// memMTU is the link MTU of in-process devices: room for a 4096-byte path
// MTU with every RoCEv2 header.
const memMTU = 4200

func activeMTU(linkMTU int) int { return device.ActiveMTU(linkMTU) }

// memNet is the process's in-memory network: one switch, and where each
// in-process device's passive endpoints listen (their connection
// exchanges run over loopback TCP, see cmAddr).
var memNet struct {
	once      sync.Once
	sw        *memswitch.Switch
	mu        sync.Mutex
	listeners map[netip.AddrPort]netip.AddrPort
}

func memSwitch() *memswitch.Switch {
	memNet.once.Do(func() {
		memNet.sw = memswitch.New(memMTU + 18)
		memNet.listeners = map[netip.AddrPort]netip.AddrPort{}
	})
	return memNet.sw
}

// memMAC derives an in-process device's MAC from its address.
func memMAC(a netip.Addr) [6]byte {
	b := a.As16()
	return [6]byte{0x02, 0x5f, b[12], b[13], b[14], b[15]}
}

// openDevice opens the device an Info names.
func openDevice(info *Info) (*device.Device, error) {
	if a, ok := strings.CutPrefix(info.Domain.Name, memPrefix); ok {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("%w: domain %q", ErrInvalid, info.Domain.Name)
		}
		addr = addr.Unmap()
		port, err := memSwitch().Port(memMAC(addr), 4096)
		if errors.Is(err, memswitch.ErrAddressInUse) {
			return nil, fmt.Errorf("opening %s: %w (another domain has it)", info.Domain.Name, ErrBusy)
		}
		if err != nil {
			return nil, err
		}
		d := device.NewWorkers([]link.Link{port}, device.Options{
			Name: info.Domain.Name, MAC: memMAC(addr), GIDs: []netip.Addr{netip.AddrFrom16(addr.As16())}, MTU: memMTU,
			Resolve: func(_ context.Context, dst netip.Addr) (netip.Addr, [6]byte, error) {
				return addr, memMAC(dst.Unmap()), nil
			},
		})
		d.OnClose(port.Close)
		return d, nil
	}
	d, err := device.OpenAny(info.Domain.Name, device.OpenOptions{Queues: info.Domain.Queues, CPUs: info.Domain.CPUs})
	if errors.Is(err, ctrl.ErrBusy) || errors.Is(err, device.ErrBusy) {
		return nil, fmt.Errorf("opening %s: %w: %w", info.Domain.Name, ErrBusy, err)
	}
	return d, err
}
