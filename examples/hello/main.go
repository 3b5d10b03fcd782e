// Command hello sends one message over RDMA between two hosts where
// `softfabric up` ran: `hello MY_ADDR` receives, `hello MY_ADDR PEER_ADDR`
// sends.
package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"

	"github.com/softfabric/softfabric/fabric"
)

func main() {
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{Node: os.Args[1], EPType: fabric.EPRDM, Service: 7471})
	if err != nil {
		log.Fatal(err)
	}
	fab, _ := fabric.OpenFabric(&infos[0])
	dom, _ := fab.Domain(&infos[0])
	cq, _ := dom.CQ(1024)
	av, _ := dom.AV(1)
	ep, _ := dom.Endpoint(&infos[0])
	ep.Bind(cq, 0)
	ep.Bind(av, 0)
	ep.Enable()
	buf := make([]byte, 64)
	mr, _ := dom.RegisterMemory(buf, 0)
	if len(os.Args) > 2 {
		peer, _ := av.InsertService(netip.MustParseAddr(os.Args[2]), 7471)
		ep.Send(buf[:copy(buf, "hello over RDMA")], mr.Desc(), peer, 0)
	} else {
		ep.Recv(buf, mr.Desc(), fabric.AddrUnspec, 0)
	}
	c := make([]fabric.Completion, 1)
	if _, err := cq.ReadContext(context.Background(), c); err != nil || c[0].Err() != nil {
		log.Fatal(err, c[0].Err())
	}
	fmt.Printf("%v %q\n", c[0].Flags, c[0].Buf)
}
