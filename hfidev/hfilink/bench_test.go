package hfilink_test

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/hfilink"
)

// streamWith is a transporttest stream of op between two engine nodes:
// over a memlink pair (chip 0) or over links on two modeled units of chip
// configured as lc (ExpectedMin, Header16B…).
func streamWith(tb testing.TB, chip abi.Chip, lc hfilink.Config, op verbs.Opcode, size, mtu int) *transporttest.Stream {
	var p *transporttest.Pair
	if chip == 0 {
		p = transporttest.NewPair(memlink.Config{Capacity: 1 << 14})
	} else {
		m := newLinks(tb, hfidevice.PairConfig{Chip: chip, Link: lc})
		p = transporttest.NewLinkPair(m.Links[0][0], m.Links[1][0])
		if p.A.IP.As16() != gids4[0].As16() || p.B.IP.As16() != gids4[1].As16() {
			tb.Fatalf("hosts %v, %v; table %v", p.A.IP, p.B.IP, gids4)
		}
	}
	return transporttest.NewStream(tb, p, transporttest.RCOptions{}, op, size, mtu, 128)
}

var streams = []struct {
	name      string
	op        verbs.Opcode
	size, mtu int
}{
	{"Send64", verbs.OpSend, 64, 1024},
	{"Write64", verbs.OpWrite, 64, 1024},
	{"Write4K", verbs.OpWrite, 4096, 4096},
	{"Write64K", verbs.OpWrite, 64 << 10, 4096},
	{"Read64", verbs.OpRead, 64, 1024},
	{"Read64K", verbs.OpRead, 64 << 10, 4096},
	{"FetchAdd", verbs.OpFetchAdd, 8, 1024},
}

// BenchmarkTransport is the engine's transport over the model next to the
// same over memlink: both ends on one goroutine, every frame built,
// carried, parsed, ICRC-checked and executed; over the model each frame
// also becomes a 9B (JKR-16B: 16B) packet, goes by PIO or SDMA through the modeled chip's
// send context, wire and receive context (RcvHdrQ, eager buffers), and is
// rebuilt. ns/pkt counts every frame either side sent. Large reads and
// writes have their payload placed by TID (expected.go); the -eager rows
// are the same links with that turned off.
func BenchmarkTransport(b *testing.B) {
	for _, s := range streams {
		for _, link := range []struct {
			name string
			chip abi.Chip
			cfg  hfilink.Config
		}{{"memlink", 0, hfilink.Config{}}, {"WFR", abi.ChipWFR, hfilink.Config{}},
			{"WFR-eager", abi.ChipWFR, hfilink.Config{ExpectedMin: -1}}, {"JKR", abi.ChipJKR, hfilink.Config{}},
			{"JKR-16B", abi.ChipJKR, hfilink.Config{Header16B: true}}} {
			if link.cfg.ExpectedMin < 0 && s.size < hfilink.DefaultExpectedMin {
				continue
			}
			b.Run(s.name+"/"+link.name, func(b *testing.B) {
				streamWith(b, link.chip, link.cfg, s.op, s.size, s.mtu).Bench(b, s.size)
			})
		}
	}
}

// The whole transport over the model allocates nothing per request, as
// over memlink (engine.TestSteadyStateNoAllocs), on both chips and with
// 16B packets on JKR.
func TestStreamAllocs(t *testing.T) {
	for _, c := range []struct {
		name string
		chip abi.Chip
		cfg  hfilink.Config
	}{{"WFR", abi.ChipWFR, hfilink.Config{}}, {"JKR", abi.ChipJKR, hfilink.Config{}},
		{"JKR-16B", abi.ChipJKR, hfilink.Config{Header16B: true}}} {
		t.Run(c.name, func(t *testing.T) {
			for _, s := range streams {
				st := streamWith(t, c.chip, c.cfg, s.op, s.size, s.mtu)
				st.Run(t, 500)
				if a := testing.AllocsPerRun(10, func() { st.Run(t, 100) }); a != 0 {
					t.Errorf("%s: %.1f allocations per 100 requests", s.name, a)
				}
			}
		})
	}
}
