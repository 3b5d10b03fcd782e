package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemon"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
)

func init() {
	commands["daemon"] = command{run: cmdDaemon, flags: daemonFlags}
}

type daemonOpts struct {
	queues  int
	cpus    string
	group   string
	metrics string
	maxApps int
}

func daemonFlags() *flag.FlagSet { return daemonFlagSet(new(daemonOpts)) }

func daemonFlagSet(o *daemonOpts) *flag.FlagSet {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.IntVar(&o.queues, "queues", 0, "serve at most this many queues (default: what up recorded)")
	o.addFlags(fs)
	return fs
}

// addFlags defines the daemon's flags that up passes on to it.
func (o *daemonOpts) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.cpus, "cpus", "", "pin the daemon's workers to these CPUs (e.g. 2-5,8)")
	fs.StringVar(&o.group, "group", "", "let members of this group attach to the daemon besides root")
	fs.StringVar(&o.metrics, "metrics", "", "the daemon serves Prometheus metrics on this address (e.g. 127.0.0.1:9435), at /metrics")
	fs.IntVar(&o.maxApps, "max-apps", 0, "serve at most this many applications at once (default 256)")
}

// check reports a bad flag of the daemon's in a usage error, and
// returns the CPUs --cpus names.
func (o *daemonOpts) check() ([]int, error) {
	cpus, err := parseCPUList(o.cpus)
	if err != nil {
		return nil, usagef("--cpus: %v", err)
	}
	if o.maxApps < 0 {
		return nil, usagef("--max-apps %d: want a positive number", o.maxApps)
	}
	return cpus, nil
}

// daemonLog is the daemon's log file in the run directory, when up
// starts it in the background.
const daemonLog = "daemon.log"

// cmdDaemon serves IFACE in the foreground until SIGINT or SIGTERM: the
// process a systemd unit runs, and the one up starts in the background.
func cmdDaemon(args []string, stdout, stderr io.Writer) error {
	var o daemonOpts
	pos, err := parse(daemonFlagSet(&o), args)
	if err != nil {
		return err
	}
	iface, err := oneIface("daemon", pos)
	if err != nil {
		return err
	}
	cpus, err := o.check()
	if err != nil {
		return err
	}
	if err := needRoot(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := log.New(stderr, "softfabric daemon: ", log.LstdFlags)
	return daemon.Run(ctx, daemon.Config{Iface: iface, Queues: o.queues, CPUs: cpus, Group: o.group, Metrics: o.metrics, MaxApps: o.maxApps, Logf: logger.Printf},
		func(d *daemon.Daemon) {
			logger.Printf("serving %s (pid %d, socket %s)", iface, os.Getpid(), daemonapi.SocketPath(d.RunDir()))
		})
}

// startDaemon starts `softfabric daemon IFACE` in the background, in a
// session of its own, and returns once it answers on its control socket.
func startDaemon(iface, runDir string, o daemonOpts) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	args := []string{"daemon", iface}
	if o.queues > 0 {
		args = append(args, "--queues", strconv.Itoa(o.queues))
	}
	if o.cpus != "" {
		args = append(args, "--cpus", o.cpus)
	}
	if o.group != "" {
		args = append(args, "--group", o.group)
	}
	if o.metrics != "" {
		args = append(args, "--metrics", o.metrics)
	}
	if o.maxApps > 0 {
		args = append(args, "--max-apps", strconv.Itoa(o.maxApps))
	}
	logPath := filepath.Join(runDir, daemonLog)
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = daemonEnv(os.Environ())
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting the daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Second)
	for {
		if _, err := daemon.Query(runDir); err == nil {
			return cmd.Process.Pid, nil
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logPath)
			msg := strings.TrimSpace(string(b))
			if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
				msg = msg[i+1:]
			}
			return 0, fmt.Errorf("the daemon exited (%v): %s", err, msg)
		case <-deadline:
			_ = cmd.Process.Kill()
			return 0, errors.New("the daemon did not answer within 10 s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// daemonEnv is the environment of a daemon that `up` starts: its own
// CPU profile is SOFTFABRIC_DAEMON_CPUPROFILE's file, not the one `up`
// itself writes (SOFTFABRIC_CPUPROFILE).
func daemonEnv(env []string) []string {
	out := env[:0:0]
	prof := ""
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "SOFTFABRIC_CPUPROFILE="):
		case strings.HasPrefix(kv, "SOFTFABRIC_DAEMON_CPUPROFILE="):
			prof = strings.TrimPrefix(kv, "SOFTFABRIC_DAEMON_CPUPROFILE=")
		default:
			out = append(out, kv)
		}
	}
	if prof != "" {
		out = append(out, "SOFTFABRIC_CPUPROFILE="+prof)
	}
	return out
}

// daemonPID is the pid of the daemon recorded in runDir, and whether it
// still serves: it holds the device's lock (a killed daemon's lock dies
// with it, even while the process lingers unreaped).
func daemonPID(runDir string) (int, bool) {
	pid := pidIn(filepath.Join(runDir, daemonapi.PIDName))
	if pid == 0 {
		return 0, false
	}
	lock, err := ctrl.LockDevice(runDir)
	if err == nil {
		_ = lock.Unlock()
		return pid, false
	}
	var busy *ctrl.BusyError
	return pid, errors.As(err, &busy) && busy.PID == pid
}

// stopDaemon stops the daemon of runDir, if one runs: SIGTERM, then
// SIGKILL after 5 s. It returns once the device's queues are free.
func stopDaemon(runDir string) error {
	pid, alive := daemonPID(runDir)
	if !alive {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		// A daemon that is gone but not reaped (our child, in tests)
		// has released the device lock already.
		if lock, err := ctrl.LockDevice(runDir); err == nil {
			_ = lock.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	return nil
}

// daemonIdle waits up to a second for the daemon of runDir to serve no
// application (one that just exited is released within milliseconds),
// and says which still use it otherwise.
func daemonIdle(runDir, iface string) error {
	if _, alive := daemonPID(runDir); !alive {
		return nil
	}
	deadline := time.Now().Add(time.Second)
	for {
		st, err := daemon.Query(runDir)
		if err != nil || len(st.Apps) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var who []string
			for _, a := range st.Apps {
				who = append(who, fmt.Sprintf("%s pid %d", a.Name, a.PID))
			}
			return fmt.Errorf("%s is in use by %d application(s) (%s): stop them first, or 'softfabric down %s --force'", iface, len(st.Apps), strings.Join(who, ", "), iface)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
