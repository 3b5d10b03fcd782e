package cpulist

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string][]int{
		"0": {0}, "0-3": {0, 1, 2, 3}, "0,2-3\n": {0, 2, 3}, "8,1": {8, 1},
	} {
		if got, err := Parse(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "3-1", "0,0", "1-", ",", "1,,2", "0-1,1"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v", bad, got)
		}
	}
}

func TestPossible(t *testing.T) {
	cpus, err := Possible()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) == 0 || cpus[0] != 0 {
		t.Fatalf("possible CPUs %v", cpus)
	}
}
