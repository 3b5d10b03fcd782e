package test

import (
	"os"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// TestCompareLargeMessages: `perf send --size 65536 --compare` on a plain
// veth gives three real results, bandwidth and latency. The UDP baseline
// used to send 64 KiB datagrams, as 45 IP fragments each: once a few had
// been lost, the incomplete datagrams filled the receiving namespace's
// reassembly memory (ipfrag_high_thresh) for ipfrag_time, every fragment
// after them was dropped, and the baseline printed a rate of 0.00. The
// server's namespace here has no reassembly memory at all, which makes
// that state certain; the baseline now sends datagrams that fit the MTU,
// so it does not care. Every result carries both sides' CPU time per KiB
// (per round trip for latency).
func TestCompareLargeMessages(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	upInProcess(t, p.A, p.B) // the raw baselines take the device's sockets
	if err := p.B.Do(func() error {
		for _, f := range []string{"ipfrag_low_thresh", "ipfrag_high_thresh"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/"+f, []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("turning IP reassembly off in the server's namespace: %v", err)
	}
	for _, lat := range []bool{false, true} {
		args := []string{"send", "--size", "65536", "--iters", "300", "--compare"}
		perKiB := "cpu_client_ns_per_kib"
		if lat {
			args = append(args, "--lat")
			perKiB = "cpu_client_ns_per_op"
		}
		rs := perfPair(t, p, []string{"send"}, args...)
		if len(rs) != 3 {
			t.Fatalf("lat=%v: %d results: %+v", lat, len(rs), rs)
		}
		for _, r := range rs {
			num := func(k string) float64 { v, _ := r[k].(float64); return v }
			if !lat && (num("msg_rate_mpps") <= 0 || num("bw_avg_gbps") <= 0 || num("received") <= 0) || lat && num("lat_median_us") <= 0 {
				t.Fatalf("lat=%v %s: %+v", lat, r["op"], r)
			}
			server := strings.Replace(perKiB, "client", "server", 1)
			if num(perKiB) <= 0 || num(server) <= 0 {
				t.Fatalf("lat=%v %s: no CPU figures: %+v", lat, r["op"], r)
			}
			if r["op"] == "udp" && num("bytes") != 65536 {
				t.Fatalf("udp baseline of %v-byte messages, want 65536", r["bytes"])
			}
		}
	}
}
