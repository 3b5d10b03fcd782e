package fabric_test

import (
	"bytes"
	"testing"

	"github.com/softfabric/softfabric/fabric"
)

// TestRMAEventCounters: a MSG endpoint's FlagRemoteWrite and
// FlagRemoteRead counters (CapRMAEvent) count the RDMA writes and reads
// its peer made into its memory, each once, and a count seen means the
// write's bytes are there (what ib_write_lat's polling needs).
func TestRMAEventCounters(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		ch := newHostHints(t, hostOpts{typ: fabric.EPMsg, progress: p}, func(h *fabric.Hints) { h.Caps |= fabric.CapRMA | fabric.CapRMAEvent })
		sh := newHostHints(t, hostOpts{typ: fabric.EPMsg, progress: p}, func(h *fabric.Hints) { h.Caps |= fabric.CapRMA | fabric.CapRMAEvent })
		if sh.info.Caps&fabric.CapRMAEvent == 0 {
			t.Fatalf("offer without CapRMAEvent: %v", sh.info.Caps)
		}
		wrote, read := sh.counter(), sh.counter()
		open := func(info *fabric.Info) *fabric.Endpoint {
			ep := sh.rawEP(info)
			must(t, ep.Bind(sh.cq, 0))
			must(t, ep.Bind(sh.eq, 0))
			must(t, ep.Bind(wrote, fabric.FlagRemoteWrite))
			must(t, ep.Bind(read, fabric.FlagRemoteRead))
			must(t, ep.Enable())
			return ep
		}
		a, _ := connectVia(t, ch, sh, listen(t, sh), open)
		target, err := sh.dom.RegisterMemory(make([]byte, 8192), fabric.AccessRemoteWrite|fabric.AccessRemoteRead)
		must(t, err)
		defer target.Close()
		src := ch.mr(8192)
		const n = 20
		for i := 1; i <= n; i++ {
			size := i * 300
			pattern(src.Bytes()[:size], i)
			retry(t, ch.cq, func() error {
				return a.Write(src.Bytes()[:size], src.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), uint64(i))
			})
			waitOK(t, ch.cq)
			waitCount(t, wrote, uint64(i))
			if !bytes.Equal(target.Bytes()[:size], src.Bytes()[:size]) {
				t.Fatalf("write %d counted before its bytes were placed", i)
			}
		}
		for i := 0; i < 3; i++ {
			retry(t, ch.cq, func() error {
				return a.Read(src.Bytes()[:4096], src.Desc(), fabric.AddrUnspec, target.Addr(), target.Key(), 0)
			})
			waitOK(t, ch.cq)
		}
		waitCount(t, read, 3)
		if w, r := wrote.Read(), read.Read(); w != n || r != 3 {
			t.Fatalf("remote writes %d, reads %d; want %d, 3", w, r, n)
		}
	})
}
