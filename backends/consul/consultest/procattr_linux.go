package consultest

import (
	"os/exec"
	"syscall"
)

// orphanProof makes the kernel kill the agent if the test process dies
// first (a test binary killed on timeout), so no agent outlives CI.
func orphanProof(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
