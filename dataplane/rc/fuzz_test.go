package rc_test

import (
	"encoding/binary"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// FuzzReceive feeds a connected queue pair packets with arbitrary opcodes,
// flags, PSNs, extension headers and payloads, valid on the wire (the
// ICRC is right), as a hostile or broken peer would send them. Neither end
// may panic, the responder must stay usable or move to ERR, and a request
// the requester then makes must complete, one way or the other.
func FuzzReceive(f *testing.F) {
	f.Add(byte(wire.RCWriteOnly), byte(0x80), int16(0), byte(1), []byte("0123456789abcdef0123456789abcdef-payload"))
	f.Add(byte(wire.RCSendFirst), byte(0x80), int16(0), byte(0), make([]byte, 1024+40))
	f.Add(byte(wire.RCReadRequest), byte(0x80), int16(-1), byte(1), make([]byte, 16))
	f.Add(byte(wire.RCFetchAdd), byte(0x00), int16(0), byte(1), make([]byte, 28))
	f.Add(byte(wire.RCAcknowledge), byte(0x00), int16(3), byte(0), []byte{0x60, 0, 0, 1})
	f.Add(byte(wire.RCReadResponseOnly), byte(0x00), int16(0), byte(0), make([]byte, 100))
	f.Add(byte(wire.RCCompareSwap), byte(0x80), int16(5), byte(1), make([]byte, 28))
	f.Add(byte(wire.UDSendOnly), byte(0x80), int16(0), byte(0), make([]byte, 20))
	f.Fuzz(func(t *testing.T, opcode, flags byte, delta int16, keys byte, rest []byte) {
		if len(rest) > 5000 {
			return
		}
		p := transporttest.NewPair(memlink.Config{})
		qa, qb, err := p.ConnectRC(transporttest.RCOptions{MTU: 1024, PSNA: 0xfffff0, PSNB: 100})
		if err != nil {
			t.Fatal(err)
		}
		ma, _ := p.A.Buffer(1<<14, all)
		mb, _ := p.B.Buffer(1<<14, all)
		if err := qb.PostRecv(&verbs.RecvWR{ID: 1, SGL: sge(mb, 0, 4096)}); err != nil {
			t.Fatal(err)
		}
		target := qb
		if flags&1 != 0 {
			target = qa // aim at the requester side instead
		}
		op := wire.Opcode(opcode)
		info := op.Info()
		hl := 14 + 20 + 8
		frame := make([]byte, hl+wire.BTHSize+len(rest)+3+wire.ICRCSize)
		pad := -(len(rest) - (info.HeaderLen - wire.BTHSize)) & 3
		if len(rest) < info.HeaderLen-wire.BTHSize {
			pad = 0
		}
		frame = frame[:hl+wire.BTHSize+len(rest)+pad+wire.ICRCSize]
		ps := uint32(int32(100)+int32(delta)) & 0xffffff
		if target == qa {
			ps = uint32(0xfffff0+int32(delta)) & 0xffffff
		}
		wire.BTH(frame[hl:]).Encode(&wire.BTHFields{Opcode: op, AckReq: flags&0x80 != 0, Solicited: flags&0x40 != 0, PadCount: uint8(pad), PKey: wire.DefaultPKey, DestQP: target.QPN(), PSN: ps})
		body := frame[hl+wire.BTHSize:]
		copy(body, rest)
		// Point some remote keys at real memory so execution paths run.
		if keys&1 != 0 {
			if info.RETH != 0 && len(body) >= info.RETH-wire.BTHSize+16 {
				o := info.RETH - wire.BTHSize
				binary.BigEndian.PutUint64(body[o:], mb.Addr()+uint64(binary.BigEndian.Uint16(body[o+6:])%8192))
				binary.BigEndian.PutUint32(body[o+8:], mb.RKey())
			}
			if info.AtomicETH != 0 && len(body) >= info.AtomicETH-wire.BTHSize+12 {
				o := info.AtomicETH - wire.BTHSize
				binary.BigEndian.PutUint64(body[o:], mb.Addr()+uint64(body[o+7]%64))
				binary.BigEndian.PutUint32(body[o+8:], mb.RKey())
			}
		}
		path, _ := wire.NewPath(wire.PathFields{SrcMAC: p.A.MAC, DstMAC: p.B.MAC, Src: p.A.IP, Dst: p.B.IP})
		path.Finish(frame)
		sender := p.A.Link
		if target == qa {
			sender = p.B.Link
		}
		if _, err := sender.Send([][]byte{frame}); err != nil {
			return // too big for the link: nothing to test
		}
		for i := 0; i < 50 && p.Step(); i++ {
		}
		if s := target.State(); s != verbs.StateRTS && s != verbs.StateErr {
			t.Fatalf("state %v after a hostile packet", s)
		}
		// The connection still answers: a write completes, successfully
		// or with an error, and never hangs.
		if err := qa.PostSend(&verbs.SendWR{ID: 9, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(ma, 0, 64), RemoteAddr: mb.Addr() + 9000, RKey: mb.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := p.RunUntil(func() bool { return p.A.SendCQ.Len() > 0 }, 200000); err != nil {
			t.Fatalf("request after a hostile packet never completed: %v", err)
		}
	})
}
