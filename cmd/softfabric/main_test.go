package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // substring, "" means empty
		stderr string // exact
	}{
		{nil, 0, "Commands:", ""},
		{[]string{"help"}, 0, "version", ""},
		{[]string{"--help"}, 0, "Usage:", ""},
		{[]string{"version"}, 0, "softfabric dev\n", ""},
		{[]string{"frobnicate"}, 2, "", "softfabric: unknown command \"frobnicate\" (see 'softfabric help')\n"},
		{[]string{"--bogus"}, 2, "", "softfabric: unknown command \"--bogus\" (see 'softfabric help')\n"},
		{[]string{"version", "extra"}, 2, "", "softfabric: unknown command \"extra\" (see 'softfabric help')\n"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != tc.code {
			t.Errorf("run(%q) = %d, want %d", tc.args, code, tc.code)
		}
		if tc.stdout == "" && out.Len() != 0 || !strings.Contains(out.String(), tc.stdout) {
			t.Errorf("run(%q) stdout = %q, want it to contain %q", tc.args, out.String(), tc.stdout)
		}
		if errOut.String() != tc.stderr {
			t.Errorf("run(%q) stderr = %q, want %q", tc.args, errOut.String(), tc.stderr)
		}
	}
}

func TestUsageListsCommands(t *testing.T) {
	for _, cmd := range []string{"version", "help"} {
		if !strings.Contains(usage, "\n  "+cmd+" ") {
			t.Errorf("usage does not list %q", cmd)
		}
	}
}
