package perf

import (
	"fmt"
	"io"
	"strings"
)

// perftest's BW table, as perftest_parameters.h spells it: RESULT_LINE,
// RESULT_FMT (MB/sec meaning MiB/s) and REPORT_FMT, each row ended by
// REPORT_EXT.
const (
	ptResultLine = "---------------------------------------------------------------------------------------\n"
	ptResultFmt  = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	ptReportFmt  = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
	// RESULT_FMT_LAT and REPORT_FMT_LAT: the latency table.
	ptResultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	ptReportFmtLat = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
)

// PerftestTitle is the heading of a perftest test: "RDMA_Write BW
// Test", "Atomic CMP_AND_SWAP Latency Test".
func PerftestTitle(op string, cmpSwap, lat bool) string {
	t := Title(op, lat)
	if op == "atomic" && cmpSwap {
		t = strings.Replace(t, "FETCH_AND_ADD", "CMP_AND_SWAP", 1)
	}
	return t
}

// printPerftestHead writes the heading of perftest's tables: the title,
// the settings both sides agreed, and the columns.
func printPerftestHead(w io.Writer, title string, qps, mtu int, columns string) {
	fmt.Fprint(w, ptResultLine)
	fmt.Fprintf(w, "                    %s\n", title)
	fmt.Fprintf(w, " Connection type : RC\n Number of qps   : %d\n Mtu             : %d[B]\n", qps, mtu)
	fmt.Fprint(w, ptResultLine)
	fmt.Fprint(w, columns)
}

// PrintPerftest writes a perftest BW table: the heading, the settings
// both sides agreed, and one row per line, in perftest's units.
func PrintPerftest(w io.Writer, title string, qps, mtu int, lines []PerftestLine) {
	printPerftestHead(w, title, qps, mtu, ptResultFmt)
	for _, l := range lines {
		fmt.Fprintf(w, ptReportFmt, l.Bytes, l.Iters, l.BWPeak, l.BWAvg, l.MsgRate)
	}
	fmt.Fprint(w, ptResultLine)
}

// PrintPerftestLat writes perftest's latency table (print_report_lat's
// rows, in microseconds).
func PrintPerftestLat(w io.Writer, title string, mtu int, lines []PerftestLatLine) {
	printPerftestHead(w, title, 1, mtu, ptResultFmtLat)
	for _, l := range lines {
		fmt.Fprintf(w, ptReportFmtLat, l.Bytes, l.Iters, l.TMin, l.TMax, l.TTypical, l.TAvg, l.TStdev, l.T99, l.T999)
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
