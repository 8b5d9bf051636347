//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// ownGroup does nothing where there are no process groups.
func ownGroup(*exec.Cmd) {}

// signalGroup sends sig to p.
func signalGroup(p *os.Process, sig os.Signal) error { return p.Signal(sig) }

// forwardSignals is empty where there are no reload signals.
var forwardSignals map[os.Signal]string
