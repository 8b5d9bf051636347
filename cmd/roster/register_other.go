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
