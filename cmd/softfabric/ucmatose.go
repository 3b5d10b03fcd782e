package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/ucmatose"
)

func init() {
	commands["ucmatose"] = command{run: cmdUcmatose, flags: func() *flag.FlagSet { return ucmatoseFlagSet(new(ucmatoseOpts)) }}
	commands["rdma_server"] = command{run: cmdRDMAServer, flags: func() *flag.FlagSet { return rdmaFlagSet("rdma_server", new(rdmaOpts)) }}
	commands["rdma_client"] = command{run: cmdRDMAClient, flags: func() *flag.FlagSet { return rdmaFlagSet("rdma_client", new(rdmaOpts)) }}
}

type ucmatoseOpts struct {
	server, bind, format, portSpace, tos string
	conns, count, size, port, ackTimeout int
	migrate                              bool
	iface                                string
	timeout                              time.Duration
}

// ucmatose's options, under its own letters.
func ucmatoseFlagSet(o *ucmatoseOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("ucmatose", flag.ContinueOnError)
	fs.StringVar(&o.server, "s", "", "server address: connect to it (client); without it, serve")
	fs.StringVar(&o.bind, "b", "", "local address to bind to (default: the device's)")
	fs.StringVar(&o.format, "f", "name", "address format: name, ip or ipv6 (gid is not supported)")
	fs.StringVar(&o.portSpace, "P", "tcp", "port space: tcp (ib is not supported)")
	fs.IntVar(&o.conns, "c", ucmatose.DefaultConnections, "connections")
	fs.IntVar(&o.count, "C", ucmatose.DefaultCount, fmt.Sprintf("messages each way on each connection, 0 to %d", ucmatose.MaxCount))
	fs.IntVar(&o.size, "S", ucmatose.DefaultSize, "message size in bytes (0: no messages)")
	fs.StringVar(&o.tos, "t", "", "type of service (not supported)")
	fs.IntVar(&o.port, "p", ucmatose.DefaultPort, "port")
	fs.BoolVar(&o.migrate, "m", false, "migrate to a new event channel before the disconnects (changes nothing on the wire)")
	fs.IntVar(&o.ackTimeout, "a", 0, "QP ACK timeout, 4.096 µs × 2^a (1 to 31; default: softfabric's, 14)")
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (default: the device with the local address, or the only one up)")
	fs.DurationVar(&o.timeout, "timeout", ucmatose.DefaultConnectTimeout, "give up connecting (client) or accepting a request (server) after this long")
	return fs
}

func cmdUcmatose(args []string, stdout, stderr io.Writer) error {
	var o ucmatoseOpts
	fs := ucmatoseFlagSet(&o)
	pos, err := parse(fs, expandOpts(args, "m", "sbfPcCStpa"))
	if err != nil {
		return err
	}
	cfg, err := ucmatoseConfig(o, pos, stderr)
	if err != nil {
		return err
	}
	if err := needRootFor(o.iface); err != nil {
		return err
	}
	return runCMATool(cfg.Server.IsValid(),
		func(ctx context.Context) error { return ucmatose.Run(ctx, cfg, stdout, stderr) },
		func(ctx context.Context) (*ucmatose.Server, error) { return ucmatose.Listen(ctx, cfg, stdout, stderr) })
}

// needRootFor refuses a run on a device nobody serves without root: in
// process, the AF_XDP sockets and the classifier need it.
func needRootFor(iface string) error {
	if iface != "" && !device.Served(iface) {
		return needRoot()
	}
	return nil
}

// ucmatoseConfig checks the command line as cmatose does, and more
// strictly where softfabric cannot do what an option asks.
func ucmatoseConfig(o ucmatoseOpts, pos []string, stderr io.Writer) (ucmatose.Config, error) {
	cfg := ucmatose.Config{Iface: o.iface, Connections: o.conns, Count: o.count, Size: o.size,
		AckTimeout: o.ackTimeout, Migrate: o.migrate, ConnectTimeout: o.timeout}
	if err := cmaCounts("ucmatose", pos, o.conns, o.count, o.size); err != nil {
		return cfg, err
	}
	switch {
	case o.port <= 0 || o.port > 65535:
		return cfg, usagef("invalid port %d", o.port)
	case o.ackTimeout < 0 || o.ackTimeout > 31:
		return cfg, usagef("invalid ack timeout %d (1 to 31)", o.ackTimeout)
	case o.tos != "":
		return cfg, usagef("-t: softfabric does not set a type of service")
	case o.timeout <= 0:
		return cfg, usagef("--timeout must be positive")
	}
	switch ps := strings.ToLower(o.portSpace); {
	case strings.HasPrefix(ps, "ib"):
		return cfg, usagef("-P ib: softfabric's RDMA-CM speaks the TCP port space only")
	case !strings.HasPrefix(ps, "tcp"):
		fmt.Fprintln(stderr, "Warning: unknown port space format") // and TCP it is, as in cmatose
	}
	cfg.Port = uint16(o.port)
	var err error
	cfg.Server, cfg.Bind, err = cmaAddrs(o.format, o.server, o.bind, stderr)
	return cfg, err
}

// cmaCounts checks what ucmatose and udaddy (name) share: no arguments
// but options, and the connection and message counts and size.
func cmaCounts(name string, pos []string, conns, count, size int) error {
	switch {
	case len(pos) > 0:
		return usagef("%s takes no arguments besides its options: %q", name, pos[0])
	case conns < 1:
		return usagef("invalid connection count %d", conns)
	case count < 0 || count > ucmatose.MaxCount:
		return usagef("invalid message count %d (0 to %d: softfabric's queues hold %d)", count, ucmatose.MaxCount, ucmatose.MaxCount)
	case size < 0 || size > ucmatose.MaxSize:
		return usagef("invalid message size %d (0 to %d)", size, ucmatose.MaxSize)
	}
	return nil
}

// cmaAddrs reads -f, -s and -b as cmatose and udaddy do: the server's
// address (a client's), the local one.
func cmaAddrs(format, server, bind string, stderr io.Writer) (srv, local netip.Addr, err error) {
	numeric := false
	switch f := strings.ToLower(format); {
	case strings.HasPrefix(f, "ip"):
		numeric = true
	case strings.HasPrefix(f, "gid"):
		return srv, local, usagef("-f gid: softfabric has no AF_IB addresses; give IP addresses")
	case !strings.HasPrefix(f, "name"):
		fmt.Fprintln(stderr, "Warning: unknown address format")
	}
	if srv, err = ucmatoseAddr("-s", server, numeric); err != nil {
		return srv, local, err
	}
	if local, err = ucmatoseAddr("-b", bind, numeric); err != nil {
		return srv, local, err
	}
	if server != "" && srv.IsUnspecified() {
		return srv, local, usagef("-s %s: the client needs the server's address", server)
	}
	return srv, local, nil
}

// runCMATool runs a librdmacm example's client, or its server (listen,
// then serve), until done or interrupted.
func runCMATool[S interface {
	Serve(context.Context) error
	Close()
}](client bool, run func(context.Context) error, listen func(context.Context) (S, error)) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if client {
		err = run(ctx)
	} else {
		var s S
		if s, err = listen(ctx); err != nil {
			return err
		}
		err = s.Serve(ctx)
		s.Close()
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	return err
}

// ucmatoseAddr reads an address, or a host name unless numeric (-f ip).
func ucmatoseAddr(flagName, s string, numeric bool) (netip.Addr, error) {
	if numeric && s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return a, usagef("%s %s: not an IP address (-f ip)", flagName, s)
		}
		return a.Unmap(), nil
	}
	return lookupAddr(flagName, s)
}

type rdmaOpts struct {
	server  string
	port    int
	iface   string
	timeout time.Duration
}

// rdma_server's and rdma_client's options.
func rdmaFlagSet(name string, o *rdmaOpts) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if name == "rdma_server" {
		fs.StringVar(&o.server, "s", "", "address to bind to (default: the device's, as rdma_server's 0.0.0.0)")
	} else {
		fs.StringVar(&o.server, "s", "", "server address (required: rdma_client's 127.0.0.1 is no RDMA address here)")
	}
	fs.IntVar(&o.port, "p", ucmatose.DefaultPort, "port")
	fs.StringVar(&o.iface, "iface", "", "interface softfabric is up on (default: the device with the address, or the only one up)")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up after this long (default: wait for ever, as the tool does)")
	return fs
}

func rdmaConfig(name string, args []string) (ucmatose.RDMAConfig, error) {
	var o rdmaOpts
	fs := rdmaFlagSet(name, &o)
	pos, err := parse(fs, expandOpts(args, "", "sp"))
	if err != nil {
		return ucmatose.RDMAConfig{}, err
	}
	cfg := ucmatose.RDMAConfig{Iface: o.iface, Timeout: o.timeout}
	switch {
	case len(pos) > 0:
		return cfg, usagef("%s takes no arguments besides its options: %q", name, pos[0])
	case o.port <= 0 || o.port > 65535:
		return cfg, usagef("invalid port %d", o.port)
	case o.timeout < 0:
		return cfg, usagef("--timeout must not be negative")
	case name == "rdma_client" && o.server == "":
		return cfg, usagef("the client needs the server's address: -s ADDRESS")
	}
	cfg.Port = uint16(o.port)
	if cfg.Addr, err = lookupAddr("-s", o.server); err != nil {
		return cfg, err
	}
	if name == "rdma_client" && cfg.Addr.IsUnspecified() {
		return cfg, usagef("-s %s: the client needs the server's address", o.server)
	}
	return cfg, needRootFor(o.iface)
}

func cmdRDMAServer(args []string, stdout, stderr io.Writer) error {
	return runRDMA("rdma_server", ucmatose.RDMAServer, args, stdout, stderr)
}

func cmdRDMAClient(args []string, stdout, stderr io.Writer) error {
	return runRDMA("rdma_client", ucmatose.RDMAClient, args, stdout, stderr)
}

func runRDMA(name string, run func(context.Context, ucmatose.RDMAConfig, io.Writer, io.Writer) error,
	args []string, stdout, stderr io.Writer) error {
	cfg, err := rdmaConfig(name, args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = run(ctx, cfg, stdout, stderr)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	return err
}
