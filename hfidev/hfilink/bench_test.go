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

// streamOver is a transporttest stream of op between two engine nodes: over
// a memlink pair (chip 0) or over links on two modeled units of chip
// (expectedMin: hfilink.Config.ExpectedMin).
func streamOver(tb testing.TB, chip abi.Chip, expectedMin int, op verbs.Opcode, size, mtu int) *transporttest.Stream {
	var p *transporttest.Pair
	if chip == 0 {
		p = transporttest.NewPair(memlink.Config{Capacity: 1 << 14})
	} else {
		m := newLinks(tb, hfidevice.PairConfig{Chip: chip, Link: hfilink.Config{ExpectedMin: expectedMin}})
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
// also becomes a 9B packet, goes by PIO or SDMA through the modeled chip's
// send context, wire and receive context (RcvHdrQ, eager buffers), and is
// rebuilt. ns/pkt counts every frame either side sent. Large reads and
// writes have their payload placed by TID (expected.go); the -eager rows
// are the same links with that turned off.
func BenchmarkTransport(b *testing.B) {
	for _, s := range streams {
		for _, link := range []struct {
			name        string
			chip        abi.Chip
			expectedMin int
		}{{"memlink", 0, 0}, {"WFR", abi.ChipWFR, 0}, {"WFR-eager", abi.ChipWFR, -1}, {"JKR", abi.ChipJKR, 0}} {
			if link.expectedMin < 0 && s.size < hfilink.DefaultExpectedMin {
				continue
			}
			b.Run(s.name+"/"+link.name, func(b *testing.B) {
				streamOver(b, link.chip, link.expectedMin, s.op, s.size, s.mtu).Bench(b, s.size)
			})
		}
	}
}

// The whole transport over the model allocates nothing per request, as
// over memlink (engine.TestSteadyStateNoAllocs).
func TestStreamAllocs(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, s := range streams {
			st := streamOver(t, chip, 0, s.op, s.size, s.mtu)
			st.Run(t, 500)
			if a := testing.AllocsPerRun(10, func() { st.Run(t, 100) }); a != 0 {
				t.Errorf("%s: %.1f allocations per 100 requests", s.name, a)
			}
		}
	})
}
