package ctrl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ErrNoDevice is matched (errors.Is) by the error of a lookup of an
// interface that does not exist in the current network namespace.
var ErrNoDevice = errors.New("no such interface")

// Device holds the facts about one network interface that the control plane
// needs.
type Device struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	MTU   int
	Up    bool // administratively up (IFF_UP)
	// MaxRxQueues and MaxTxQueues are the queues the driver allocated
	// (IFLA_NUM_RX_QUEUES, IFLA_NUM_TX_QUEUES), more than it may use: a
	// default veth allocates one per possible CPU and uses one.
	MaxRxQueues int
	MaxTxQueues int
	// Queues is how many queues, from 0, it uses for both receive and
	// transmit (real_num_rx_queues and real_num_tx_queues, `ethtool -l`):
	// the queues an AF_XDP socket with rx and tx rings can bind.
	Queues int
	// QueueSource says where Queues came from: QueuesFromEthtool,
	// QueuesFromSysfs or QueuesFromDefault.
	QueueSource string
	// Channels are the driver's channels; nil when it reports none.
	Channels *Channels
	// Addrs are the global and link-local addresses, IPv4 and IPv6, in the
	// kernel's netlink dump order (IPv4 first).
	Addrs     []netip.Prefix
	NetNS     uint64 // inode of the network namespace, as NetNSID
	XDPProgID uint32 // 0 when no XDP program is attached
	// XDPMode is "native", "generic", "offload" or "" for none. With
	// programs in several modes at once, the first of native, generic,
	// offload is reported, with its program id.
	XDPMode string
	// Kind is the link type (IFLA_INFO_KIND): "veth", "tun", "bridge",
	// ...; "" for a physical NIC, which has none.
	Kind string
}

type noDeviceError struct{ name string }

func (e *noDeviceError) Error() string        { return fmt.Sprintf("interface %q not found", e.name) }
func (e *noDeviceError) Is(target error) bool { return target == ErrNoDevice }

// validName follows the kernel's dev_valid_name, with the longer limit of
// alternative names, so that a bad name never reaches netlink (where
// EINVAL would switch vishvananda/netlink to dumping all links for good).
func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) >= 128 ||
		strings.ContainsAny(name, "/: \t\n\v\f\r\x00") {
		return fmt.Errorf("invalid interface name %q", name)
	}
	return nil
}

func linkByName(name string) (netlink.Link, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil, &noDeviceError{name}
		}
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	return l, nil
}

// LookupDevice reads the facts about the interface name in the calling
// thread's network namespace.
func LookupDevice(name string) (*Device, error) {
	// Keep the netlink sockets and the namespace inode on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	l, err := linkByName(name)
	if err != nil {
		return nil, err
	}
	a := l.Attrs()
	d := &Device{
		Name:        a.Name,
		Index:       a.Index,
		MAC:         a.HardwareAddr,
		MTU:         a.MTU,
		Up:          a.Flags&net.FlagUp != 0,
		MaxRxQueues: a.NumRxQueues,
		MaxTxQueues: a.NumTxQueues,
		Kind:        kind(l),
	}
	if d.NetNS, err = NetNSID(); err != nil {
		return nil, err
	}
	if err := readQueues(d); err != nil {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	if a.Xdp != nil && a.Xdp.Attached {
		d.XDPProgID, d.XDPMode = a.Xdp.ProgId, xdpModes[a.Xdp.AttachMode]
		if a.Xdp.AttachMode == xdpAttachedMulti {
			if d.XDPProgID, d.XDPMode, err = xdpMulti(a.Index); err != nil {
				return nil, fmt.Errorf("interface %q: reading XDP: %w", name, err)
			}
		}
	}
	if d.Addrs, err = addrs(l); err != nil {
		return nil, fmt.Errorf("interface %q: listing addresses: %w", name, err)
	}
	return d, nil
}

// xdpAttachedMulti is XDP_ATTACHED_MULTI of linux/if_link.h, which
// vishvananda/netlink does not define.
const xdpAttachedMulti = 4

var xdpModes = map[uint32]string{
	nl.XDP_ATTACHED_DRV: "native",
	nl.XDP_ATTACHED_SKB: "generic",
	nl.XDP_ATTACHED_HW:  "offload",
}

// xdpMulti reads the per-mode program ids that the kernel reports instead
// of IFLA_XDP_PROG_ID when programs are attached in several modes, and
// which vishvananda/netlink does not parse.
func xdpMulti(index int) (uint32, string, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return 0, "", err
	}
	if len(msgs) != 1 {
		return 0, "", errors.New("unexpected netlink reply")
	}
	return xdpFromLinkMsg(msgs[0])
}

// xdpFromLinkMsg picks the program of IFLA_XDP's per-mode ids in an
// RTM_NEWLINK message body: native first, then generic, then offload.
func xdpFromLinkMsg(m []byte) (uint32, string, error) {
	if len(m) < unix.SizeofIfInfomsg {
		return 0, "", errors.New("short netlink reply")
	}
	attrs, err := nl.ParseRouteAttr(m[unix.SizeofIfInfomsg:])
	if err != nil {
		return 0, "", err
	}
	ids := map[uint16]uint32{}
	for _, at := range attrs {
		if at.Attr.Type&^unix.NLA_F_NESTED != unix.IFLA_XDP {
			continue
		}
		nested, err := nl.ParseRouteAttr(at.Value)
		if err != nil {
			return 0, "", err
		}
		for _, n := range nested {
			if len(n.Value) >= 4 {
				ids[n.Attr.Type] = nl.NativeEndian().Uint32(n.Value)
			}
		}
	}
	for _, m := range []struct {
		attr uint16
		name string
	}{{unix.IFLA_XDP_DRV_PROG_ID, "native"}, {unix.IFLA_XDP_SKB_PROG_ID, "generic"}, {unix.IFLA_XDP_HW_PROG_ID, "offload"}} {
		if id := ids[m.attr]; id != 0 {
			return id, m.name, nil
		}
	}
	return 0, "", nil
}

func kind(l netlink.Link) string {
	switch t := l.Type(); t {
	case "device": // vishvananda/netlink's name for a link without IFLA_INFO_KIND
		return ""
	case "tuntap": // the kernel's kind is "tun" for tun and tap
		return "tun"
	default:
		return t
	}
}

// addrs lists the interface's addresses of global and link scope in dump
// order, IPv4 before IPv6, retrying a dump interrupted by a concurrent
// change.
func addrs(l netlink.Link) ([]netip.Prefix, error) {
	var list []netlink.Addr
	var err error
	for range 5 {
		if list, err = netlink.AddrList(l, netlink.FAMILY_ALL); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	var v4, v6 []netip.Prefix
	for _, a := range list {
		if a.IPNet == nil || (a.Scope != unix.RT_SCOPE_UNIVERSE && a.Scope != unix.RT_SCOPE_LINK) {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		p := netip.PrefixFrom(ip.Unmap(), ones)
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	return append(v4, v6...), nil
}

// NetNSID returns the inode of the calling thread's network namespace
// (/proc/thread-self/ns/net). Two namespaces may both have an eth0; the
// inode tells them apart while both exist (the kernel may reuse it once a
// namespace is gone).
func NetNSID() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("reading network namespace: %w", err)
	}
	return st.Ino, nil
}

// SetMTU sets the MTU of the interface name.
func SetMTU(name string, mtu int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if mtu <= 0 {
		return fmt.Errorf("invalid MTU %d", mtu)
	}
	l, err := linkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("setting MTU of %s to %d: %w", name, mtu, err)
	}
	return nil
}
