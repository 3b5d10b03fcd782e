package main

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestExpandOpts(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"-mC10", "-s", "198.18.0.2"}, []string{"-m", "-C", "10", "-s", "198.18.0.2"}},
		{[]string{"-c4", "-S", "1000"}, []string{"-c", "4", "-S", "1000"}},
		{[]string{"-s", "-m"}, []string{"-s", "-m"}}, // -m is -s's argument, as getopt reads it
		{[]string{"--iface", "eth0", "-iface", "eth1", "--", "-m"}, []string{"--iface", "eth0", "-iface", "eth1", "--", "-m"}},
	} {
		if got := expandOpts(tc.in, "m", "sbfPcCStpa"); !slices.Equal(got, tc.want) {
			t.Errorf("expandOpts(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestUcmatoseFlags: bad command lines are one line and exit status 2,
// before any device is opened.
func TestUcmatoseFlags(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		err  string
	}{
		{"ucmatose", []string{"-c", "0"}, "invalid connection count 0"},
		{"ucmatose", []string{"-C", "-1"}, "invalid message count -1"},
		{"ucmatose", []string{"-C", "4097"}, "invalid message count 4097"},
		{"ucmatose", []string{"-S", "-1"}, "invalid message size -1"},
		{"ucmatose", []string{"-p", "0"}, "invalid port 0"},
		{"ucmatose", []string{"-a", "32"}, "invalid ack timeout 32"},
		{"ucmatose", []string{"-t", "8"}, "-t: softfabric does not set a type of service"},
		{"ucmatose", []string{"-P", "ib"}, "-P ib"},
		{"ucmatose", []string{"-f", "gid"}, "-f gid"},
		{"ucmatose", []string{"-f", "ip", "-s", "localhost"}, "-s localhost: not an IP address"},
		{"ucmatose", []string{"-s", "0.0.0.0"}, "the client needs the server's address"},
		{"ucmatose", []string{"-s", "no.such.host.invalid"}, "-s no.such.host.invalid: invalid hostname or IP address"},
		{"ucmatose", []string{"-x"}, "ucmatose: -x"},
		{"ucmatose", []string{"extra"}, "no arguments besides its options"},
		{"ucmatose", []string{"--timeout", "0s"}, "--timeout must be positive"},
		{"rdma_client", nil, "the client needs the server's address: -s ADDRESS"},
		{"rdma_client", []string{"-s", "198.18.0.2", "-p", "65536"}, "invalid port 65536"},
		{"rdma_server", []string{"-b", "198.18.0.2"}, "rdma_server: -b"},
		{"rdma_server", []string{"extra"}, "no arguments besides its options"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{tc.cmd}, tc.args...)
		code := run(args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.err) || strings.Count(errOut.String(), "\n") != 1 || out.Len() != 0 {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, out.String(), errOut.String(), tc.err)
		}
	}
}

func TestUcmatoseConfig(t *testing.T) {
	var o ucmatoseOpts
	fs := ucmatoseFlagSet(&o)
	pos, err := parse(fs, expandOpts([]string{"-s", "198.18.0.2", "-b", "::ffff:198.18.0.1", "-c4", "-C", "20", "-S", "1000",
		"-p", "7472", "-a", "16", "-m", "-f", "ip", "-P", "tcp", "--iface", "eth0"}, "m", "sbfPcCStpa"))
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cfg, err := ucmatoseConfig(o, pos, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != netip.MustParseAddr("198.18.0.2") || cfg.Bind != netip.MustParseAddr("198.18.0.1") || cfg.Port != 7472 ||
		cfg.Connections != 4 || cfg.Count != 20 || cfg.Size != 1000 || cfg.AckTimeout != 16 || !cfg.Migrate || cfg.Iface != "eth0" ||
		cfg.ConnectTimeout != 10*time.Second || errOut.Len() != 0 {
		t.Fatalf("%+v %q", cfg, errOut.String())
	}
	// cmatose's defaults, and its warnings for formats it does not know.
	o = ucmatoseOpts{}
	fs = ucmatoseFlagSet(&o)
	if _, err := parse(fs, []string{"-P", "udp", "-f", "xyz"}); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	cfg, err = ucmatoseConfig(o, nil, &errOut)
	if err != nil || cfg.Port != 7471 || cfg.Connections != 1 || cfg.Count != 10 || cfg.Size != 100 || cfg.Server.IsValid() ||
		errOut.String() != "Warning: unknown port space format\nWarning: unknown address format\n" {
		t.Fatalf("defaults: %+v %v %q", cfg, err, errOut.String())
	}
}

func TestRDMAConfig(t *testing.T) {
	cfg, err := rdmaConfig("rdma_client", []string{"-s", "198.18.0.2", "-p7472", "--timeout", "5s"})
	if err != nil || cfg.Addr != netip.MustParseAddr("198.18.0.2") || cfg.Port != 7472 || cfg.Timeout != 5*time.Second {
		t.Fatalf("%+v %v", cfg, err)
	}
	cfg, err = rdmaConfig("rdma_server", nil)
	if err != nil || cfg.Addr.IsValid() || cfg.Port != 7471 {
		t.Fatalf("%+v %v", cfg, err)
	}
}

func TestUcmatoseHelp(t *testing.T) {
	for _, c := range []struct{ cmd, want string }{{"ucmatose", "messages each way"}, {"rdma_server", "address to bind to"},
		{"rdma_client", "server address"}} {
		var out, errOut bytes.Buffer
		if code := run([]string{"help", c.cmd}, &out, &errOut); code != 0 || !strings.Contains(out.String(), c.want) {
			t.Fatalf("help %s: %d %q %q", c.cmd, code, out.String(), errOut.String())
		}
		if !strings.Contains(usage, "\n  "+c.cmd+" ") {
			t.Fatalf("usage does not list %s", c.cmd)
		}
	}
}
