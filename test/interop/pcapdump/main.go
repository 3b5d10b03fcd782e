// Command pcapdump prints the RoCEv2 frames of a capture that softfabric
// recorded (SOFTFABRIC_DEBUG_PCAP, pcapng), one line each: its number, the
// interface (0: received, 1: sent), the time, and from the BTH and AETH
// the destination QPN, PSN, opcode, AckReq, payload length, whether its
// ICRC holds, and an acknowledge's syndrome and MSN. It is how the rxe
// retry bug in docs/interop.md was read:
//
//	go run ./test/interop/pcapdump capture.pcapng | grep 'qp=0x1b2 '
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/gopacket/pcapgo"

	"github.com/softfabric/softfabric/dataplane/wire"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pcapdump FILE.pcapng")
		os.Exit(2)
	}
	if err := dump(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pcapdump:", err)
		os.Exit(1)
	}
}

func dump(name string, out io.Writer) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapgo.NewNgReader(bufio.NewReader(f), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	defer w.Flush()
	for i := 1; ; i++ {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var p wire.Packet
		if err := p.Parse(data); err != nil {
			fmt.Fprintf(w, "%d if%d %s not RoCEv2 (%v), %d bytes\n", i, ci.InterfaceIndex, ci.Timestamp.Format("15:04:05.000000"), err, len(data))
			continue
		}
		b := p.BTH()
		aeth := ""
		if p.Info.Mask&wire.MaskAETH != 0 {
			a := p.AETH()
			aeth = fmt.Sprintf(" syn=%#x msn=%d", a.Syndrome(), a.MSN())
		}
		fmt.Fprintf(w, "%d if%d %s qp=%#x psn=%#x op=%v ackreq=%v len=%d icrc=%v%s\n", i, ci.InterfaceIndex,
			ci.Timestamp.Format("15:04:05.000000"), b.DestQP(), b.PSN(), b.Opcode(), b.AckReq(), len(p.Payload), p.CheckICRC(), aeth)
	}
}
