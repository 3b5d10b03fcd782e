package main

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestExpandGetopt(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"-c", "-vVd", "-a", "10.0.0.1"}, []string{"-c", "-v", "-V", "-d", "-a", "10.0.0.1"}},
		{[]string{"-sC10", "-S64"}, []string{"-s", "-C", "10", "-S", "64"}},
		{[]string{"-a", "-v"}, []string{"-a", "-v"}}, // -v is -a's argument, as getopt reads it
		{[]string{"-Ia.b", "--iface", "eth0", "-iface", "eth1"}, []string{"-I", "a.b", "--iface", "eth0", "-iface", "eth1"}},
		{[]string{"-C=5", "-x", "-vx", "--", "-vV"}, []string{"-C=5", "-x", "-vx", "--", "-vV"}},
	} {
		if got := expandGetopt(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("expandGetopt(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRpingFlags: bad command lines are one line and exit status 2,
// before any device is opened.
func TestRpingFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, "give -s (server) or -c (client)"},
		{[]string{"-s", "-c"}, "give -s (server) or -c (client)"},
		{[]string{"-c"}, "needs the server's address: -a ADDRESS"},
		{[]string{"-s", "-S", "22"}, "invalid size 22 (valid range is 23 to 65535)"},
		{[]string{"-s", "-S65536"}, "invalid size 65536"},
		{[]string{"-c", "-a", "198.18.0.2", "-C", "-1"}, "invalid count -1"},
		{[]string{"-s", "-p", "70000"}, "invalid port 70000"},
		{[]string{"-c", "-a", "198.18.0.2", "-P"}, "-P is for the server"},
		{[]string{"-s", "-I", "198.18.0.1"}, "-I is for the client"},
		{[]string{"-s", "extra"}, "no arguments besides its options"},
		{[]string{"-s", "-t", "5"}, "rping: -t"},
		{[]string{"-c", "-a", "no.such.host.invalid"}, "-a no.such.host.invalid: invalid hostname or IP address"},
		{[]string{"-c", "-a", "198.18.0.2", "--timeout", "0s"}, "--timeout must be positive"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"rping"}, tc.args...)
		code := run(args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.err) || strings.Count(errOut.String(), "\n") != 1 || out.Len() != 0 {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, out.String(), errOut.String(), tc.err)
		}
	}
}

func TestRpingConfig(t *testing.T) {
	var o rpingOpts
	fs := rpingFlagSet(&o)
	pos, err := parse(fs, expandGetopt([]string{"-cvV", "-a", "198.18.0.2", "-I", "::ffff:198.18.0.1", "-C", "20", "-p", "7175", "-S", "100", "--iface", "eth0"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rpingConfig(o, pos)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != netip.MustParseAddr("198.18.0.2") || cfg.Source != netip.MustParseAddr("198.18.0.1") || cfg.Port != 7175 ||
		cfg.Count != 20 || cfg.Size != 100 || !cfg.Verbose || !cfg.Validate || cfg.Debug || cfg.Iface != "eth0" ||
		cfg.ConnectTimeout != 10*time.Second {
		t.Fatalf("%+v", cfg)
	}
	// rping's defaults.
	o = rpingOpts{}
	fs = rpingFlagSet(&o)
	if _, err := parse(fs, []string{"-s"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err = rpingConfig(o, nil); err != nil || cfg.Port != 7174 || cfg.Size != 64 || cfg.Count != 0 || cfg.Addr.IsValid() {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
}

func TestRpingHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"help", "rping"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "persistent server mode") {
		t.Fatalf("help rping: %d %q %q", code, out.String(), errOut.String())
	}
	if !strings.Contains(usage, "\n  rping ") {
		t.Fatal("usage does not list rping")
	}
}
