//go:build !linux

// Package childproc holds what the test-server packages (redistest,
// consultest) share about the server processes they start.
package childproc

import "os/exec"

// OrphanProof does nothing where the kernel offers no parent-death signal.
func OrphanProof(*exec.Cmd) {}
