package fabric

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/fabric/internal/match"
)

// rdmPeers opens two RDM endpoints on in-process devices (manual
// progress) and connects a to b with one message.
func rdmPeers(tb testing.TB, addrA, addrB string) (a, b *Endpoint, ab Addr, ma *MR) {
	open := func(addr string) (*Endpoint, *CQ, *AV, *Domain) {
		infos, err := GetInfo(context.Background(), &Hints{Provider: ProviderMem, Node: addr, EPType: EPRDM,
			Domain: DomainAttr{Progress: ProgressManual}})
		if err != nil {
			tb.Fatal(err)
		}
		f, _ := OpenFabric(&infos[0])
		d, err := f.Domain(&infos[0])
		if err != nil {
			tb.Fatal(err)
		}
		cq, _ := d.CQ(4096)
		av, _ := d.AV(4)
		ep, _ := d.Endpoint(&infos[0])
		if err := ep.Bind(cq, 0); err != nil {
			tb.Fatal(err)
		}
		ep.Bind(av, 0)
		if err := ep.Enable(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { ep.Close(); av.Close(); cq.Close(); d.Close(); f.Close() })
		return ep, cq, av, d
	}
	a, cqa, ava, da := open(addrA)
	b, cqb, _, _ := open(addrB)
	ab, err := ava.Insert(b.Name())
	if err != nil {
		tb.Fatal(err)
	}
	ma, _ = da.RegisterMemory(make([]byte, 4096), 0)
	tb.Cleanup(func() { ma.Close() })
	if err := a.Send(ma.Bytes()[:8], ma.Desc(), ab, 1); err != nil {
		tb.Fatal(err)
	}
	var c [4]Completion
	for got := 0; got < 1; {
		got += cqa.Read(c[:])
		cqb.Read(c[:])
	}
	return a, b, ab, ma
}

// FuzzRDMReceive feeds arbitrary bytes to an RDM endpoint as if a peer had
// sent them on a connected queue pair: malformed headers, unknown kinds,
// atomics with any op, type, length, key and address. Nothing may panic,
// and the endpoint must go on working.
func FuzzRDMReceive(f *testing.F) {
	hdr := func(kind, flags, aop, adt, akind uint8, key uint32, n int) []byte {
		h := make([]byte, rdmHeader+2*n)
		h[0], h[1], h[2], h[3], h[4] = kind, flags, aop, adt, akind
		binary.LittleEndian.PutUint32(h[8:], key)
		binary.LittleEndian.PutUint32(h[48:], uint32(n))
		return h
	}
	f.Add(hdr(rdmMsg, 0, 0, 0, 0, 0, 10))
	f.Add(hdr(rdmTagged, rdmAckReq|rdmHasData, 0, 0, 0, 0, 0))
	f.Add(hdr(rdmAtomicReq, 0, 2, 9, 1, 0x12345, 8))
	f.Add(hdr(rdmAtomicReq, 0, 12, 7, 2, 0, 8))
	f.Add(hdr(rdmAtomicResp, 0, 0, 0, 0, 0, 0))
	f.Add(hdr(rdmDelivered, 0, 0, 0, 0, 0, 0))
	f.Add([]byte{1, 2, 3})
	a, b, ab, ma := rdmPeers(f, "198.19.251.1", "198.19.251.2")
	var qpn uint32
	for n := range b.rdm.byQPN {
		qpn = n
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > poolBuf {
			data = data[:poolBuf]
		}
		err := b.d.exec(b.w, func() error {
			// A pool buffer the SRQ has not handed out yet stands in for
			// the one the frame landed in.
			// Messages nobody receives (fuzzed ones, and the checks
			// below) hold pool buffers: drop them, as a receiver would
			// consume them, so that the pool never runs dry.
			drain := func() {
				for _, q := range []*match.Queue{b.rdm.tagged, b.rdm.untagged} {
					q.Flush(nil, b.releaseBuf)
				}
			}
			drain()
			defer drain()
			slot := b.rdm.srq.Peek()
			idx := int(slot.ID)
			b.rdm.srq.Pop()
			copy(b.poolBuf(idx), data)
			b.rdm.rcRQ.Push(&verbs.Completion{WRID: uint64(idx), QPN: qpn, Opcode: verbs.CompRecv, ByteLen: uint32(len(data))})
			b.rdmReapRx()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The connection still carries messages.
		if err := a.Send(ma.Bytes()[:8], ma.Desc(), ab, 2); err != nil {
			t.Fatal(err)
		}
		var c [16]Completion
		for i := 0; ; i++ {
			if n := a.txCQ.Read(c[:]); n > 0 {
				if err := c[0].Err(); err != nil {
					t.Fatalf("a send after the fuzzed frame: %v", err)
				}
				break
			}
			b.rxCQ.Read(c[:])
			if i > 1e7 {
				t.Fatal("a send after the fuzzed frame never completed")
			}
		}
	})
}
