package perf

import (
	"fmt"
	"io"
)

// perftest's BW table, as perftest_parameters.h spells it: RESULT_LINE,
// RESULT_FMT (MB/sec meaning MiB/s) and REPORT_FMT, each row ended by
// REPORT_EXT.
const (
	ptResultLine = "---------------------------------------------------------------------------------------\n"
	ptResultFmt  = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	ptReportFmt  = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
)

// PerftestTitle is the heading of a perftest BW test: "RDMA_Write BW
// Test", "Atomic CMP_AND_SWAP BW Test".
func PerftestTitle(op string, cmpSwap bool) string {
	if op == "atomic" && cmpSwap {
		return "Atomic CMP_AND_SWAP BW Test"
	}
	return Title(op, false)
}

// PrintPerftest writes a perftest BW table: the heading, the settings
// both sides agreed, and one row per line, in perftest's units.
func PrintPerftest(w io.Writer, title string, qps, mtu int, lines []PerftestLine) {
	fmt.Fprint(w, ptResultLine)
	fmt.Fprintf(w, "                    %s\n", title)
	fmt.Fprintf(w, " Connection type : RC\n Number of qps   : %d\n Mtu             : %d[B]\n", qps, mtu)
	fmt.Fprint(w, ptResultLine)
	fmt.Fprint(w, ptResultFmt)
	for _, l := range lines {
		fmt.Fprintf(w, ptReportFmt, l.Bytes, l.Iters, l.BWPeak, l.BWAvg, l.MsgRate)
	}
	fmt.Fprint(w, ptResultLine)
}

// PrintTransport writes the transport's counters for results that had
// any, as Print does.
func PrintTransport(w io.Writer, rs []Result) {
	for _, r := range rs {
		if r.Retransmits+r.Timeouts+r.Probes+r.SeqNAKs > 0 {
			fmt.Fprintf(w, " transport: %d bytes: %d retransmitted packets, %d timeouts, %d tail probes, %d sequence NAKs\n", r.Bytes, r.Retransmits, r.Timeouts, r.Probes, r.SeqNAKs)
		}
	}
}
