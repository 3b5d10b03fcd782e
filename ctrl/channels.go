package ctrl

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoChannels is matched (errors.Is) by the error of ReadChannels and
// SetChannels for a device whose driver has no channels to report or set
// (EOPNOTSUPP: bridge, ifb and lo, for some, implement no get_channels),
// and when the kernel has no ethtool netlink at all.
var ErrNoChannels = errors.New("driver reports no channels")

type noChannelsError struct{ err error }

func (e *noChannelsError) Error() string        { return fmt.Sprintf("%v (%v)", ErrNoChannels, e.err) }
func (e *noChannelsError) Is(target error) bool { return target == ErrNoChannels }
func (e *noChannelsError) Unwrap() error        { return e.err }

// Channels are a driver's queue counts as `ethtool -l` shows them: the
// maximum it allocated and the count in use, of receive-only,
// transmit-only, other (link interrupts and such) and combined channels.
// A veth has rx and tx channels; most NICs have combined ones.
type Channels struct {
	MaxRx, MaxTx, MaxOther, MaxCombined uint32
	Rx, Tx, Other, Combined             uint32
}

// Queues is how many queues, from 0, an AF_XDP socket with both an rx and a
// tx ring can bind: the kernel refuses a queue id at or above the device's
// real rx queue count for the rx ring, and at or above its real tx queue
// count for the tx ring. Queue 0 always exists, so it is at least 1.
func (c Channels) Queues() int {
	n := min(c.Rx, c.Tx) + c.Combined
	return max(int(n), 1)
}

// IsCombined reports whether the driver's channels are combined ones (rx and
// tx in pairs), which `ethtool -L IF combined N` sets, rather than separate
// rx and tx ones (`ethtool -L IF rx N tx N`).
func (c Channels) IsCombined() bool { return c.MaxCombined > 0 && c.MaxRx == 0 }

// MaxQueues is the most queues the driver can make active: the value of
// Queues once `ethtool -L` raised the channels to their maximum.
func (c Channels) MaxQueues() int {
	return Channels{Rx: c.MaxRx, Tx: c.MaxTx, Combined: c.MaxCombined}.Queues()
}

// ReadChannels reads the channels of the interface ifindex in the calling
// thread's network namespace through ethtool netlink
// (ETHTOOL_MSG_CHANNELS_GET). A driver without channels gives an error
// that matches ErrNoChannels and unix.EOPNOTSUPP.
func ReadChannels(ifindex int) (Channels, error) {
	var c Channels
	msgs, err := ethtoolDo(unix.ETHTOOL_MSG_CHANNELS_GET, ifindex, nil, 0)
	if err != nil {
		return c, fmt.Errorf("reading channels of ifindex %d: %w", ifindex, err)
	}
	if len(msgs) != 1 {
		return c, fmt.Errorf("reading channels of ifindex %d: %d replies", ifindex, len(msgs))
	}
	if err := c.decode(msgs[0].Data); err != nil {
		return c, fmt.Errorf("reading channels of ifindex %d: %w", ifindex, err)
	}
	return c, nil
}

// SetChannels sets the channel counts of the interface ifindex in the
// calling thread's network namespace, as `ethtool -L` does
// (ETHTOOL_MSG_CHANNELS_SET); a zero count is left as it is.
func SetChannels(ifindex int, rx, tx, combined uint32) error {
	if rx == 0 && tx == 0 && combined == 0 {
		return fmt.Errorf("setting channels of ifindex %d: no count given", ifindex)
	}
	_, err := ethtoolDo(unix.ETHTOOL_MSG_CHANNELS_SET, ifindex, func(ae *netlink.AttributeEncoder) {
		for _, a := range []struct {
			typ uint16
			v   uint32
		}{
			{unix.ETHTOOL_A_CHANNELS_RX_COUNT, rx},
			{unix.ETHTOOL_A_CHANNELS_TX_COUNT, tx},
			{unix.ETHTOOL_A_CHANNELS_COMBINED_COUNT, combined},
		} {
			if a.v != 0 {
				ae.Uint32(a.typ, a.v)
			}
		}
	}, netlink.Acknowledge)
	if err != nil {
		return fmt.Errorf("setting channels of ifindex %d (rx %d, tx %d, combined %d): %w", ifindex, rx, tx, combined, err)
	}
	return nil
}

func (c *Channels) decode(b []byte) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err
	}
	for ad.Next() {
		switch ad.Type() {
		case unix.ETHTOOL_A_CHANNELS_RX_MAX:
			c.MaxRx = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_TX_MAX:
			c.MaxTx = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_OTHER_MAX:
			c.MaxOther = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_COMBINED_MAX:
			c.MaxCombined = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_RX_COUNT:
			c.Rx = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_TX_COUNT:
			c.Tx = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_OTHER_COUNT:
			c.Other = ad.Uint32()
		case unix.ETHTOOL_A_CHANNELS_COMBINED_COUNT:
			c.Combined = ad.Uint32()
		}
	}
	return ad.Err()
}

// ethtoolDo sends one ethtool netlink request about ifindex, its header
// followed by the attributes attrs encodes, and returns the replies.
func ethtoolDo(cmd uint8, ifindex int, attrs func(*netlink.AttributeEncoder), flags netlink.HeaderFlags) ([]genetlink.Message, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.ETHTOOL_A_CHANNELS_HEADER, func(nae *netlink.AttributeEncoder) error {
		nae.Uint32(unix.ETHTOOL_A_HEADER_DEV_INDEX, uint32(ifindex))
		return nil
	})
	if attrs != nil {
		attrs(ae)
	}
	data, err := ae.Encode()
	if err != nil {
		return nil, err
	}

	// The socket belongs to the namespace of the thread that creates it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("generic netlink: %w", err)
	}
	defer c.Close()
	// The kernel's explanation of a refusal ("requested channel count
	// exceeds maximum") is worth more than the bare errno.
	_ = c.SetOption(netlink.ExtendedAcknowledge, true)
	fam, err := c.GetFamily(unix.ETHTOOL_GENL_NAME)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, &noChannelsError{errors.New("no ethtool netlink in this kernel")}
		}
		return nil, fmt.Errorf("ethtool netlink family: %w", err)
	}
	msgs, err := c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: unix.ETHTOOL_GENL_VERSION},
		Data:   data,
	}, fam.ID, netlink.Request|flags)
	if err != nil {
		var oe *netlink.OpError
		if errors.As(err, &oe) {
			err = oe.Err
			if oe.Message != "" {
				err = fmt.Errorf("%w (%s)", oe.Err, oe.Message)
			}
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, &noChannelsError{err}
		}
		return nil, err
	}
	return msgs, nil
}

// Where the queue count of a Device came from.
const (
	QueuesFromEthtool = "ethtool" // the driver's channels
	QueuesFromSysfs   = "sysfs"   // rx-N and tx-N under /sys/class/net/IF/queues
	QueuesFromDefault = "default" // neither: queue 0, which always exists
)

// sysClassNet is where sysfs lists the interfaces; a variable for tests.
var sysClassNet = "/sys/class/net"

// readQueues fills d's Queues, QueueSource and Channels: from the driver's
// channels; for a driver that has none, from sysfs, which lists the queues
// in use; else the one queue every device has.
func readQueues(d *Device) error {
	ch, err := ReadChannels(d.Index)
	if err == nil {
		d.Queues, d.QueueSource, d.Channels = ch.Queues(), QueuesFromEthtool, &ch
		return nil
	}
	if !errors.Is(err, ErrNoChannels) {
		return err
	}
	if n, err := sysfsQueues(sysClassNet, d.Name, d.Index, d.MAC); err == nil {
		d.Queues, d.QueueSource = n, QueuesFromSysfs
		return nil
	}
	d.Queues, d.QueueSource = 1, QueuesFromDefault
	return nil
}

// sysfsQueues counts the rx-N and tx-N directories under
// root/name/queues (one per queue in use) and returns the smaller count.
//
// The sysfs mounted on /sys belongs to the network namespace of the
// process that mounted it: `ip netns exec` mounts the namespace's own, but
// a process that entered a namespace with setns(2) still sees the host's,
// where name may be another interface or none. So it first checks that
// root/name is the device with this ifindex and MAC.
func sysfsQueues(root, name string, ifindex int, mac net.HardwareAddr) (int, error) {
	dir := filepath.Join(root, name)
	idx, err := readSysfsLine(filepath.Join(dir, "ifindex"))
	if err != nil {
		return 0, err
	}
	addr, err := readSysfsLine(filepath.Join(dir, "address"))
	if err != nil {
		return 0, err
	}
	if idx != strconv.Itoa(ifindex) || !sameAddr(addr, mac) {
		return 0, fmt.Errorf("%s is another interface (ifindex %s, address %s): a sysfs of another network namespace", dir, idx, addr)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "queues"))
	if err != nil {
		return 0, err
	}
	var rx, tx int
	for _, e := range ents {
		kind, num, ok := strings.Cut(e.Name(), "-")
		if !ok {
			continue
		}
		if _, err := strconv.ParseUint(num, 10, 32); err != nil {
			continue
		}
		switch kind {
		case "rx":
			rx++
		case "tx":
			tx++
		}
	}
	if rx == 0 || tx == 0 {
		return 0, fmt.Errorf("%s/queues lists %d rx and %d tx queues", dir, rx, tx)
	}
	return min(rx, tx), nil
}

// sameAddr reports whether sysfs's address file shows mac.
func sameAddr(sysfs string, mac net.HardwareAddr) bool {
	if strings.EqualFold(sysfs, mac.String()) {
		return true
	}
	// vishvananda/netlink reports lo's all-zero address as none.
	return len(mac) == 0 && strings.Trim(sysfs, "0:") == ""
}

func readSysfsLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan()
	return strings.TrimSpace(s.Text()), s.Err()
}
