package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestUdaddyFlags: bad command lines are one line and exit status 2,
// before any device is opened.
func TestUdaddyFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-c", "0"}, "invalid connection count 0"},
		{[]string{"-C", "4097"}, "invalid message count 4097"},
		{[]string{"-S", "-1"}, "invalid message size -1"},
		{[]string{"--port", "0"}, "invalid port 0"},
		{[]string{"-t", "8"}, "-t: softfabric does not set a type of service"},
		{[]string{"-P", "ipoib"}, "-P ipoib"},
		{[]string{"-p", "0x2"}, "-p 0x2"},
		{[]string{"-p", "udp"}, "-p udp"},
		{[]string{"-f", "gid"}, "-f gid"},
		{[]string{"-f", "ip", "-s", "localhost"}, "-s localhost: not an IP address"},
		{[]string{"-s", "0.0.0.0"}, "the client needs the server's address"},
		{[]string{"-x"}, "udaddy: -x"},
		{[]string{"extra"}, "udaddy takes no arguments besides its options"},
		{[]string{"--timeout", "0s"}, "--timeout must be positive"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"udaddy"}, tc.args...)
		code := run(args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.err) || strings.Count(errOut.String(), "\n") != 1 || out.Len() != 0 {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, out.String(), errOut.String(), tc.err)
		}
	}
}

func TestUdaddyConfig(t *testing.T) {
	var o udaddyOpts
	fs := udaddyFlagSet(&o)
	pos, err := parse(fs, expandOpts([]string{"-s", "198.18.0.2", "-b", "::ffff:198.18.0.1", "-c4", "-C", "20", "-S", "1000",
		"-p0x111", "-f", "ip", "-P", "udp", "--iface", "eth0", "--port", "7175", "--timeout", "5s"}, "", "sbfPpcCSt"))
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cfg, err := udaddyConfig(o, pos, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != netip.MustParseAddr("198.18.0.2") || cfg.Bind != netip.MustParseAddr("198.18.0.1") || cfg.Port != 7175 ||
		cfg.Connections != 4 || cfg.Count != 20 || cfg.Size != 1000 || cfg.Iface != "eth0" || cfg.Timeout != 5*time.Second ||
		errOut.Len() != 0 {
		t.Fatalf("%+v %q", cfg, errOut.String())
	}
	// udaddy's defaults, and its warnings for formats it does not know.
	o = udaddyOpts{}
	fs = udaddyFlagSet(&o)
	if _, err := parse(fs, []string{"-P", "tcp", "-f", "xyz"}); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	cfg, err = udaddyConfig(o, nil, &errOut)
	if err != nil || cfg.Port != 7174 || cfg.Connections != 1 || cfg.Count != 10 || cfg.Size != 100 || cfg.Server.IsValid() ||
		errOut.String() != "Warning: unknown port space format\nWarning: unknown address format\n" {
		t.Fatalf("defaults: %+v %v %q", cfg, err, errOut.String())
	}
	var out bytes.Buffer
	if code := run([]string{"help", "udaddy"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "resolved by SIDR") {
		t.Fatalf("help udaddy: %d %q", code, out.String())
	}
	if !strings.Contains(usage, "\n  udaddy ") {
		t.Fatal("usage does not list udaddy")
	}
}
