// Package childproc holds what the test-server packages (redistest,
// consultest) share about the server processes they start.
package childproc

import (
	"os/exec"
	"syscall"
)

// OrphanProof makes the kernel kill cmd's process if the process that
// started it dies, so a crashed test run leaves no server behind.
func OrphanProof(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
