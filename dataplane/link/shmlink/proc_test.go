package shmlink

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const helperEnv = "SHMLINK_HELPER"

// startHelper re-executes the test binary as the application: it gets the
// region's descriptors as fds 3, 4 and 5 and runs TestHelperProcess in
// mode.
func startHelper(t *testing.T, r *Region, mode string, n int) *exec.Cmd {
	t.Helper()
	var files []*os.File
	for i, fd := range r.FDs() {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, os.NewFile(uintptr(d), fmt.Sprintf("shmlink-%d", i)))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "SHMLINK_N="+strconv.Itoa(n))
	cmd.ExtraFiles = files
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	err := cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	// os/exec puts the descriptors it passes into blocking mode (the
	// child's Map undoes it): the open file descriptions the daemon's End
	// reads and writes are its own, and stay non-blocking.
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// TestHelperProcess is the application side of the cross-process tests;
// it does nothing unless started by startHelper.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process only")
	}
	n, _ := strconv.Atoi(os.Getenv("SHMLINK_N"))
	if err := helper(mode, n); err != nil {
		fmt.Fprintf(os.Stderr, "shmlink helper %s: %v\n", mode, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(mode string, n int) error {
	r, err := Map([3]int{3, 4, 5})
	if err != nil {
		return err
	}
	defer r.Close()
	e := r.AppEnd()
	switch mode {
	case "echo":
		// Send every frame back reversed, building it in place.
		views := make([][]byte, 32)
		deadline := time.Now().Add(60 * time.Second)
		for done := 0; done < n; {
			k := e.RecvZC(views)
			if k == 0 {
				if err := e.Wait(time.Second); err != nil {
					return err
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("stuck after %d frames", done)
				}
				continue
			}
			for _, v := range views[:k] {
				b := e.TxBuf()
				for b == nil {
					if err := e.Flush(); err != nil {
						return err
					}
					time.Sleep(10 * time.Microsecond)
					if time.Now().After(deadline) {
						return fmt.Errorf("tx stuck after %d frames", done)
					}
					b = e.TxBuf()
				}
				for i, c := range v {
					b[len(v)-1-i] = c
				}
				e.TxSubmit(len(v))
			}
			if err := e.Flush(); err != nil {
				return err
			}
			done += k
		}
		return nil
	case "wake":
		// Sleep until a frame comes, echo it; stop at an empty frame.
		in, sizes := bufs(1, e.MaxFrame())
		for {
			k, err := e.Recv(in, sizes)
			if err != nil {
				return err
			}
			if k == 0 {
				if err := e.Wait(30 * time.Second); err != nil {
					return err
				}
				continue
			}
			if sizes[0] == 0 {
				return nil
			}
			if m, err := e.Send([][]byte{in[0][:sizes[0]]}); m != 1 || err != nil {
				return fmt.Errorf("send: %d, %v", m, err)
			}
		}
	}
	return errors.New("unknown mode")
}

func TestCrossProcessEcho(t *testing.T) {
	const slots, size = 64, 1024
	total := 20_000
	if testing.Short() {
		total = 2_000
	}
	r := newTestRegion(t, Config{Slots: slots, SlotSize: size})
	cmd := startHelper(t, r, "echo", total)
	d := r.DaemonEnd()
	in, sizes := bufs(32, size)
	batch := make([][]byte, 0, 32)
	want := make([]byte, size)
	deadline := time.Now().Add(60 * time.Second)
	for sent, got := 0, 0; got < total; {
		batch = batch[:0]
		for i := sent; i < total && len(batch) < cap(batch); i++ {
			batch = append(batch, frame(i, size))
		}
		m, err := d.Send(batch)
		if err != nil {
			t.Fatal(err)
		}
		sent += m
		k, err := d.Recv(in, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for j := range k {
			w := want[:frameLen(got, size)]
			fill(w, got)
			slices.Reverse(w)
			if !slices.Equal(in[j][:sizes[j]], w) {
				t.Fatalf("echo of frame %d: %d bytes % x", got, sizes[j], in[j][:min(8, sizes[j])])
			}
			got++
		}
		if m == 0 && k == 0 {
			if err := d.Wait(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("stuck at %d sent, %d received", sent, got)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	st := d.Stats()
	t.Logf("%d frames each way; daemon %+v", total, st)
	if st.FramesSent != uint64(total) || st.FramesReceived != uint64(total) || st.BadDescriptors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCrossProcessWake sends to an application blocked in Wait and times
// the round trip: each side is woken by the other's doorbell.
func TestCrossProcessWake(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 8, SlotSize: 256})
	cmd := startHelper(t, r, "wake", 0)
	d := r.DaemonEnd()
	sleeping := r.word(ringToApp, ctlSleep)
	in, sizes := bufs(1, 256)
	var worst time.Duration
	for round := range 5 {
		// Wait until the application announced its sleep, then a little
		// longer so that it is inside ppoll.
		deadline := time.Now().Add(20 * time.Second)
		for sleeping.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the application never went to sleep")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		wakeups := d.Stats().Wakeups
		start := time.Now()
		if m, err := d.Send([][]byte{frame(round, 256)}); m != 1 || err != nil {
			t.Fatal(m, err)
		}
		if d.Stats().Wakeups != wakeups+1 {
			t.Fatal("no doorbell rung for a sleeping application")
		}
		for {
			k, err := d.Recv(in, sizes)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				break
			}
			if err := d.Wait(time.Second); err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatal("no echo")
			}
		}
		rtt := time.Since(start)
		worst = max(worst, rtt)
		if !check(in[0][:sizes[0]], round, 256) {
			t.Fatal("bad echo")
		}
	}
	t.Logf("worst wake-up round trip %v", worst)
	if worst > 200*time.Millisecond {
		t.Errorf("wake-up round trip %v, over 200ms", worst)
	}
	if _, err := d.Send([][]byte{{}}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
}
