//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The agent's socket has --socket-mode (0660 by default) whatever the
// umask: 000 would let every user of the host pick and register, 077
// would lock out the services' group.
func TestAgentSocketModeIgnoresUmask(t *testing.T) {
	_, url := openReg(t, "/agent-socket-mode/")
	for _, c := range []struct {
		umask int
		args  []string
		want  os.FileMode
	}{
		{0o000, nil, 0o660},
		{0o077, nil, 0o660},
		{0o000, []string{"--socket-mode", "0600"}, 0o600},
	} {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		args := append([]string{"--registry", url, "--listen", "unix:" + sock}, c.args...)
		old := syscall.Umask(c.umask) // the agent inherits it
		p := startAgent(t, args...)
		syscall.Umask(old)
		fi, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("umask %03o, %q: socket mode %04o, want %04o", c.umask, c.args, got, c.want)
		}
		p.stop(t)
	}
}

func TestAgentBadSocketMode(t *testing.T) {
	for _, mode := range []string{"999", "01000", "rw", ""} {
		_, stderr, code := run(t, 30*time.Second, "agent", "--socket-mode", mode)
		if code == 0 || !strings.Contains(stderr, "not a permission mode") {
			t.Errorf("--socket-mode %q: exit %d, stderr %q", mode, code, stderr)
		}
	}
}
