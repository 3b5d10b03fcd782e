package engine_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
)

func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdleRunCostsLittle: a node with nothing to do backs off to sleeping.
func TestIdleRunCostsLittle(t *testing.T) {
	a, _ := memlink.NewPair(memlink.Config{})
	n := engine.New(a)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c0 := cpuTime(t)
	err := n.Run(ctx, func() int64 { return int64(time.Since(start)) }, nil)
	used := cpuTime(t) - c0
	if err != context.DeadlineExceeded {
		t.Fatalf("Run: %v", err)
	}
	// The first few milliseconds spin; after that it sleeps 1 ms at a time.
	if used > 200*time.Millisecond {
		t.Fatalf("idle for 2 s used %v of CPU", used)
	}
	t.Logf("idle for 2 s used %v of CPU", used)
}

func TestBackoffRespectsDeadline(t *testing.T) {
	b := engine.Backoff{Spin: 1, Yield: 1, MaxSleep: time.Second}
	for i := 0; i < 400; i++ {
		b.Idle(0, 0) // drive the streak up to long sleeps
		if i == 100 {
			break
		}
	}
	start := time.Now()
	b.Idle(0, int64(2*time.Millisecond))
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("slept %v past a deadline 2 ms away", d)
	}
	b.Busy()
	start = time.Now()
	b.Idle(0, 0)
	if d := time.Since(start); d > time.Millisecond {
		t.Fatalf("slept %v right after work", d)
	}
}
