package link_test

import (
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
)

func TestParseFaults(t *testing.T) {
	for _, c := range []struct {
		in   string
		want link.Faults
	}{
		{"", link.Faults{}},
		{"  ", link.Faults{}},
		{"reorder=5%,delay=100us,reorderdelay=50us,loss=1%,dup=1%,corrupt=1%", link.Faults{
			Reorder: 0.05, Delay: 100 * time.Microsecond, ReorderDelay: 50 * time.Microsecond,
			Loss: 0.01, Duplicate: 0.01, Corrupt: 0.01,
		}},
		{" Reorder = 0.2 , DELAY=1ms ", link.Faults{Reorder: 0.2, Delay: time.Millisecond}},
		{"duplicate=100%,loss=0", link.Faults{Duplicate: 1}},
		{"reorder=12.5 %", link.Faults{Reorder: 0.125}},
		{"delay=2µs", link.Faults{Delay: 2 * time.Microsecond}},
	} {
		got, err := link.ParseFaults(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseFaults(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, c := range []struct{ in, msg string }{
		{"reorder", `"reorder" is not key=value`},
		{"reorder=", `"reorder=" is not key=value`},
		{"=5%", `"=5%" is not key=value`},
		{"reorder=5%,,loss=1%", `"" is not key=value`},
		{"reorder=5%,", `"" is not key=value`},
		{"jitter=5us", `key "jitter" unknown`},
		{"reorder=lots", `reorder: "lots" is not a probability`},
		{"loss=101%", `loss: "101%" outside [0%, 100%]`},
		{"loss=1.5", `loss: "1.5" outside`},
		{"loss=-1%", `outside`},
		{"corrupt=NaN", `outside`},
		{"delay=100", `delay: "100" is not a duration`},
		{"reorderdelay=-1us", `reorderdelay: "-1us" is negative`},
		{"dup=1%,duplicate=2%", `key "dup" given twice`},
	} {
		_, err := link.ParseFaults(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseFaults(%q) error %v, want one containing %q", c.in, err, c.msg)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	for _, f := range []link.Faults{
		{},
		{Reorder: 0.05, Delay: 100 * time.Microsecond, ReorderDelay: 50 * time.Microsecond, Loss: 0.01, Duplicate: 0.07, Corrupt: 1},
		{Loss: 1.0 / 3},
		{Reorder: 0.123456789},
	} {
		got, err := link.ParseFaults(f.String())
		if err != nil || got != f {
			t.Errorf("ParseFaults(%q) = %+v, %v; want %+v", f.String(), got, err, f)
		}
	}
	if s := (link.Faults{Reorder: 0.2, Delay: time.Millisecond}).String(); s != "reorder=20%,delay=1ms" {
		t.Errorf("String = %q", s)
	}
}
