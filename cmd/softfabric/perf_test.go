package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestPerftestFlags: the perftest modes' command lines are checked before
// any device is opened.
func TestPerftestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"atomic", "--perftest-server", "--all"}, "no -a"},
		{[]string{"atomic", "--perftest", "h", "--size", "16"}, "8 bytes"},
		{[]string{"write", "--perftest", "h", "--atomic-type", "CMP_AND_SWAP"}, "--atomic-type is for atomic"},
		{[]string{"atomic", "--perftest-server", "--atomic-type", "SWAP"}, "want FETCH_AND_ADD or CMP_AND_SWAP"},
		{[]string{"write", "--all"}, "--all is for --perftest and --perftest-server"},
		{[]string{"write", "--rdma-cm"}, "--rdma-cm is for --perftest and --perftest-server"},
		{[]string{"write", "--rdma-cm", "h"}, "--rdma-cm is for --perftest and --perftest-server"},
		{[]string{"write", "--perftest-server", "h"}, "takes no server address"},
		{[]string{"write", "--perftest-server", "--perftest", "h"}, "choose one"},
		{[]string{"udp", "--perftest-server"}, "runs write, read, send or atomic"},
		{[]string{"write", "--perftest-server", "--compare"}, "no --compare"},
		{[]string{"write", "--perftest-server", "--lat", "--rdma-cm"}, "no --rdma-cm"},
		{[]string{"send", "--perftest", "h", "--lat", "--qps", "2"}, "one queue pair"},
		{[]string{"read", "--perftest", "h", "--lat", "--duration", "1s"}, "no --duration"},
		{[]string{"atomic", "--perftest", "h", "--lat", "--all"}, "no -a"},
		{[]string{"write", "--perftest-server", "--duration", "1s"}, "no --duration"},
		{[]string{"send", "--perftest", "h", "--duration", "1s"}, "--duration is for write, read and atomic"},
		{[]string{"write", "--perftest", "h", "--all", "--size", "64"}, "no --size"},
		{[]string{"write", "--perftest", "h", "--iters", "4"}, "at least 5"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"perf"}, tc.args...)
		args = append(args, "--iface", "sfnone0")
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.err) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", args, code, errOut.String(), tc.err)
		}
	}
}

func TestPerftestConfigFromFlags(t *testing.T) {
	o := perfOpts{size: 65536, iters: 0, qps: 4, all: true, atomic: "cmp_and_swap"}
	if cfg := perftestConfig("write", o); cfg.Size != 0 || !cfg.All || cfg.QPs != 4 || !cfg.CmpSwap {
		t.Fatalf("%+v", cfg)
	}
	o.all = false
	if cfg := perftestConfig("atomic", o); cfg.Size != 0 || cfg.All {
		t.Fatalf("atomic: %+v", cfg)
	}
	if cfg := perftestConfig("send", o); cfg.Size != 65536 {
		t.Fatalf("send: %+v", cfg)
	}
	// --lat: perftest's latency default size (2) unless --size is given.
	o.lat, o.set = true, map[string]bool{}
	if cfg := perftestConfig("write", o); cfg.Size != 0 || !cfg.Lat {
		t.Fatalf("write --lat: %+v", cfg)
	}
	o.set["size"], o.size = true, 64
	if cfg := perftestConfig("write", o); cfg.Size != 64 {
		t.Fatalf("write --lat --size 64: %+v", cfg)
	}
}

// TestPerfConfigAtomicSize: perf atomic needs no --size (its messages are
// 8 bytes); a --size other than 8 is still refused by the test's check.
func TestPerfConfigAtomicSize(t *testing.T) {
	o := perfOpts{size: 65536, set: map[string]bool{}}
	if cfg := perfConfig("atomic", o); cfg.Size != 0 {
		t.Fatalf("atomic without --size: %+v", cfg)
	}
	if cfg := perfConfig("write", o); cfg.Size != 65536 {
		t.Fatalf("write: %+v", cfg)
	}
	o.set["size"], o.size = true, 16
	if cfg := perfConfig("atomic", o); cfg.Size != 16 {
		t.Fatalf("atomic --size 16: %+v", cfg)
	}
}
