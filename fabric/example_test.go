package fabric_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// side opens a domain, a CQ and an EQ on the in-process device at addr.
func side(addr string, typ fabric.EPType) (*fabric.Info, *fabric.Fabric, *fabric.Domain, *fabric.CQ, *fabric.EQ) {
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{Provider: fabric.ProviderMem, Node: addr, EPType: typ})
	if err != nil {
		log.Fatal(err)
	}
	info := &infos[0]
	fab, err := fabric.OpenFabric(info)
	if err != nil {
		log.Fatal(err)
	}
	dom, err := fab.Domain(info)
	if err != nil {
		log.Fatal(err)
	}
	cq, err := dom.CQ(1024)
	if err != nil {
		log.Fatal(err)
	}
	eq, err := fab.EQ(8)
	if err != nil {
		log.Fatal(err)
	}
	return info, fab, dom, cq, eq
}

// next waits for one completion and fails on an error.
func next(cq *fabric.CQ) fabric.Completion {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c [1]fabric.Completion
	if _, err := cq.ReadContext(ctx, c[:]); err != nil {
		log.Fatal(err)
	}
	if err := c[0].Err(); err != nil {
		log.Fatal(err)
	}
	return c[0]
}

// A connected (MSG) ping-pong: the server listens, the client connects,
// and a message goes back and forth.
func Example_msgPingPong() {
	sInfo, sFab, sDom, sCQ, sEQ := side("198.18.200.1", fabric.EPMsg)
	cInfo, _, cDom, cCQ, _ := side("198.18.200.2", fabric.EPMsg)

	pep, _ := sFab.PassiveEndpoint(sInfo)
	pep.Bind(sEQ)
	pep.Listen()

	client, _ := cDom.Endpoint(cInfo)
	client.Bind(cCQ, 0)
	client.Enable()
	go client.Connect(context.Background(), pep.Addr(), nil)

	ev, _ := sEQ.Read(context.Background()) // EventConnReq
	server, _ := sDom.Endpoint(ev.Info)
	server.Bind(sCQ, 0)
	server.Bind(sEQ, 0)
	server.Enable()
	if err := server.Accept(context.Background(), nil); err != nil {
		log.Fatal(err)
	}
	for ev.Kind != fabric.EventConnected {
		ev, _ = sEQ.Read(context.Background())
	}

	cBuf, sBuf := make([]byte, 64), make([]byte, 64)
	cMR, _ := cDom.RegisterMemory(cBuf, 0)
	sMR, _ := sDom.RegisterMemory(sBuf, 0)
	for round := 0; round < 3; round++ {
		server.Recv(sBuf, sMR.Desc(), fabric.AddrUnspec, 1)
		client.Recv(cBuf, cMR.Desc(), fabric.AddrUnspec, 2)
		n := copy(cBuf, fmt.Sprintf("ping %d", round))
		for client.Send(cBuf[:n], cMR.Desc(), fabric.AddrUnspec, 3) != nil {
		}
		next(cCQ) // the send
		got := next(sCQ)
		fmt.Printf("server got %q\n", got.Buf)
		n = copy(sBuf, "pong")
		server.Send(sBuf[:n], sMR.Desc(), fabric.AddrUnspec, 4)
		next(sCQ)
		fmt.Printf("client got %q\n", next(cCQ).Buf)
	}
	client.Close()
	server.Close()
	// Output:
	// server got "ping 0"
	// client got "pong"
	// server got "ping 1"
	// client got "pong"
	// server got "ping 2"
	// client got "pong"
}

// An RMA write with remote CQ data on RDM endpoints: the target learns,
// through its CQ, that the data is in its memory.
func Example_rmaWriteData() {
	aInfo, _, aDom, aCQ, _ := side("198.18.200.3", fabric.EPRDM)
	bInfo, _, bDom, bCQ, _ := side("198.18.200.4", fabric.EPRDM)
	aAV, _ := aDom.AV(4)
	bAV, _ := bDom.AV(4)
	open := func(d *fabric.Domain, info *fabric.Info, cq *fabric.CQ, av *fabric.AV) *fabric.Endpoint {
		ep, _ := d.Endpoint(info)
		ep.Bind(cq, 0)
		ep.Bind(av, 0)
		if err := ep.Enable(); err != nil {
			log.Fatal(err)
		}
		return ep
	}
	a, b := open(aDom, aInfo, aCQ, aAV), open(bDom, bInfo, bCQ, bAV)
	toB, _ := aAV.Insert(b.Name())
	bAV.Insert(a.Name())

	target, _ := bDom.RegisterMemory(make([]byte, 4096), fabric.AccessRemoteWrite)
	src, _ := aDom.RegisterMemory([]byte("written remotely"), 0)
	// The target's key and address travel to the writer out of band.
	key, addr := target.Key(), target.Addr()+100

	if err := a.WriteData(src.Bytes(), src.Desc(), 42, toB, addr, key, 7); err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer: done, context", next(aCQ).Context)
	c := next(bCQ)
	fmt.Printf("target: %v data %d: %q\n", c.Flags, c.Data, target.Bytes()[100:100+c.Len])
	// Output:
	// writer: done, context 7
	// target: rma|remote_write|remote_cq_data data 42: "written remotely"
}

// Tagged messages on RDM endpoints: receives pick messages by tag, in any
// order, and a message that arrives first waits for its receive.
func Example_taggedRDM() {
	aInfo, _, aDom, aCQ, _ := side("198.18.200.5", fabric.EPRDM)
	bInfo, _, bDom, bCQ, _ := side("198.18.200.6", fabric.EPRDM)
	aAV, _ := aDom.AV(4)
	bAV, _ := bDom.AV(4)
	a, _ := aDom.Endpoint(aInfo)
	a.Bind(aCQ, 0)
	a.Bind(aAV, 0)
	a.Enable()
	b, _ := bDom.Endpoint(bInfo)
	b.Bind(bCQ, 0)
	b.Bind(bAV, 0)
	b.Enable()
	toB, _ := aAV.Insert(b.Name())

	msgs, _ := aDom.RegisterMemory([]byte("firstsecond"), 0)
	a.TSend(msgs.Bytes()[:5], msgs.Desc(), toB, 1, 0) // tag 1
	a.TSend(msgs.Bytes()[5:], msgs.Desc(), toB, 2, 0) // tag 2
	next(aCQ)
	next(aCQ)

	buf := make([]byte, 64)
	mr, _ := bDom.RegisterMemory(buf, 0)
	b.TRecv(buf[:32], mr.Desc(), fabric.AddrUnspec, 2, 0, 20) // tag 2 first
	c := next(bCQ)
	fmt.Printf("tag %d: %q\n", c.Tag, c.Buf)
	b.TRecv(buf[32:], mr.Desc(), fabric.AddrUnspec, 0, ^uint64(0), 21) // any tag
	c = next(bCQ)
	fmt.Printf("tag %d: %q\n", c.Tag, c.Buf)
	// Output:
	// tag 2: "second"
	// tag 1: "first"
}
