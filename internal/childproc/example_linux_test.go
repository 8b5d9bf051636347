package childproc_test

import (
	"fmt"
	"os/exec"
	"syscall"

	"github.com/roster-go/roster/internal/childproc"
)

// OrphanProof is set on a command before it starts: if this process dies,
// even by SIGKILL, the kernel kills the child too.
func ExampleOrphanProof() {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kept
	childproc.OrphanProof(cmd)
	fmt.Println(cmd.SysProcAttr.Pdeathsig == syscall.SIGKILL, cmd.SysProcAttr.Setpgid)
	// Output: true true
}
