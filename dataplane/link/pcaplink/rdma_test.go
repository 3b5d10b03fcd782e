package pcaplink_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// TestRDMAWriteCapture records node A of two engine nodes on a memlink while
// it makes RDMA writes to B: the capture holds A's requests (out) and B's
// acknowledgements (in), every one a RoCEv2 frame to UDP port 4791 that
// gopacket decodes and our parser accepts with a good ICRC, and the
// requests' payloads, in order, are the data written.
func TestRDMAWriteCapture(t *testing.T) {
	p := transporttest.NewPair(memlink.Config{})
	var out bytes.Buffer
	c, err := pcaplink.Wrap(p.A.Link, &out, pcaplink.Options{Format: pcaplink.PcapNG, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p.A.Filter.Link = c.Link() // between A's node and its end of the memlink
	start := time.Now()
	qa, qb, err := p.ConnectRC(transporttest.RCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 1024, 3000, 100}
	total := 0
	for _, n := range sizes {
		total += n
	}
	const access = mr.LocalWrite | mr.RemoteWrite
	src, err := p.A.Buffer(total, access)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := p.B.Buffer(total, access)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*13 + 5)
	}
	off := 0
	for i, n := range sizes {
		wr := verbs.SendWR{
			ID: uint64(i), Op: verbs.OpWrite, Flags: verbs.Signaled,
			SGL:        []mr.SGE{transporttest.SGE(src, off, n)},
			RemoteAddr: dst.Addr() + uint64(off), RKey: dst.RKey(),
		}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	done := 0
	comps := make([]verbs.Completion, 8)
	err = p.RunUntil(func() bool {
		n := p.A.SendCQ.Poll(comps)
		for _, c := range comps[:n] {
			if c.Status != verbs.Success {
				t.Fatalf("completion %+v", c)
			}
		}
		done += n
		return done == len(sizes)
	}, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differ")
	}
	end := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := pcapgo.NewNgReader(bytes.NewReader(out.Bytes()), pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	var (
		pkt      wire.Packet
		payload  []byte
		requests int
		acks     int
		last     time.Time
	)
	for i := 0; ; i++ {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ci.Timestamp.Before(start) || ci.Timestamp.After(end) || ci.Timestamp.Before(last) {
			t.Fatalf("frame %d: timestamp %v outside [%v, %v] or before the last, %v", i, ci.Timestamp, start, end, last)
		}
		last = ci.Timestamp
		if ci.CaptureLength != len(data) || ci.Length != len(data) {
			t.Fatalf("frame %d: lengths %d, %d, %d", i, ci.CaptureLength, ci.Length, len(data))
		}
		gp := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		udp, ok := gp.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok || udp.DstPort != wire.UDPPort {
			t.Fatalf("frame %d: not RoCEv2: %v", i, gp)
		}
		if err := pkt.Parse(data); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !pkt.CheckICRC() {
			t.Fatalf("frame %d: bad ICRC", i)
		}
		op := pkt.Opcode
		switch ci.InterfaceIndex {
		case 1: // out: A's write requests
			requests++
			if pkt.BTH().DestQP() != qb.QPN() {
				t.Fatalf("request %d to QP %d, want %d", i, pkt.BTH().DestQP(), qb.QPN())
			}
			switch op {
			case wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly:
			default:
				t.Fatalf("frame %d sent: opcode %v", i, op)
			}
			payload = append(payload, pkt.Payload...)
		case 0: // in: B's acknowledgements
			acks++
			if op != wire.RCAcknowledge || pkt.BTH().DestQP() != qa.QPN() {
				t.Fatalf("frame %d received: %v to QP %d", i, op, pkt.BTH().DestQP())
			}
		default:
			t.Fatalf("frame %d: interface %d", i, ci.InterfaceIndex)
		}
	}
	// 1, 1024, 3000 (three packets at the 1024-byte MTU) and 100 bytes.
	if requests != 6 || acks == 0 || !bytes.Equal(payload, src.Bytes()) {
		t.Fatalf("%d requests, %d acks, %d bytes of payload (want 6 requests and the %d bytes written)", requests, acks, len(payload), total)
	}
	s, ns := c.Stats(), p.A.Node.Stats()
	if s.Out != ns.TxFrames || s.In != ns.RxFrames || s.Recorded != uint64(requests+acks) {
		t.Fatalf("capture %+v, node %+v, %d frames read", s, ns, requests+acks)
	}
}
