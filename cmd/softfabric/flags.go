package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// usageError is a bad command line: one line on stderr, exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// parse parses flags that may come before, between or after positional
// arguments (`perf write --size 64 10.0.0.1 --iters 5`), as users of
// perftest-style tools expect, and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%s: %s", fs.Name(), strings.TrimPrefix(err.Error(), "flag provided but not defined: "))
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// flagUsage renders a flag set's defaults for help output.
func flagUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}

// expandOpts rewrites getopt's clustered short options ("-mC10") as one
// option per argument, the form package flag reads: boolLetters take no
// argument, argLetters one.
func expandOpts(args []string, boolLetters, argLetters string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) == 2 && a[0] == '-' && strings.IndexByte(argLetters, a[1]) >= 0 && i+1 < len(args) {
			out = append(out, a, args[i+1]) // its argument is taken as is
			i++
			continue
		}
		out = append(out, splitCluster(a, boolLetters, argLetters)...)
	}
	return out
}

func splitCluster(a, boolLetters, argLetters string) []string {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") {
		return []string{a}
	}
	var out []string
	for j := 1; j < len(a); j++ {
		switch l := a[j]; {
		case strings.IndexByte(boolLetters, l) >= 0:
			out = append(out, "-"+string(l))
		case strings.IndexByte(argLetters, l) >= 0:
			out = append(out, "-"+string(l))
			if j+1 < len(a) {
				out = append(out, a[j+1:])
			}
			return out
		default:
			return []string{a} // a long option (-iface) or a bad one: flag says which
		}
	}
	return out
}
