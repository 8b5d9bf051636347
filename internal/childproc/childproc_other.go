//go:build !linux

// Package childproc holds what Roster's processes share about the child
// processes they start. Those are the test servers of redistest and
// consultest, and the command the roster register sidecar runs.
package childproc

import "os/exec"

// OrphanProof does nothing where the kernel offers no parent-death signal.
func OrphanProof(*exec.Cmd) {}
