package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/internal/ucmatose"
)

func init() {
	commands["udaddy"] = command{run: cmdUdaddy, flags: func() *flag.FlagSet { return udaddyFlagSet(new(udaddyOpts)) }}
}

type udaddyOpts struct {
	server, bind, format, portSpaceName, portSpace, tos string
	conns, count, size, port                            int
	iface                                               string
	timeout                                             time.Duration
}

// udaddy's options, under its own letters; --port and --timeout are
// softfabric's.
func udaddyFlagSet(o *udaddyOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("udaddy", flag.ContinueOnError)
	fs.StringVar(&o.server, "s", "", "server address: resolve it and exchange datagrams (client); without it, serve")
	fs.StringVar(&o.bind, "b", "", "local address to bind to (default: the device's)")
	fs.StringVar(&o.format, "f", "name", "address format: name, ip or ipv6 (gid is not supported)")
	fs.StringVar(&o.portSpaceName, "P", "udp", "port space: udp (ipoib is not supported)")
	fs.StringVar(&o.portSpace, "p", fmt.Sprintf("%#x", mad.PortSpaceUDP), "port space by number (udaddy's older -P)")
	fs.IntVar(&o.conns, "c", ucmatose.DefaultConnections, "connections (UD queue pairs, each resolved by SIDR)")
	fs.IntVar(&o.count, "C", ucmatose.DefaultCount, fmt.Sprintf("datagrams each way on each connection, 0 to %d", ucmatose.MaxCount))
	fs.IntVar(&o.size, "S", ucmatose.DefaultSize, "datagram size in bytes, at most the path MTU (0: no datagrams)")
	fs.StringVar(&o.tos, "t", "", "type of service (not supported)")
	fs.IntVar(&o.port, "port", ucmatose.UDDefaultPort, "port (udaddy's is fixed: 7174)")
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (default: the device with the local address, or the only one up)")
	fs.DurationVar(&o.timeout, "timeout", ucmatose.UDDefaultTimeout, "give up resolving, waiting for a request, or waiting for datagrams after this long (udaddy waits for ever)")
	return fs
}

func cmdUdaddy(args []string, stdout, stderr io.Writer) error {
	var o udaddyOpts
	fs := udaddyFlagSet(&o)
	pos, err := parse(fs, expandOpts(args, "", "sbfPpcCSt"))
	if err != nil {
		return err
	}
	cfg, err := udaddyConfig(o, pos, stderr)
	if err != nil {
		return err
	}
	if err := needRootFor(o.iface); err != nil {
		return err
	}
	return runCMATool(cfg.Server.IsValid(),
		func(ctx context.Context) error { return ucmatose.RunUD(ctx, cfg, stdout, stderr) },
		func(ctx context.Context) (*ucmatose.UDServer, error) {
			return ucmatose.ListenUD(ctx, cfg, stdout, stderr)
		})
}

// udaddyConfig checks the command line as udaddy does, and more strictly
// where softfabric cannot do what an option asks.
func udaddyConfig(o udaddyOpts, pos []string, stderr io.Writer) (ucmatose.UDConfig, error) {
	cfg := ucmatose.UDConfig{Iface: o.iface, Connections: o.conns, Count: o.count, Size: o.size, Timeout: o.timeout}
	if err := cmaCounts("udaddy", pos, o.conns, o.count, o.size); err != nil {
		return cfg, err
	}
	switch {
	case o.port <= 0 || o.port > 65535:
		return cfg, usagef("invalid port %d", o.port)
	case o.tos != "":
		return cfg, usagef("-t: softfabric does not set a type of service")
	case o.timeout <= 0:
		return cfg, usagef("--timeout must be positive")
	}
	switch ps := strings.ToLower(o.portSpaceName); {
	case strings.HasPrefix(ps, "ipoib"):
		return cfg, usagef("-P ipoib: softfabric's RDMA-CM speaks the UDP port space only")
	case !strings.HasPrefix(ps, "udp"):
		fmt.Fprintln(stderr, "Warning: unknown port space format") // and UDP it is, as in udaddy
	}
	if ps, err := strconv.ParseInt(o.portSpace, 0, 32); err != nil || mad.PortSpace(ps) != mad.PortSpaceUDP {
		return cfg, usagef("-p %s: softfabric's RDMA-CM speaks the UDP port space only (%#x)", o.portSpace, mad.PortSpaceUDP)
	}
	cfg.Port = uint16(o.port)
	var err error
	cfg.Server, cfg.Bind, err = cmaAddrs(o.format, o.server, o.bind, stderr)
	return cfg, err
}
