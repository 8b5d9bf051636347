package redistest

import (
	"os/exec"
	"syscall"
)

// orphanProof makes the kernel kill the server if the test process dies
// first (a test binary killed on timeout), so no redis-server outlives CI.
func orphanProof(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
