package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

const rule = "---------------------------------------------------------------------------------------------------------------"

// Print writes results as perftest does: a header, one row per result.
func Print(w io.Writer, title string, rs []Result) {
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s\n", title)
	fmt.Fprintln(w, rule)
	if len(rs) > 0 && rs[0].LatMaxUs > 0 {
		fmt.Fprintf(w, " %-10s %-12s %-14s %-14s %-14s %-14s %-14s\n", "#bytes", "#iterations", "t_min[usec]", "t_median[usec]", "t_p99[usec]", "t_max[usec]", "t_avg[usec]")
		for _, r := range rs {
			fmt.Fprintf(w, " %-10d %-12d %-14.2f %-14.2f %-14.2f %-14.2f %-14.2f\n", r.Bytes, r.Iters, r.LatMinUs, r.LatMedianUs, r.LatP99Us, r.LatMaxUs, r.LatAvgUs)
		}
	} else {
		fmt.Fprintf(w, " %-10s %-12s %-16s %-18s %-16s %-18s %-14s\n", "#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]")
		for _, r := range rs {
			fmt.Fprintf(w, " %-10d %-12d %-16.2f %-18.2f %-16.2f %-18.2f %-14.6f\n", r.Bytes, r.Iters, r.BWPeakGbps, r.BWAvgGbps, r.BWPeakMBps, r.BWAvgMBps, r.MsgRateMpps)
		}
	}
	for _, r := range rs {
		if r.Retransmits+r.Timeouts+r.Probes+r.SeqNAKs > 0 {
			fmt.Fprintf(w, " transport: %d retransmitted packets, %d timeouts, %d tail probes, %d sequence NAKs\n", r.Retransmits, r.Timeouts, r.Probes, r.SeqNAKs)
		}
		printCPU(w, r)
		PrintWorkers(w, r.Workers)
	}
	fmt.Fprintln(w, rule)
}

// printCPU writes each side's CPU time over the measured interval: per KiB
// moved, or per round trip for latency tests.
func printCPU(w io.Writer, r Result) {
	side := func(name string, per, user, sys float64, unit string) string {
		if user+sys == 0 {
			return name + " unknown"
		}
		return fmt.Sprintf("%s %.0f ns/%s (user %.2f s, sys %.2f s)", name, per, unit, user, sys)
	}
	switch {
	case r.CPUClientNsPerOp > 0:
		fmt.Fprintf(w, " cpu: %s, %s\n", side("client", r.CPUClientNsPerOp, r.CPUClientUserS, r.CPUClientSysS, "round trip"),
			side("server", r.CPUServerNsPerOp, r.CPUServerUserS, r.CPUServerSysS, "round trip"))
	case r.CPUClientNsPerKiB > 0:
		fmt.Fprintf(w, " cpu: %s, %s\n", side("client", r.CPUClientNsPerKiB, r.CPUClientUserS, r.CPUClientSysS, "KiB"),
			side("server", r.CPUServerNsPerKiB, r.CPUServerUserS, r.CPUServerSysS, "KiB"))
	}
}

// PrintWorkers writes one line per worker of a device with several: the
// frames it received from its queue and sent on it, and those handed over
// to or from other workers.
func PrintWorkers(w io.Writer, ws []WorkerStats) {
	if len(ws) < 2 {
		return
	}
	for _, s := range ws {
		fmt.Fprintf(w, " worker %d (queue %d): rx %d, tx %d frames; handed over %d out, %d in, %d dropped\n",
			s.Worker, s.Worker, s.RxFrames, s.TxFrames, s.HandedOff, s.HandedIn, s.HandoffDrops)
	}
}

// PrintJSON writes results as one JSON array.
func PrintJSON(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}

// Title is perftest's heading for an operation.
func Title(op string, lat bool) string {
	kind := "BW"
	if lat {
		kind = "Latency"
	}
	names := map[string]string{"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send", "atomic": "Atomic FETCH_AND_ADD", "udp": "UDP socket (baseline)", "xdp": "raw AF_XDP (baseline)"}
	n := names[op]
	if n == "" {
		n = strings.ToUpper(op)
	}
	return n + " " + kind + " Test"
}
