package test

import (
	"testing"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// TestCompareLargeMessages: `perf send --size 65536 --compare` on a plain
// veth gives three real results. The UDP baseline used to send 64 KiB
// datagrams, whose IP fragments the receiver dropped wholesale, and
// printed a rate of 0.00; it now sends each message as datagrams that fit
// the MTU. Every result carries both sides' CPU time per KiB.
func TestCompareLargeMessages(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	rs := perfPair(t, p, []string{"send"}, "send", "--size", "65536", "--iters", "300", "--compare")
	if len(rs) != 3 {
		t.Fatalf("%d results: %+v", len(rs), rs)
	}
	for _, r := range rs {
		num := func(k string) float64 { v, _ := r[k].(float64); return v }
		if num("msg_rate_mpps") <= 0 || num("bw_avg_gbps") <= 0 || num("received") <= 0 {
			t.Fatalf("%s: %+v", r["op"], r)
		}
		if num("cpu_client_ns_per_kib") <= 0 || num("cpu_server_ns_per_kib") <= 0 {
			t.Fatalf("%s: no CPU per KiB: %+v", r["op"], r)
		}
		if r["op"] == "udp" && num("bytes") != 65536 {
			t.Fatalf("udp baseline of %v-byte messages, want 65536", r["bytes"])
		}
	}
}
