package rxereplay

import (
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/internal/pcapfix"
	"github.com/softfabric/softfabric/dataplane/wire"
)

func TestZZScratch(t *testing.T) {
	for _, name := range []string{"rdmacm-rping-sf-client.pcapng", "rdmacm-rping-rxe-client.pcapng"} {
		c := load(t, name)
		fmt.Println("==", name, c.sfMAC, c.rxeMAC)
		for _, f := range c.frames {
			fmt.Printf("%3d %10.6f %v sport %d\n", f.i, float64(f.t-t0)/1e9, f, f.p.SrcPort())
			if f.p.BTH().DestQP() == 1 {
				m, err := mad.ParseCM(f.p.Payload)
				fmt.Println("   ", m.AttributeID(), err, fmt.Sprintf("tid %#x", m.TransactionID()))
				fmt.Println(hex.Dump(f.p.Payload))
			}
		}
	}
	raw, err := pcapfix.ReadFrames("../fixtures/rxe/rdmacm-req.pcap")
	fmt.Println(len(raw), err)
	for i, r := range raw {
		var p wire.Packet
		err := p.Parse(r.Data)
		fmt.Println(i, r.Time, err, describe(&p), hex.EncodeToString(r.Data[:14]))
		if i == 0 { fmt.Println(hex.Dump(p.Payload)) }
	}
}
