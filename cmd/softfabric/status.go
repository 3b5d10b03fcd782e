package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softfabric/softfabric/bpf"
	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemon"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/device"
)

func init() {
	commands["status"] = command{run: cmdStatus, flags: func() *flag.FlagSet { return statusFlagSet(new(bool)) }}
	commands["stats"] = command{run: cmdStats, flags: func() *flag.FlagSet { return statusFlagSet(new(bool)) }}
}

func statusFlagSet(js *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.BoolVar(js, "json", false, "print JSON")
	return fs
}

// Status is what `softfabric status` reports about one device.
type Status struct {
	Iface     string        `json:"iface"`
	Ifindex   int           `json:"ifindex"`
	MAC       string        `json:"mac"`
	State     string        `json:"state"`
	Since     time.Time     `json:"since"`
	MTU       int           `json:"mtu"`
	ActiveMTU int           `json:"active_mtu"`
	XDP       string        `json:"xdp"`
	XDPProgID uint32        `json:"xdp_prog_id"`
	Frags     bool          `json:"multi_buffer"`
	Queues    int           `json:"queues"`                // in use now (ctrl.Device.Queues)
	MaxQueues int           `json:"max_queues"`            // allocated by the driver
	QueueSrc  string        `json:"queue_source"`          // where Queues came from: ethtool, sysfs or default
	QueuesUp  int           `json:"queues_at_up"`          // Queues at up
	QueueLim  int           `json:"queue_limit,omitempty"` // up --queues; 0: none
	Serves    int           `json:"serves"`                // what a device opened now serves: Queues, at most QueueLim
	Owner     int           `json:"owner_pid,omitempty"`
	Contexts  int           `json:"contexts"`
	QPs       int           `json:"qps"`
	GIDs      []string      `json:"gids"`
	Counters  *bpf.Counters `json:"counters,omitempty"`
	// Sockets are the owner's AF_XDP sockets, one per queue it serves,
	// as it recorded them (ctrl.Sockets).
	Sockets []ctrl.SocketInfo `json:"sockets,omitempty"`
	// Daemon is what the daemon serving the device reports: its workers
	// and the applications attached to it.
	Daemon *daemonapi.Stats `json:"daemon,omitempty"`
}

func deviceStatus(iface string) (*Status, error) {
	dev, err := ctrl.LookupDevice(iface)
	if err != nil {
		return nil, err
	}
	runDir := ctrl.RunDir(dev.NetNS, iface)
	st, err := ctrl.LoadState(runDir)
	if err == nil {
		dev, err = st.Settled(dev)
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not up", iface)
	}
	s := &Status{
		Iface: iface, Ifindex: dev.Index, MAC: dev.MAC.String(), State: "PORT_ACTIVE", Since: st.Since,
		MTU: dev.MTU, XDP: st.XDPMode, XDPProgID: dev.XDPProgID, Frags: st.Frags,
		Queues: dev.Queues, MaxQueues: dev.MaxRxQueues, QueueSrc: dev.QueueSource, QueuesUp: st.Queues, QueueLim: st.QueueLimit,
	}
	s.Serves = s.Queues
	if s.QueueLim > 0 && s.QueueLim < s.Serves {
		s.Serves = s.QueueLim
	}
	s.ActiveMTU = device.ActiveMTU(dev.MTU)
	if !dev.Up {
		s.State = "PORT_DOWN"
	}
	if dev.XDPProgID == 0 {
		s.State = "PORT_DOWN (classifier detached)"
	}
	for i, g := range ctrl.GIDs(dev) {
		s.GIDs = append(s.GIDs, fmt.Sprintf("GID[%d]: %s", i, ctrl.FormatGID(g)))
	}
	if pid := ownerPID(runDir); pid != 0 {
		s.Owner = pid
		s.Contexts = 1
		if rec, err := ctrl.LoadSockets(runDir); err == nil && rec.PID == pid {
			s.Sockets = rec.Queues
		}
	}
	if _, alive := daemonPID(runDir); alive {
		if ds, err := daemon.Query(runDir); err == nil {
			s.Daemon = ds
			s.Contexts = len(ds.Apps)
		}
	}
	if cls, err := bpf.Open(st.PinDir); err == nil {
		defer cls.Close()
		if c, err := cls.Counters(); err == nil {
			s.Counters = &c
		}
		if qps, err := cls.QPs(); err == nil {
			s.QPs = len(qps)
		}
	}
	return s, nil
}

// ownerPID is the pid of the process holding the device, 0 if none. It
// reads the pid the owner wrote into its lock file rather than probing the
// lock, so that a status never makes a starting owner see "device busy".
func ownerPID(runDir string) int { return pidIn(filepath.Join(runDir, "owner.lock")) }

// pidIn is the pid written in file path (owner.lock, daemon.pid), 0 when
// there is none or that process is gone (without cleaning up: a lock it
// held died with it).
func pidIn(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0
	}
	return pid
}

// upInterfaces lists the interfaces of this namespace that are up.
func upInterfaces() ([]string, error) {
	ns, err := ctrl.NetNSID()
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(ctrl.RunDir(ns, "x"))
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func cmdStatus(args []string, stdout, _ io.Writer) error {
	var js bool
	pos, err := parse(statusFlagSet(&js), args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("status takes at most one interface name")
	}
	ifaces := pos
	if len(ifaces) == 0 {
		if ifaces, err = upInterfaces(); err != nil {
			return err
		}
	}
	var all []*Status
	for _, i := range ifaces {
		s, err := deviceStatus(i)
		if err != nil {
			return err
		}
		all = append(all, s)
	}
	if js {
		// The Ethernet devices, then the HFI units (transport "hfi1").
		list := make([]any, 0, len(all))
		for _, s := range all {
			list = append(list, s)
		}
		hfis, err := hfiStatuses()
		if err != nil {
			return err
		}
		for _, h := range hfis {
			list = append(list, h)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	if len(all) == 0 {
		fmt.Fprintln(stdout, "softfabric: no device is up in this network namespace")
	}
	for _, s := range all {
		printStatus(stdout, s)
	}
	printHFIUnits(stdout)
	return nil
}

func printStatus(w io.Writer, s *Status) {
	owner := "none"
	if s.Owner != 0 {
		owner = fmt.Sprintf("pid %d", s.Owner)
	}
	fmt.Fprintf(w, "hca_id:\tsoftfabric_%s\n", s.Iface)
	fmt.Fprintf(w, "\ttransport:\t\tRoCEv2 (softfabric, XDP + AF_XDP)\n")
	fmt.Fprintf(w, "\tinterface:\t\t%s (ifindex %d)\n", s.Iface, s.Ifindex)
	fmt.Fprintf(w, "\tmac:\t\t\t%s\n", s.MAC)
	fmt.Fprintf(w, "\tstate:\t\t\t%s (since %s)\n", s.State, s.Since.Format(time.RFC3339))
	fmt.Fprintf(w, "\tmtu:\t\t\t%d (active_mtu %d)\n", s.MTU, s.ActiveMTU)
	fmt.Fprintf(w, "\txdp:\t\t\t%s, prog id %d%s\n", s.XDP, s.XDPProgID, map[bool]string{true: ", multi-buffer", false: ""}[s.Frags])
	fmt.Fprintf(w, "\tqueues:\t\t\t%s\n", queuesLine(s))
	fmt.Fprintf(w, "\tcontexts:\t\t%d (owner %s)\n", s.Contexts, owner)
	for _, k := range s.Sockets {
		tx := "copied into the UMEM"
		if k.InPlace {
			tx = "built in place in the UMEM"
		}
		fmt.Fprintf(w, "\tsocket:\t\t\tqueue %d, AF_XDP %s, transmit frames %s (rings rx/tx/fill/completion %d/%d/%d/%d, UMEM %d × %d B%s)\n",
			k.Queue, k.Mode, tx, k.RxRing, k.TxRing, k.FillRing, k.CompRing, k.Frames, k.FrameSize, map[bool]string{true: ", multi-buffer", false: ""}[k.MultiBuffer])
	}
	if d := s.Daemon; d != nil {
		printDaemon(w, d, "\t")
	}
	fmt.Fprintf(w, "\tqps:\t\t\t%d\n", s.QPs)
	fmt.Fprintf(w, "\tgids:\n")
	for _, g := range s.GIDs {
		fmt.Fprintf(w, "\t\t%s\n", g)
	}
	if c := s.Counters; c != nil {
		printCounters(w, c, "\t")
	}
}

// queuesLine is status's queues line: "2 active of 2 allocated (ethtool)",
// and when they changed since up or up limited them, what a device opened
// now serves: "(ethtool; 1 at up: a newly opened device serves 2)".
func queuesLine(s *Status) string {
	why := s.QueueSrc
	if s.QueueLim > 0 {
		why += fmt.Sprintf("; --queues %d", s.QueueLim)
	}
	if s.QueuesUp != s.Queues {
		why += fmt.Sprintf("; %d at up", s.QueuesUp)
	}
	if s.QueueLim > 0 || s.QueuesUp != s.Queues {
		why += fmt.Sprintf(": a newly opened device serves %d", s.Serves)
	}
	return fmt.Sprintf("%d active of %d allocated (%s)", s.Queues, s.MaxQueues, why)
}

func printCounters(w io.Writer, c *bpf.Counters, indent string) {
	fmt.Fprintf(w, "%sclassifier:\n", indent)
	rows := []struct {
		name string
		v    uint64
	}{
		{"redirected", c.Redirected}, {"passed", c.Passed}, {"dropped_bad_version", c.BadVersion},
		{"dropped_bad_pkey", c.BadPKey}, {"dropped_unknown_qpn", c.UnknownQPN}, {"dropped_short", c.Short},
		{"dropped_no_socket", c.NoSocket}, {"dropped_by_rule", c.RuleDrop},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%-22s %d\n", indent, r.name, r.v)
	}
	for i, h := range c.RuleHits {
		if h != 0 {
			fmt.Fprintf(w, "%s\trule[%d]_hits%-10s %d\n", indent, i, "", h)
		}
	}
	for q, n := range c.QueueRedirected {
		if n != 0 {
			fmt.Fprintf(w, "%s\t%-22s %d\n", indent, fmt.Sprintf("queue[%d]_redirected", q), n)
		}
	}
}

func cmdStats(args []string, stdout, _ io.Writer) error {
	var js bool
	pos, err := parse(statusFlagSet(&js), args)
	if err != nil {
		return err
	}
	iface, err := oneIface("stats", pos)
	if err != nil {
		return err
	}
	s, err := deviceStatus(iface)
	if err != nil {
		return err
	}
	if s.Counters == nil {
		return fmt.Errorf("%s: classifier counters unavailable", iface)
	}
	if js {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s.Counters)
	}
	printCounters(stdout, s.Counters, "")
	if s.Daemon != nil {
		printDaemon(stdout, s.Daemon, "")
	}
	return nil
}

// printDaemon prints what the daemon reports: a line per worker and per
// attached application.
func printDaemon(w io.Writer, d *daemonapi.Stats, indent string) {
	fmt.Fprintf(w, "%sdaemon:\t\t\tpid %d (since %s), %d application(s)\n", indent, d.PID, d.Since.Format(time.RFC3339), len(d.Apps))
	if d.RingSlots > 0 {
		fmt.Fprintf(w, "%s\trings:\t\t%d slots of %d bytes, two a queue: %.1f MiB an application\n", indent, d.RingSlots, d.SlotSize, float64(d.RingBytes)/(1<<20))
	}
	for _, k := range d.Workers {
		if k.Forwarder {
			fmt.Fprintf(w, "%s\tforwarder[%d] to worker[%d] (a queue that came into use later): rx %d ring_full %d sleeps %d\n",
				indent, k.Queue, k.Home, k.RxFrames, k.RingFulls, k.Sleeps)
			continue
		}
		fmt.Fprintf(w, "%s\tworker[%d]: rx %d tx %d looped %d unknown_qpn %d malformed %d ring_full %d parked %d (now %d) tx_stalls %d kicks %d sleeps %d cm_rejects %d expectations_handed %d (late %d)\n",
			indent, k.Queue, k.RxFrames, k.TxFrames, k.Looped, k.Unknown, k.Malformed, k.RingFulls, k.Parked, k.ParkedNow, k.TxStalls, k.Kicks, k.Sleeps, k.CMRejects, k.ExpectationsHanded, k.ExpectationsLate)
	}
	for _, a := range d.Apps {
		fmt.Fprintf(w, "%s\tapp[%d]: pid %d uid %d %q, %d QPs, %d connections, %d shared memory regions (%d bytes), rx %d (placed %d) tx %d (gathered %d) denied %d dropped %d\n",
			indent, a.ID, a.PID, a.UID, a.Name, len(a.QPs), a.Conns, a.MemRegions, a.MemBytes, a.RxFrames, a.Placed, a.TxFrames, a.Gathered, a.Denied, a.Dropped)
		if t := a.Transport; t != nil {
			fmt.Fprintf(w, "%s\t\ttransport: retransmits %d timeouts %d (late %d) seq_naks %d/%d rnr_naks %d/%d err_naks %d/%d (sent/received) cq_overruns %d misaddressed %d\n",
				indent, t.Retransmits, t.Timeouts, t.LateTimeouts, t.SeqNAKsSent, t.SeqNAKsRcvd, t.RNRNAKsSent, t.RNRNAKsRcvd, t.ErrNAKsSent, t.ErrNAKsRcvd, t.CQOverruns, t.Misaddressed)
		}
	}
}
