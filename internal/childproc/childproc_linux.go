// Package childproc holds what Roster's processes share about the child
// processes they start. Those are the test servers of redistest and
// consultest, and the command the roster register sidecar runs.
package childproc

import (
	"os/exec"
	"syscall"
)

// OrphanProof makes the kernel kill cmd's process if the process that
// started it dies, so a crashed test run or sidecar leaves nothing behind.
// It keeps the rest of cmd.SysProcAttr.
func OrphanProof(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
