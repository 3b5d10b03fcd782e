package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/internal/perf"
)

// hfiModelOpts are perf's --hfi-model options: client and server in this
// process, each on a modeled HFI (hfidev/model), the two units joined back
// to back.
type hfiModelOpts struct {
	on    bool
	chip  string
	loss  uint64
	eager bool
	peers string // --hfi-peers, for --iface hfi1_N
}

func (h *hfiModelOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&h.on, "hfi-model", false, "run client and server in this process on two modeled HFIs back to back (the software model of the hfi1 user API, hfidev/model; not hardware): the transport over HFI contexts, 9B KDETH packets by PIO and SDMA")
	fs.StringVar(&h.chip, "hfi-chip", "wfr", "with --hfi-model: the modeled chip, wfr (Omni-Path) or jkr (CN5000)")
	fs.Uint64Var(&h.loss, "hfi-loss", 0, "with --hfi-model: lose every Nth packet on the modeled wire (0: none)")
	fs.BoolVar(&h.eager, "hfi-eager", false, "with --hfi-model: receive everything through eager buffers, never by TID straight into memory (to compare)")
	fs.StringVar(&h.peers, "hfi-peers", "", "with --iface hfi1_N (an HFI unit, hfidev; verified against the software model only): the peers file, lines 'ADDR LID CTXT[,CTXT...]' (default /etc/softfabric/hfi1_N.peers; see docs/hfidev.md)")
}

// checkHFIUnit checks perf's flags for --iface hfi1_N and says on stderr
// that the HFI backend has run on its software model only.
func checkHFIUnit(op string, o perfOpts, stderr io.Writer) error {
	if _, ok := hfidevice.UnitNumber(o.iface); !ok {
		if o.set["hfi-peers"] {
			return usagef("--hfi-peers is for --iface hfi1_N")
		}
		return nil
	}
	if op == "xdp" || o.compare {
		return usagef("%s is an HFI unit: it has no AF_XDP baseline (xdp, --compare)", o.iface)
	}
	fmt.Fprintf(stderr, "softfabric perf: %s is an HFI unit: softfabric's HFI backend (hfidev) is verified against its software model only, never on hardware\n", o.iface)
	return nil
}

// runHFIModel is `softfabric perf OP --hfi-model`: perf's client and
// server on two devices over modeled units, the exchange over TCP on
// loopback between the units' GIDs (127.0.0.1 and 127.0.0.2).
func runHFIModel(pos []string, o perfOpts, stdout, stderr io.Writer) error {
	op := pos[0]
	if len(pos) != 1 {
		return usagef("--hfi-model runs both sides in this process: give no server address")
	}
	if !slices.Contains(perf.Ops, op) {
		return usagef("--hfi-model runs write, read, send or atomic")
	}
	for _, f := range []string{"iface", "perftest", "perftest-server", "compare", "cpus", "port", "hfi-peers"} {
		if o.set[f] {
			return usagef("--%s is not for --hfi-model", f)
		}
	}
	var chip abi.Chip
	switch strings.ToLower(o.hfi.chip) {
	case "wfr":
		chip = abi.ChipWFR
	case "jkr":
		chip = abi.ChipJKR
	default:
		return usagef("--hfi-chip %q: want wfr or jkr", o.hfi.chip)
	}
	pc := hfidevice.PairConfig{Chip: chip}
	if o.hfi.eager {
		pc.Link.ExpectedMin = -1
	}
	pair, err := hfidevice.NewModelPair(pc)
	if err != nil {
		return err
	}
	defer pair.Close()
	if n := o.hfi.loss; n > 0 {
		var k atomic.Uint64
		pair.Wire.SetDrop(func(*model.Unit, []byte) bool { return k.Add(1)%n == 0 })
	}
	note := stdout
	if o.json {
		note = stderr
	}
	fmt.Fprintf(note, "softfabric perf: on the SOFTWARE MODEL of two %v HFIs (hfidev/model) joined back to back in this process, not on hardware: the figures measure softfabric's transport and the model, not a fabric\n", chip)

	ctx, cancel := signalContext(o.timeout)
	defer cancel()
	ln, err := net.Listen("tcp", net.JoinHostPort(hfidevice.DefaultGIDs[1].Unmap().String(), "0"))
	if err != nil {
		return fmt.Errorf("the exchange between the modeled units runs on loopback: %w", err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		_, err := perf.Serve(ctx, perf.OnDevice(pair.Devs[1]), ln)
		served <- err
	}()
	cfg := perfConfig(op, o)
	rs, err := perf.Run(ctx, perf.OnDevice(pair.Devs[0]), ln.Addr().String(), cfg)
	// The server ends when the client hangs up (or, if the client never
	// came, when the listener closes); its error (a peer gone mid-test)
	// says less than the client's.
	_ = ln.Close()
	if serr := <-served; err == nil && serr != nil {
		err = fmt.Errorf("server: %w", serr)
	}
	if err != nil {
		return err
	}
	if o.json {
		return perf.PrintJSON(stdout, rs)
	}
	for _, r := range rs {
		perf.Print(stdout, perf.Title(r.Op, o.lat), []perf.Result{r})
	}
	w := pair.Wire.Stats()
	fmt.Fprintf(stdout, " model: %d packets on the wire, %d lost", w.Carried, w.Dropped)
	for i, u := range pair.Units {
		s := pair.LinkStats(i)
		fmt.Fprintf(stdout, "; %s sent %d by PIO, %d by SDMA (%d by TID)", u.Path(), s.TxPIO, s.TxSDMA, s.TxExpected)
	}
	fmt.Fprintln(stdout)
	return nil
}

// hfiUnits lists the host's HFI units for status: the seam tests replace.
var hfiUnits = hfidev.Units

// HFIStatus is what status reports of one HFI unit (/dev/hfi1_N), read
// without opening it; --json lists it after the Ethernet devices.
type HFIStatus struct {
	HCA       string `json:"hca_id"`    // hfi1_N
	Transport string `json:"transport"` // "hfi1"
	Path      string `json:"path"`      // /dev/hfi1_N
	State     string `json:"port_state,omitempty"`
	LID       uint16 `json:"lid,omitempty"`
	GID       string `json:"gid,omitempty"`
	PortErr   string `json:"port_error,omitempty"` // why port 1 could not be read
	Usable    bool   `json:"usable"`               // opens by name (--iface hfi1_N)
	NotUsable string `json:"not_usable,omitempty"` // why not
}

// hfiStatuses reads the HFI units present (/dev/hfi1_N), if any: each
// port's state from sysfs, and whether opening it by name would succeed
// (hfidevice.Host.Unit). It opens none.
func hfiStatuses() ([]*HFIStatus, error) {
	units, err := hfiUnits()
	if err != nil {
		return nil, err
	}
	host := hfidevice.DefaultHost
	var all []*HFIStatus
	for _, u := range units {
		s := &HFIStatus{HCA: fmt.Sprintf("hfi1_%d", u.N), Transport: "hfi1", Path: u.Path, Usable: true}
		if p, err := host.Port(s.HCA); err != nil {
			s.PortErr = err.Error()
		} else {
			s.State, s.LID, s.GID = p.State, p.LID, p.GID.String()
		}
		if _, err := host.Unit(s.HCA, ""); err != nil {
			s.Usable, s.NotUsable = false, err.Error()
		}
		all = append(all, s)
	}
	return all, nil
}

// printHFIUnits writes status's lines for the HFI units present.
func printHFIUnits(w io.Writer) {
	units, err := hfiStatuses()
	if err != nil {
		fmt.Fprintf(w, "softfabric: HFI units: %v\n", err)
		return
	}
	for _, s := range units {
		fmt.Fprintf(w, "hca_id:\t%s\n", s.HCA)
		fmt.Fprintf(w, "\ttransport:\t\tOmni-Path / CN5000 HFI (hfi1 user API, %s)\n", s.Path)
		if s.PortErr != "" {
			fmt.Fprintf(w, "\tport 1:\t\t\t%s\n", s.PortErr)
		} else {
			fmt.Fprintf(w, "\tport 1:\t\t\t%s, LID 0x%x, GID %s\n", s.State, s.LID, s.GID)
		}
		use := "usable as --iface " + s.HCA
		if !s.Usable {
			use = "not usable: " + s.NotUsable
		}
		fmt.Fprintf(w, "\tsoftfabric:\t\t%s (not opened; the HFI backend, hfidev, is verified against its software model only)\n", use)
	}
}
