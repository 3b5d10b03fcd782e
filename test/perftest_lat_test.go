package test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// ptLatRow is a row of perftest's latency table: #bytes, #iterations and
// the seven figures.
var ptLatRow = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)

// TestPerftestLatCLI: `softfabric perf OP --lat --perftest-server` and
// `--lat --perftest` between two namespaces, as a user runs them against
// each other (each speaking perftest's exchange of ib_OP_lat), on the
// plain set-up; both print perftest's latency table, but a read or atomic
// server, which prints none (as ib_read_lat's).
func TestPerftestLatCLI(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	for _, op := range []string{"send", "write", "read", "atomic"} {
		t.Run(op, func(t *testing.T) {
			sout, serr, done := startServer(t, p.B, "perf", op, "--lat", "--perftest-server", "--iface", p.B.Iface, "--port", "18601", "--iters", "300", "--timeout", "60s")
			for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			c := sf(p.A, "perf", op, "--lat", "--perftest", p.B.Addr.Addr().String(), "--iface", p.A.Iface, "--port", "18601", "--iters", "300", "--timeout", "60s")
			code := -1
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the server did not finish; client %+v; server %s%s", c, sout.String(), serr.String())
			}
			if c.code != 0 || code != 0 {
				t.Fatalf("client %+v; server (%d) %s%s", c, code, sout.String(), serr.String())
			}
			size := "2"
			if op == "atomic" {
				size = "8"
			}
			check := func(who, out string) {
				m := ptLatRow.FindStringSubmatch(out)
				if m == nil || m[1] != size || m[2] != "300" || !strings.Contains(out, "Latency Test") {
					t.Fatalf("%s printed no latency row of %s bytes × 300: %q", who, size, out)
				}
				t.Logf("%s: t_typical %s usec", who, m[5])
			}
			check("client", c.out)
			if op == "read" || op == "atomic" {
				if !strings.Contains(serr.String(), "prints no table") || sout.String() != "" {
					t.Fatalf("%s server: %q %q", op, sout.String(), serr.String())
				}
				return
			}
			check("server", sout.String())
		})
	}
}
