package link

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Faults describe impairments applied to the frames a link transmits, by
// the in-memory test link (memlink) and the debugging wrapper (faulty).
// The zero value passes every frame through untouched.
type Faults struct {
	// Per-frame probabilities in [0, 1].
	Loss, Duplicate, Reorder, Corrupt float64
	// Delay is the latency added to every frame.
	Delay time.Duration
	// ReorderDelay bounds the uniform extra delay, in (0, ReorderDelay],
	// of a frame chosen for reordering. With 0 such a frame is instead
	// swapped behind the next frame sent.
	ReorderDelay time.Duration
}

// Validate reports a probability outside [0, 1] or a negative delay.
func (f Faults) Validate() error {
	for _, p := range [...]struct {
		name string
		v    float64
	}{{"Loss", f.Loss}, {"Duplicate", f.Duplicate}, {"Reorder", f.Reorder}, {"Corrupt", f.Corrupt}} {
		if !(p.v >= 0 && p.v <= 1) { // also rejects NaN
			return fmt.Errorf("link: %s probability %v outside [0, 1]", p.name, p.v)
		}
	}
	if f.Delay < 0 || f.ReorderDelay < 0 {
		return fmt.Errorf("link: negative delay (Delay %v, ReorderDelay %v)", f.Delay, f.ReorderDelay)
	}
	return nil
}

// ParseFaults parses Faults from a comma-separated list of key=value items,
// for an environment variable or a command-line flag:
//
//	reorder=5%,delay=100us,reorderdelay=50us,loss=1%,dup=1%,corrupt=1%
//
// Probabilities (loss, dup or duplicate, reorder, corrupt) are percentages
// with a % sign or fractions in [0, 1] without; delays (delay,
// reorderdelay) are Go durations. Keys are case-insensitive, each may
// appear once, and one left out is zero. The empty string is no faults.
func ParseFaults(s string) (Faults, error) {
	var f Faults
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		key, val, ok := strings.Cut(item, "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if !ok || key == "" || val == "" {
			return Faults{}, fmt.Errorf("link: spec item %q is not key=value", strings.TrimSpace(item))
		}
		var err error
		switch key {
		case "loss":
			f.Loss, err = parseProb(val)
		case "dup", "duplicate":
			key = "dup"
			f.Duplicate, err = parseProb(val)
		case "reorder":
			f.Reorder, err = parseProb(val)
		case "corrupt":
			f.Corrupt, err = parseProb(val)
		case "delay":
			f.Delay, err = parseDelay(val)
		case "reorderdelay":
			f.ReorderDelay, err = parseDelay(val)
		default:
			return Faults{}, fmt.Errorf("link: spec key %q unknown (want loss, dup, reorder, corrupt, delay or reorderdelay)", key)
		}
		if err != nil {
			return Faults{}, fmt.Errorf("link: spec %s: %w", key, err)
		}
		if seen[key] {
			return Faults{}, fmt.Errorf("link: spec key %q given twice", key)
		}
		seen[key] = true
	}
	return f, nil
}

func parseProb(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a probability (like 5%% or 0.05)", s)
	}
	if pct {
		v /= 100
	}
	if !(v >= 0 && v <= 1) { // also rejects NaN
		return 0, fmt.Errorf("%q outside [0%%, 100%%]", s)
	}
	return v, nil
}

func parseDelay(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 100us or 2ms)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

// String formats f as ParseFaults reads it, leaving out what is zero.
func (f Faults) String() string {
	var b strings.Builder
	item := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + v)
	}
	for _, p := range [...]struct {
		k string
		v float64
	}{{"reorder", f.Reorder}, {"loss", f.Loss}, {"dup", f.Duplicate}, {"corrupt", f.Corrupt}} {
		if p.v != 0 {
			item(p.k, formatProb(p.v))
		}
	}
	if f.Delay != 0 {
		item("delay", f.Delay.String())
	}
	if f.ReorderDelay != 0 {
		item("reorderdelay", f.ReorderDelay.String())
	}
	return b.String()
}

// formatProb writes p as the shortest percentage that parses back to p
// exactly, or as a fraction when none does.
func formatProb(p float64) string {
	for prec := 0; prec <= 17; prec++ {
		s := strconv.FormatFloat(p*100, 'f', prec, 64)
		if v, err := strconv.ParseFloat(s, 64); err == nil && v/100 == p {
			return s + "%"
		}
	}
	return strconv.FormatFloat(p, 'g', -1, 64)
}
