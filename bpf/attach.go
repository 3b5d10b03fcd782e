package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Mode is how the program is attached to an interface.
type Mode int

// Attach modes.
const (
	// ModeAuto tries native and falls back to generic when the driver has
	// no native XDP.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE).
	ModeNative
	// ModeGeneric runs it on the sk_buff path (XDP_FLAGS_SKB_MODE): works
	// on every interface, slower, and AF_XDP runs in copy mode on it.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Attach attaches the program to the interface with index ifindex (in the
// caller's network namespace) through a bpf_link and returns the mode it
// used. An interface that already has an XDP program, attached by anyone
// but this Classifier, gives an error wrapping ErrAlreadyAttached. When the
// Classifier is pinned, the link is pinned beside the maps.
func (c *Classifier) Attach(ifindex int, m Mode) (Mode, error) {
	if c.prog == nil {
		return 0, ErrNotLoaded
	}
	if c.link != nil {
		return 0, fmt.Errorf("bpf: classifier already attached")
	}
	if ifindex <= 0 {
		return 0, invalid("ifindex %d", ifindex)
	}
	var modes []Mode
	switch m {
	case ModeAuto:
		modes = []Mode{ModeNative, ModeGeneric}
	case ModeNative, ModeGeneric:
		modes = []Mode{m}
	default:
		return 0, invalid("attach mode %d", int(m))
	}
	var err error
	for _, try := range modes {
		flags := link.XDPDriverMode
		if try == ModeGeneric {
			flags = link.XDPGenericMode
		}
		var l link.Link
		l, err = link.AttachXDP(link.XDPOptions{Program: c.prog, Interface: ifindex, Flags: flags})
		if err == nil {
			if c.pin != "" {
				if err := l.Pin(filepath.Join(c.pin, pinLink)); err != nil {
					l.Close()
					return 0, fmt.Errorf("bpf: pinning link: %w", err)
				}
			}
			c.link = l
			return try, nil
		}
		// EBUSY: a program or link holds the hook in this mode; EEXIST: a
		// program is attached in the other mode, and native and generic
		// cannot be active at once. Either way falling back would not help.
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return 0, alreadyAttached(ifindex, err)
		}
	}
	if errors.Is(err, unix.ERANGE) {
		// veth and most drivers refuse native XDP when the MTU does not
		// fit a page and the program cannot take multi-buffer frames.
		return 0, fmt.Errorf("bpf: attaching to ifindex %d (%s): MTU too large for XDP without frags (load with Options.Frags): %w", ifindex, m, err)
	}
	return 0, fmt.Errorf("bpf: attaching to ifindex %d (%s): %w", ifindex, m, err)
}

func alreadyAttached(ifindex int, cause error) error {
	id, mode, qerr := XDPProgram(ifindex)
	switch {
	case qerr != nil || id == 0:
		// Gone since, or unreadable: report what the kernel said.
		return fmt.Errorf("%w attached by someone else (ifindex %d): %w", ErrAlreadyAttached, ifindex, cause)
	default:
		return fmt.Errorf("%w (id %d, %s) attached by someone else (ifindex %d)", ErrAlreadyAttached, id, mode, ifindex)
	}
}

// Detach detaches the program from its interface, pinned link included;
// the maps stay.
func (c *Classifier) Detach() error {
	if c.link == nil {
		return nil
	}
	// Unpin is a no-op for a link that is not pinned.
	if err := c.link.Unpin(); err != nil {
		return fmt.Errorf("bpf: unpinning link: %w", err)
	}
	err := c.link.Detach()
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		err = nil // Closing the last fd detaches it.
	}
	if cerr := c.link.Close(); err == nil {
		err = cerr
	}
	c.link = nil
	if err != nil {
		return fmt.Errorf("bpf: detaching: %w", err)
	}
	return nil
}

// Reattach detaches the program from its interface and attaches it again
// in mode m (pinning the new link where the old one was): the driver sets
// the program up afresh on every queue it has now. veth needs it after its
// channels grew: a receive queue added while a program is attached does
// not run it (kernel 6.18; frames on the new queue go to the stack).
func (c *Classifier) Reattach(m Mode) error {
	ifindex, ok := c.Attached()
	if !ok {
		return errors.New("bpf: reattaching: the classifier is not attached")
	}
	if err := c.Detach(); err != nil {
		return err
	}
	if _, err := c.Attach(ifindex, m); err != nil {
		return fmt.Errorf("bpf: reattaching: %w", err)
	}
	return nil
}

// ParseMode reads a mode as Mode.String writes it.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, invalid("attach mode %q", s)
}

// XDPProgram returns the id of the XDP program attached to the interface
// with index ifindex in the caller's network namespace, 0 when there is
// none, and its mode. The kernel has no BPF_PROG_QUERY for XDP, so it asks
// rtnetlink (RTM_GETLINK, IFLA_XDP) directly.
func XDPProgram(ifindex int) (uint32, Mode, error) {
	b, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return 0, 0, fmt.Errorf("bpf: querying links: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return 0, 0, fmt.Errorf("bpf: querying links: %w", err)
	}
	for i := range msgs {
		msg := &msgs[i]
		if msg.Header.Type != unix.RTM_NEWLINK || len(msg.Data) < unix.SizeofIfInfomsg {
			continue
		}
		// struct ifinfomsg: family, pad, type (u16), index (s32), ...
		if int(int32(binary.NativeEndian.Uint32(msg.Data[4:]))) != ifindex {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(msg)
		if err != nil {
			return 0, 0, fmt.Errorf("bpf: querying link %d: %w", ifindex, err)
		}
		for _, a := range attrs {
			if a.Attr.Type&^unix.NLA_F_NESTED == unix.IFLA_XDP {
				id, mode := parseXDPAttr(a.Value)
				return id, mode, nil
			}
		}
		return 0, 0, nil
	}
	return 0, 0, fmt.Errorf("bpf: querying link %d: no such interface", ifindex)
}

// Values of IFLA_XDP_ATTACHED (enum in include/uapi/linux/if_link.h).
const (
	xdpAttachedDrv = 1
	xdpAttachedSKB = 2
)

// parseXDPAttr reads IFLA_XDP_ATTACHED and IFLA_XDP_PROG_ID from the nested
// attributes of IFLA_XDP.
func parseXDPAttr(b []byte) (uint32, Mode) {
	var (
		id   uint32
		mode Mode
	)
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ unix.NLA_F_NESTED
		if l < unix.SizeofRtAttr || l > len(b) {
			break
		}
		v := b[unix.SizeofRtAttr:l]
		switch {
		case typ == unix.IFLA_XDP_PROG_ID && len(v) >= 4:
			id = binary.NativeEndian.Uint32(v)
		case typ == unix.IFLA_XDP_ATTACHED && len(v) >= 1:
			switch v[0] {
			case xdpAttachedDrv:
				mode = ModeNative
			case xdpAttachedSKB:
				mode = ModeGeneric
			}
		}
		al := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if al > len(b) {
			break
		}
		b = b[al:]
	}
	return id, mode
}
