//go:build integration

package harness

import (
	"os/exec"
	"syscall"
	"time"
)

// Daemon is a process a test started and reaps as soon as it exits. A
// process nobody waits for stays a zombie, which signal 0 still reaches:
// without the reaping, a daemon that died at start looked alive until a
// wait's limit and was reported as "not within".
type Daemon struct {
	Cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// StartDaemon starts cmd and reaps it in the background.
func StartDaemon(cmd *exec.Cmd) (*Daemon, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Daemon{Cmd: cmd, exited: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.exited) }()
	return d, nil
}

// Exited is closed once the process has exited.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// Dead says whether the process has exited, and how.
func (d *Daemon) Dead() (bool, string) {
	select {
	case <-d.exited:
		if d.err == nil {
			return true, "exit status 0"
		}
		return true, d.err.Error()
	default:
		return false, ""
	}
}

// Signal sends sig to the process, or to its process group when it leads
// one, unless it has exited: once reaped, its PID may be another's.
func (d *Daemon) Signal(sig syscall.Signal) error {
	if dead, _ := d.Dead(); dead {
		return nil
	}
	pid := d.Cmd.Process.Pid
	if d.Cmd.SysProcAttr != nil && d.Cmd.SysProcAttr.Setpgid {
		pid = -pid
	}
	return syscall.Kill(pid, sig)
}

// Stop sends sig, kills the process after grace, and returns once it is
// reaped, or 30 s after the kill for one that cannot die (stuck in the
// kernel), so that a test's clean-up never hangs.
func (d *Daemon) Stop(sig syscall.Signal, grace time.Duration) {
	d.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(grace):
		d.Signal(syscall.SIGKILL)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
		}
	}
}
