// Command softfabric runs and inspects the softfabric RDMA stack.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `softfabric: a software RDMA (RoCEv2) stack

Usage:
  softfabric <command>

Commands:
  version   print the version
  help      print this help
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	switch cmd := args[0]; cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "-version", "--version":
		if len(args) > 1 {
			return unknown(stderr, args[1])
		}
		fmt.Fprintf(stdout, "softfabric %s\n", version)
		return 0
	default:
		return unknown(stderr, cmd)
	}
}

func unknown(stderr io.Writer, what string) int {
	fmt.Fprintf(stderr, "softfabric: unknown command %q (see 'softfabric help')\n", what)
	return 2
}
