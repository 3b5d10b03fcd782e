package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/rping"
)

func init() {
	commands["rping"] = command{run: cmdRping, flags: func() *flag.FlagSet { return rpingFlagSet(new(rpingOpts)) }}
}

type rpingOpts struct {
	server, client        bool
	addr, source          string
	port, count, size     int
	verbose, validate     bool
	debug, persist, selfQ bool
	iface                 string
	timeout               time.Duration
}

// rping's options, under its own letters.
func rpingFlagSet(o *rpingOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.BoolVar(&o.server, "s", false, "server side")
	fs.BoolVar(&o.client, "c", false, "client side")
	fs.StringVar(&o.addr, "a", "", "address: the server binds to it (default: the device's), the client connects to it (required)")
	fs.StringVar(&o.source, "I", "", "client: source address to bind to (default: the device's)")
	fs.IntVar(&o.port, "p", rping.DefaultPort, "port")
	fs.IntVar(&o.count, "C", 0, "client: ping count times (default: until interrupted); a server takes it and ignores it, as rping's does")
	fs.IntVar(&o.size, "S", rping.DefaultSize, fmt.Sprintf("ping data size, %d to %d", rping.MinSize, rping.MaxSize))
	fs.BoolVar(&o.verbose, "v", false, "display ping data to stdout")
	fs.BoolVar(&o.validate, "V", false, "client: validate ping data")
	fs.BoolVar(&o.debug, "d", false, "debug printfs")
	fs.BoolVar(&o.persist, "P", false, "persistent server mode allowing multiple connections (until interrupted)")
	fs.BoolVar(&o.selfQ, "q", false, "use self-created, self-modified QP (accepted; softfabric always creates its queue pairs itself)")
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (default: the device with the local address, or the only one up)")
	fs.DurationVar(&o.timeout, "timeout", rping.DefaultConnectTimeout, "give up connecting (client) or accepting (server) after this long")
	return fs
}

// The letters of rping's options without and with an argument, which
// getopt lets a command line cluster ("-vVd", "-C10").
const (
	rpingBoolLetters = "scvVdPq"
	rpingArgLetters  = "aIpCS"
)

// expandGetopt rewrites rping's clustered short options as one option
// per argument (expandOpts).
func expandGetopt(args []string) []string { return expandOpts(args, rpingBoolLetters, rpingArgLetters) }

func cmdRping(args []string, stdout, stderr io.Writer) error {
	var o rpingOpts
	fs := rpingFlagSet(&o)
	pos, err := parse(fs, expandGetopt(args))
	if err != nil {
		return err
	}
	cfg, err := rpingConfig(o, pos)
	if err != nil {
		return err
	}
	if o.iface != "" && !device.Served(o.iface) {
		// In process: the AF_XDP sockets and the classifier need root.
		if err := needRoot(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.client {
		err = rping.Ping(ctx, cfg, stdout, stderr)
	} else {
		var s *rping.Server
		if s, err = rping.Listen(ctx, cfg, stdout, stderr); err != nil {
			return err
		}
		err = s.Serve(ctx)
		s.Close()
		if o.persist && ctx.Err() != nil {
			return nil // a persistent server runs until it is stopped
		}
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	return err
}

// rpingConfig checks the command line as rping does, and more strictly
// where rping ignores an option.
func rpingConfig(o rpingOpts, pos []string) (rping.Config, error) {
	cfg := rping.Config{Iface: o.iface, Size: o.size, Count: o.count, Verbose: o.verbose, Validate: o.validate,
		Debug: o.debug, Persistent: o.persist, ConnectTimeout: o.timeout}
	switch {
	case len(pos) > 0:
		return cfg, usagef("rping takes no arguments besides its options: %q", pos[0])
	case o.server == o.client:
		return cfg, usagef("give -s (server) or -c (client)")
	case o.size < rping.MinSize || o.size > rping.MaxSize:
		return cfg, usagef("invalid size %d (valid range is %d to %d)", o.size, rping.MinSize, rping.MaxSize)
	case o.count < 0:
		return cfg, usagef("invalid count %d", o.count)
	case o.port <= 0 || o.port > 65535:
		return cfg, usagef("invalid port %d", o.port)
	case o.timeout <= 0:
		return cfg, usagef("--timeout must be positive")
	case o.client && o.addr == "":
		return cfg, usagef("the client needs the server's address: -a ADDRESS")
	case o.client && o.persist:
		return cfg, usagef("-P is for the server")
	case o.server && o.source != "":
		return cfg, usagef("-I is for the client (the server binds to -a)")
	}
	cfg.Port = uint16(o.port)
	var err error
	if cfg.Addr, err = lookupAddr("-a", o.addr); err != nil {
		return cfg, err
	}
	if cfg.Source, err = lookupAddr("-I", o.source); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// lookupAddr reads an address or host name, as rping's getaddrinfo
// does; "" is no address.
func lookupAddr(flagName, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil || len(as) == 0 {
		return netip.Addr{}, usagef("%s %s: invalid hostname or IP address", flagName, s)
	}
	for _, a := range as {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return as[0], nil
}
