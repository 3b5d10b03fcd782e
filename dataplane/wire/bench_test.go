package wire

import "testing"

func benchFrame(tb testing.TB, op Opcode, n int) ([]byte, Path) {
	p := mustPath(tb, v4Path())
	m := message{BTH: BTHFields{Opcode: op, DestQP: 0x42, PSN: 9, PKey: DefaultPKey}, Payload: payload(n)}
	return build(tb, &p, &m), p
}

func TestZeroAllocs(t *testing.T) {
	frame, path := benchFrame(t, RCWriteFirst, 1024)
	var p Packet
	for name, fn := range map[string]func(){
		"Parse": func() {
			if p.Parse(frame) != nil {
				t.Fatal("Parse failed")
			}
		},
		"Finish":      func() { path.Finish(frame) },
		"ComputeICRC": func() { ComputeICRC(frame[EthernetSize : len(frame)-ICRCSize]) },
		"CheckICRC": func() {
			if !p.CheckICRC() {
				t.Fatal("bad ICRC")
			}
		},
		"accessors": func() {
			b := p.BTH()
			_ = uint32(b.Opcode()) + b.PSN() + b.DestQP() + uint32(b.PKey())
			b.SetPSN(b.PSN())
			b.SetAckReq(true)
			r := p.RETH()
			_ = r.VA() + uint64(r.RKey()+r.DMALen())
			_, _, _ = p.Src(), p.Dst(), p.SrcPort()
			_ = p.IPv4Header().SourceAddress()
			_ = p.Ethernet().Dst()
			_ = p.Opcode.String() + Opcode(0xff).String()
		},
		"NewPath": func() {
			if _, err := NewPath(v4Path()); err != nil {
				t.Fatal(err)
			}
		},
	} {
		if err := p.Parse(frame); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per run", name, n)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	frame, _ := benchFrame(b, RCWriteFirst, 1024)
	var p Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Parse(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCheckICRC(b *testing.B) {
	frame, _ := benchFrame(b, RCWriteFirst, 1024)
	var p Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Parse(frame); err != nil || !p.CheckICRC() {
			b.Fatal(err)
		}
	}
}

func benchFinish(b *testing.B, n int) {
	frame, path := benchFrame(b, RCSendOnly, n)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		path.Finish(frame)
	}
}

func BenchmarkFinish64(b *testing.B)   { benchFinish(b, 64) }
func BenchmarkFinish4096(b *testing.B) { benchFinish(b, 4096) }

func benchICRC(b *testing.B, n int) {
	frame, _ := benchFrame(b, RCSendOnly, n)
	ip := frame[EthernetSize : len(frame)-ICRCSize]
	b.SetBytes(int64(len(ip)))
	b.ReportAllocs()
	for b.Loop() {
		ComputeICRC(ip)
	}
}

func BenchmarkICRC64(b *testing.B)   { benchICRC(b, 64) }
func BenchmarkICRC1024(b *testing.B) { benchICRC(b, 1024) }
func BenchmarkICRC4096(b *testing.B) { benchICRC(b, 4096) }
