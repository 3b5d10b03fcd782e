// Command softfabric runs and inspects the softfabric RDMA stack: it brings
// a device up on an Ethernet interface (an XDP classifier steering RoCEv2
// frames to AF_XDP sockets), reports its state and counters, and measures
// it with perftest-style bandwidth, latency and ping-pong runs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `softfabric: a software RDMA (RoCEv2) stack

Usage:
  softfabric <command> [arguments]

Commands:
  up IFACE [--mode auto|native|generic]     attach the classifier to IFACE, pin its maps and start
                                            its daemon (--no-daemon: none; --group, --metrics, --max-apps)
  daemon IFACE                              run the daemon in the foreground (for systemd)
  down IFACE [--force]                      stop the daemon, detach, remove every trace
  status [IFACE] [--json]                   device facts, GIDs, contexts, QPs, counters
  stats IFACE [--json]                      classifier counters
  perf OP [flags] --iface IFACE [SERVER]    bandwidth/latency test: OP is write, read, send, atomic,
                                            or a baseline: udp (UDP socket), xdp (raw AF_XDP);
                                            server without SERVER, client with it
  pingpong [flags] --iface IFACE [SERVER]   ping-pong like ibv_rc_pingpong; --ud: ibv_ud_pingpong,
                                            --srq [-q N]: ibv_srq_pingpong
  rping -s|-c [flags] [--iface IFACE]       librdmacm's rping: -s serves, -c -a SERVER [-C N] [-v] [-V]
                                            pings it (RDMA read and write of checked data)
  ucmatose [-s SERVER] [flags] [--iface IFACE]
                                            librdmacm's ucmatose: serves without -s, connects with it;
                                            -c connections, -C messages of -S bytes each way on each
  udaddy [-s SERVER] [flags] [--iface IFACE]
                                            librdmacm's udaddy: UD queue pairs resolved by SIDR; serves
                                            without -s; -c connections, -C datagrams of -S bytes each way
  rdma_server [-s ADDR] [-p PORT]           librdmacm's rdma_server and rdma_client: one 16-byte
  rdma_client -s SERVER [-p PORT]           message each way over RDMA-CM
  version                                   print the version
  help [COMMAND]                            print this help, or a command's flags

Run 'softfabric help COMMAND' for a command's flags.
`

type command struct {
	run   func(args []string, stdout, stderr io.Writer) error
	flags func() *flag.FlagSet // for help
}

var commands = map[string]command{}

func main() {
	// SOFTFABRIC_CPUPROFILE=file writes a CPU profile of the command, for
	// finding where a perf run spends its time.
	if f := os.Getenv("SOFTFABRIC_CPUPROFILE"); f != "" {
		if w, err := os.Create(f); err == nil {
			_ = pprof.StartCPUProfile(w)
			code := run(os.Args[1:], os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			w.Close()
			os.Exit(code)
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit status: 0 on
// success, 1 when the command failed, 2 for a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok && c.flags != nil {
				fs := c.flags()
				fmt.Fprintf(stdout, "Usage of softfabric %s:\n%s", args[1], flagUsage(fs))
				return 0
			}
			return unknown(stderr, args[1])
		}
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "-version", "--version":
		if len(args) > 1 {
			return unknown(stderr, args[1])
		}
		fmt.Fprintf(stdout, "softfabric %s\n", version)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		return unknown(stderr, name)
	}
	err := c.run(args[1:], stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		if c.flags != nil {
			fmt.Fprintf(stdout, "Usage of softfabric %s:\n%s", name, flagUsage(c.flags()))
		}
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "softfabric: %s (see 'softfabric help %s')\n", ue.msg, name)
		return 2
	default:
		fmt.Fprintf(stderr, "softfabric: %s: %v\n", name, err)
		return 1
	}
}

func unknown(stderr io.Writer, what string) int {
	fmt.Fprintf(stderr, "softfabric: unknown command %q (see 'softfabric help')\n", what)
	return 2
}
