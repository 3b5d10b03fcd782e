package ctrl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

var (
	// ErrNoRoute is matched by Resolve's error when the kernel has no
	// route to the destination.
	ErrNoRoute = errors.New("no route")
	// ErrUnresolved is matched by Resolve's error when the next hop does
	// not answer ARP or neighbour solicitations in time.
	ErrUnresolved = errors.New("neighbour unresolved")
	// ErrLocal is matched by Resolve's error when the destination is an
	// address of this host: the kernel routes it through lo, not a NIC.
	ErrLocal = errors.New("local address")
)

// ResolveTimeout bounds Resolve when its context has no deadline. The
// kernel gives up on its own after mcast_solicit (3) probes a
// retrans_time (1 s) apart.
const ResolveTimeout = 5 * time.Second

// Nexthop is where a packet to a destination goes on the wire.
type Nexthop struct {
	Ifindex int        // outgoing interface
	Src     netip.Addr // source address the kernel would choose
	Via     netip.Addr // the gateway, or the destination itself when on-link
	// MAC of Via; nil on an interface without link-layer addresses (tun).
	MAC net.HardwareAddr
}

type resolveError struct {
	msg  string
	kind error
}

func (e *resolveError) Error() string        { return e.msg }
func (e *resolveError) Is(target error) bool { return target == e.kind }

// Resolve finds the next hop to dst through the kernel's tables, in the
// calling thread's network namespace: a route lookup (ip route get) gives
// the interface, the source address and the gateway; then the neighbour
// entry of the gateway (or of dst when on-link) gives the MAC. When the
// entry is missing or not valid, Resolve asks the kernel to resolve it, as
// a first packet would, and polls the entry until it is usable, the kernel
// gives up, or ctx ends (after ResolveTimeout when ctx has no deadline).
// An IPv4-mapped dst (a GID) is resolved as IPv4; a link-local IPv6 dst
// needs its zone (fe80::1%eth0). Via never carries a zone.
func Resolve(ctx context.Context, dst netip.Addr) (Nexthop, error) {
	dst = dst.Unmap()
	if !dst.IsValid() {
		return Nexthop{}, errors.New("resolve: invalid address")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ResolveTimeout)
		defer cancel()
	}
	// Netlink sockets, the UDP fallback and the caller's namespace must
	// all be on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	nh, err := route(dst)
	if err != nil {
		return Nexthop{}, err
	}
	link, err := netlink.LinkByIndex(nh.Ifindex)
	if err != nil {
		return Nexthop{}, fmt.Errorf("route to %s: interface %d: %w", dst, nh.Ifindex, err)
	}
	if !nh.Src.IsValid() {
		if nh.Src, err = pickSrc(link, dst); err != nil {
			return Nexthop{}, err
		}
	}
	a := link.Attrs()
	if len(a.HardwareAddr) == 0 || a.RawFlags&unix.IFF_NOARP != 0 {
		return nh, nil
	}
	nh.MAC, err = neighbour(ctx, link, nh)
	if err != nil {
		return Nexthop{}, err
	}
	return nh, nil
}

func route(dst netip.Addr) (Nexthop, error) {
	var opts *netlink.RouteGetOptions
	if z := dst.Zone(); z != "" {
		// A link-local destination (a peer's default GID) names its
		// interface, by name or index, as in fe80::1%eth0.
		l, err := zoneLink(z)
		if err != nil {
			return Nexthop{}, fmt.Errorf("route to %s: %w", dst, err)
		}
		opts = &netlink.RouteGetOptions{OifIndex: l.Attrs().Index}
	}
	routes, err := netlink.RouteGetWithOptions(dst.WithZone("").AsSlice(), opts)
	if err != nil || len(routes) == 0 {
		var errno unix.Errno
		if err == nil || errors.As(err, &errno) && (errno == unix.ENETUNREACH ||
			errno == unix.EHOSTUNREACH || errno == unix.EACCES || errno == unix.EINVAL) {
			// EHOSTUNREACH, EACCES and EINVAL are unreachable, prohibit
			// and blackhole routes.
			return Nexthop{}, &resolveError{fmt.Sprintf("no route to %s", dst), ErrNoRoute}
		}
		return Nexthop{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	r := routes[0]
	if r.Type == unix.RTN_LOCAL {
		return Nexthop{}, &resolveError{fmt.Sprintf("%s is a local address", dst), ErrLocal}
	}
	nh := Nexthop{Ifindex: r.LinkIndex, Via: dst.WithZone("")}
	if src, ok := netip.AddrFromSlice(r.Src); ok {
		nh.Src = src.Unmap()
	}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		nh.Via = gw.Unmap()
	} else if v, ok := r.Via.(*netlink.Via); ok {
		// RTA_VIA: an IPv6 gateway for an IPv4 route.
		if gw, ok := netip.AddrFromSlice(v.Addr); ok {
			nh.Via = gw.Unmap()
		}
	}
	return nh, nil
}

func zoneLink(zone string) (netlink.Link, error) {
	if i, err := strconv.Atoi(zone); err == nil {
		l, err := netlink.LinkByIndex(i)
		if err != nil {
			return nil, fmt.Errorf("interface %d: %w", i, err)
		}
		return l, nil
	}
	return linkByName(zone)
}

// pickSrc stands in for a route without a preferred source: the first
// address of dst's family on the interface, global before link-local.
func pickSrc(link netlink.Link, dst netip.Addr) (netip.Addr, error) {
	list, err := addrs(link)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route to %s: %w", dst, err)
	}
	var ll netip.Addr
	for _, p := range list {
		a := p.Addr()
		switch {
		case a.Is4() != dst.Is4():
		case a.IsLinkLocalUnicast():
			if !ll.IsValid() {
				ll = a
			}
		default:
			return a, nil
		}
	}
	if ll.IsValid() {
		return ll, nil
	}
	return netip.Addr{}, fmt.Errorf("route to %s: no source address on %s", dst, link.Attrs().Name)
}

// neighbour returns the MAC of nh.Via from the neighbour table, asking the
// kernel to resolve it when needed.
func neighbour(ctx context.Context, link netlink.Link, nh Nexthop) (net.HardwareAddr, error) {
	// Poll fast first (a LAN answers in well under a millisecond), then
	// back off.
	wait := time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	triggered := false
	for {
		n, err := getNeigh(nh.Ifindex, nh.Via)
		if err != nil {
			return nil, err
		}
		switch {
		case n != nil && n.State&validNUD != 0 && len(n.HardwareAddr) > 0:
			return n.HardwareAddr, nil
		case !triggered || n == nil:
			// Not asked yet, or the entry went away (garbage collected)
			// before it resolved.
			if err := solicit(link, nh); err != nil {
				return nil, err
			}
			triggered = true
		case n.State&unix.NUD_FAILED != 0:
			// The solicitation we triggered has set the entry INCOMPLETE
			// synchronously, so FAILED now means the kernel gave up.
			return nil, unresolved(nh.Via)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, unresolved(nh.Via)
			}
			return nil, fmt.Errorf("resolving %s: %w", nh.Via, ctx.Err())
		case <-t.C:
			wait = min(2*wait, 50*time.Millisecond)
			t.Reset(wait)
		}
	}
}

// validNUD is NUD_VALID of include/net/neighbour.h: states with a usable
// link-layer address.
const validNUD = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE |
	unix.NUD_PROBE | unix.NUD_STALE | unix.NUD_DELAY

func unresolved(a netip.Addr) error {
	what := "no ARP reply"
	if a.Is6() {
		what = "no neighbour advertisement"
	}
	return &resolveError{fmt.Sprintf("%s: neighbour unresolved (%s)", a, what), ErrUnresolved}
}

// getNeigh reads one neighbour entry (RTM_GETNEIGH with NDA_DST, as
// `ip neigh get`); nil when there is none.
func getNeigh(ifindex int, ip netip.Addr) (*netlink.Neigh, error) {
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
	req.AddData(&netlink.Ndmsg{Family: uint8(family), Index: uint32(ifindex)})
	req.AddData(nl.NewRtAttr(netlink.NDA_DST, ip.AsSlice()))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading neighbour %s: %w", ip, err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	return netlink.NeighDeserialize(msgs[0])
}

// solicit makes the kernel resolve nh.Via as a first packet to it would:
// a neighbour "use" (RTM_NEWNEIGH with NTF_USE and NLM_F_CREATE, which
// creates the entry and sends the first solicitation); where that is
// refused (no CAP_NET_ADMIN), one UDP datagram to the discard port from the
// source address.
//
// For IPv6 the datagram goes first while the interface has no link-local
// address past DAD: a solicitation without a packet behind it must come
// from such an address (ndisc_send_ns), so the kernel would stay silent
// until DAD ends, a second or two on a fresh interface; the datagram's
// own source address serves instead.
func solicit(link netlink.Link, nh Nexthop) error {
	if nh.Via.Is6() && !linkLocalReady(link) && poke(link, nh) == nil {
		return nil
	}
	err := neighUse(nh.Ifindex, nh.Via)
	if err == nil {
		return nil
	}
	if perr := poke(link, nh); perr != nil {
		return fmt.Errorf("resolving %s: %w (and sending to it: %v)", nh.Via, err, perr)
	}
	return nil
}

// poke sends one byte to the discard port of nh.Via from nh.Src.
func poke(link netlink.Link, nh Nexthop) error {
	zone := func(a netip.Addr) string {
		if a.Is6() && a.IsLinkLocalUnicast() {
			return link.Attrs().Name
		}
		return ""
	}
	c, err := net.DialUDP("udp",
		&net.UDPAddr{IP: nh.Src.AsSlice(), Zone: zone(nh.Src)},
		&net.UDPAddr{IP: nh.Via.AsSlice(), Port: 9, Zone: zone(nh.Via)})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte{0})
	return err
}

// linkLocalReady reports whether the interface has an IPv6 link-local
// address that is neither tentative nor optimistic nor failed DAD.
func linkLocalReady(link netlink.Link) bool {
	list, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return false
	}
	for _, a := range list {
		if a.IP.IsLinkLocalUnicast() &&
			a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_OPTIMISTIC|unix.IFA_F_DADFAILED) == 0 {
			return true
		}
	}
	return false
}

// neighUse is a variable for tests of the fallback.
var neighUse = neighUseNetlink

func neighUseNetlink(ifindex int, ip netip.Addr) error {
	return netlink.NeighSet(&netlink.Neigh{
		LinkIndex: ifindex,
		IP:        ip.AsSlice(),
		State:     netlink.NUD_NONE,
		Flags:     netlink.NTF_USE,
	})
}
