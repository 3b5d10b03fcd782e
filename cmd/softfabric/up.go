package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/softfabric/softfabric/bpf"
	"github.com/softfabric/softfabric/ctrl"
)

func init() {
	commands["up"] = command{run: cmdUp, flags: upFlags}
	commands["down"] = command{run: cmdDown, flags: downFlags}
}

type upOpts struct {
	mode     string
	frags    string
	mtu      int
	queues   int
	noDaemon bool
	daemon   daemonOpts
}

func upFlags() *flag.FlagSet { return upFlagSet(new(upOpts)) }

func upFlagSet(o *upOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.StringVar(&o.mode, "mode", "auto", "XDP attach mode: auto (native, else generic), native or generic")
	fs.StringVar(&o.frags, "frags", "auto", "multi-buffer XDP for frames over 3840 bytes: auto (when the MTU needs it), on or off")
	fs.IntVar(&o.mtu, "mtu", 0, "set the interface MTU first (e.g. 9000 for path MTU 4096)")
	fs.IntVar(&o.queues, "queues", 0, "serve at most this many queues (default: all the interface uses)")
	fs.BoolVar(&o.noDaemon, "no-daemon", false, "start no daemon: the first application to open the device owns it (one at a time)")
	o.daemon.addFlags(fs)
	return fs
}

// copyModeMaxFrame is the largest frame an AF_XDP socket in copy mode
// receives into one 4 KiB UMEM chunk (the rest is headroom); bigger frames
// need the multi-buffer (frags) path.
const copyModeMaxFrame = 3840

func oneIface(cmd string, pos []string) (string, error) {
	if len(pos) != 1 {
		return "", usagef("%s needs exactly one interface name", cmd)
	}
	return pos[0], nil
}

func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (CAP_NET_ADMIN and CAP_BPF)")
	}
	return nil
}

func cmdUp(args []string, stdout, _ io.Writer) error {
	var o upOpts
	pos, err := parse(upFlagSet(&o), args)
	if err != nil {
		return err
	}
	iface, err := oneIface("up", pos)
	if err != nil {
		return err
	}
	var mode bpf.Mode
	switch o.mode {
	case "auto":
		mode = bpf.ModeAuto
	case "native":
		mode = bpf.ModeNative
	case "generic":
		mode = bpf.ModeGeneric
	default:
		return usagef("--mode %q: want auto, native or generic", o.mode)
	}
	if o.frags != "auto" && o.frags != "on" && o.frags != "off" {
		return usagef("--frags %q: want auto, on or off", o.frags)
	}
	if o.mtu != 0 && (o.mtu < 576 || o.mtu > 65535) {
		return usagef("--mtu %d: want 576..65535", o.mtu)
	}
	if o.queues < 0 {
		return usagef("--queues must be positive")
	}
	if _, err := o.daemon.check(); err != nil {
		return err
	}
	dev, err := lookup(iface)
	if err != nil {
		return err
	}
	if o.queues > dev.Queues {
		return tooFewQueues(dev, o.queues)
	}
	runDir, pinDir := ctrl.RunDir(dev.NetNS, iface), ctrl.BPFDir(dev.NetNS, iface)
	if st, err := ctrl.LoadState(runDir); err == nil {
		if _, err := st.Settled(dev); err == nil {
			if _, alive := daemonPID(runDir); !alive && !o.noDaemon {
				// Up, but its daemon died: start it again.
				pid, err := startDaemon(iface, runDir, o.daemon)
				if err != nil {
					return fmt.Errorf("%s: %w", iface, err)
				}
				fmt.Fprintf(stdout, "softfabric: %s is up (since %s, XDP %s); its daemon was gone, restarted (pid %d)\n", iface, st.Since.Format(time.RFC3339), st.XDPMode, pid)
				return nil
			}
			fmt.Fprintf(stdout, "softfabric: %s is already up (since %s, XDP %s)\n", iface, st.Since.Format(time.RFC3339), st.XDPMode)
			return nil
		}
		// A record that no longer holds (a namespace gone and its inode
		// reused, a program detached behind our back): start over. What
		// is attached now, if anything, is not ours: Attach refuses it.
		_ = bpf.Remove(pinDir)
		_ = ctrl.RemoveState(runDir)
	} else {
		_ = bpf.Remove(pinDir) // pins without a record are debris too
	}
	if o.mtu != 0 && o.mtu != dev.MTU {
		if err := ctrl.SetMTU(iface, o.mtu); err != nil {
			return err
		}
		dev.MTU = o.mtu
	}
	frags := o.frags == "on" || o.frags == "auto" && dev.MTU+18 > copyModeMaxFrame
	cls, err := bpf.Load(bpf.Options{Frags: frags})
	if err != nil {
		return err
	}
	defer cls.Close()
	used, err := cls.Attach(dev.Index, mode)
	if err != nil {
		return fmt.Errorf("%s: %w", iface, err)
	}
	undo := func() { _ = cls.Detach(); _ = bpf.Remove(pinDir); _ = ctrl.RemoveState(runDir) }
	if err := cls.AllowPKey(0xffff); err != nil {
		undo()
		return err
	}
	if err := cls.Pin(pinDir); err != nil {
		undo()
		return err
	}
	progID, err := cls.ProgramID()
	if err != nil {
		undo()
		return err
	}
	st := &ctrl.State{
		ProgID: progID,
		Iface:  iface, Ifindex: dev.Index, NetNS: dev.NetNS, MAC: dev.MAC.String(), MTU: dev.MTU,
		Queues: dev.Queues, QueueLimit: o.queues, XDPMode: used.String(), Frags: frags, PinDir: pinDir, Since: time.Now(), Version: version,
	}
	if err := ctrl.SaveState(runDir, st); err != nil {
		undo()
		return err
	}
	serving := ""
	if o.queues > 0 && o.queues < dev.Queues {
		serving = fmt.Sprintf(" (serving %d)", o.queues)
	}
	served := ", no daemon"
	if !o.noDaemon {
		pid, err := startDaemon(iface, runDir, o.daemon)
		if err != nil {
			undo()
			return fmt.Errorf("%s: %w", iface, err)
		}
		served = fmt.Sprintf(", daemon pid %d", pid)
	}
	fmt.Fprintf(stdout, "softfabric: %s up: XDP %s, %s%s, MTU %d%s%s\n", iface, used, activeQueues(dev.Queues), serving, dev.MTU, map[bool]string{true: ", multi-buffer", false: ""}[frags], served)
	return nil
}

// activeQueues says "1 active queue" or "N active queues".
func activeQueues(n int) string {
	if n == 1 {
		return "1 active queue"
	}
	return fmt.Sprintf("%d active queues", n)
}

// tooFewQueues is up's error for --queues n above the queues dev uses: it
// says how to raise them, or that the driver cannot.
func tooFewQueues(dev *ctrl.Device, n int) error {
	c, most := dev.Channels, dev.MaxRxQueues
	if c != nil {
		most = c.MaxQueues() // what ethtool -L can reach
	}
	if n > most {
		return fmt.Errorf("%s has %s; --queues %d needs more: the driver allocated only %d", dev.Name, activeQueues(dev.Queues), n, most)
	}
	have := fmt.Sprintf("%s has %s (%d allocated); --queues %d needs more", dev.Name, activeQueues(dev.Queues), most, n)
	switch {
	case c == nil:
		return fmt.Errorf("%s, and its driver has no channels to raise (ethtool -l)", have)
	case c.IsCombined():
		return fmt.Errorf("%s: raise them with 'ethtool -L %s combined %d'", have, dev.Name, n)
	default:
		return fmt.Errorf("%s: raise them with 'ethtool -L %s rx %d tx %d'", have, dev.Name, n, n)
	}
}

func downFlags() *flag.FlagSet { return downFlagSet(new(bool)) }

func downFlagSet(force *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	fs.BoolVar(force, "force", false, "stop the daemon even while applications use the device (they see it gone)")
	return fs
}

func cmdDown(args []string, stdout, _ io.Writer) error {
	var force bool
	pos, err := parse(downFlagSet(&force), args)
	if err != nil {
		return err
	}
	iface, err := oneIface("down", pos)
	if err != nil {
		return err
	}
	dev, err := lookup(iface)
	if err != nil {
		return err
	}
	runDir, pinDir := ctrl.RunDir(dev.NetNS, iface), ctrl.BPFDir(dev.NetNS, iface)
	st, stErr := ctrl.LoadState(runDir)
	var stale error
	if stErr == nil {
		_, stale = st.Settled(dev)
	}
	if stale != nil {
		// Debris of another namespace or of a detached program: clear it,
		// but this interface was not up.
		_ = bpf.Remove(pinDir)
		_ = ctrl.RemoveState(runDir)
		return fmt.Errorf("%s is not up", iface)
	}
	if _, pinErr := os.Stat(pinDir); errors.Is(stErr, fs.ErrNotExist) && errors.Is(pinErr, fs.ErrNotExist) {
		return fmt.Errorf("%s is not up", iface)
	}
	// Refuse while applications use the daemon (as a kernel refuses to
	// unload a driver in use), then stop it; then refuse while another
	// process owns the device's queues.
	if !force {
		if err := daemonIdle(runDir, iface); err != nil {
			return err
		}
	}
	if err := stopDaemon(runDir); err != nil {
		return err
	}
	if stErr == nil {
		lock, err := ctrl.LockDevice(runDir)
		if err != nil {
			return err
		}
		defer lock.Unlock()
	}
	if err := bpf.Remove(pinDir); err != nil {
		return err
	}
	// The namespace's directory too, unless another of its interfaces
	// is up (it is not empty then).
	_ = os.Remove(filepath.Dir(pinDir))
	if err := ctrl.RemoveState(runDir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "softfabric: %s down\n", iface)
	return nil
}

// lookup checks the privileges up and down need, makes sure the bpffs
// for the pins is there, and reads the interface.
func lookup(iface string) (*ctrl.Device, error) {
	if err := needRoot(); err != nil {
		return nil, err
	}
	if err := ctrl.EnsureBPFFS(); err != nil {
		return nil, err
	}
	return ctrl.LookupDevice(iface)
}
