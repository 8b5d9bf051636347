//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own, so that the signals a
// terminal sends to its foreground group (Ctrl-C) reach the sidecar only:
// CMD gets them from the sidecar, once it has deregistered and drained.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// signalGroup sends sig to p's process group — p and what it started — as
// the terminal would have.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	return syscall.Kill(-p.Pid, s)
}

// forwardSignals are the signals the sidecar passes on to CMD and
// survives, the reload signals of the usual servers, by name.
var forwardSignals = map[os.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2"}
