package main

// Linux only: the kernel kills orphans on request (Pdeathsig) only there.

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// If the sidecar dies, CMD dies with it.
func TestSidecarChildDiesWithIt(t *testing.T) {
	_, url := openReg(t, "/cli-orphan")
	s := startSidecar(t, []string{childEnv + "=wait"},
		"--registry", url, "--service", "orphan", "--addr", "127.0.0.1:8092", "--ttl", "3s")
	var pid int
	if _, err := fmt.Sscanf(s.line(t, "running", 20*time.Second), "running %d", &pid); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	s.cmd.Process.Kill() // the sidecar only
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("CMD (pid %d) outlived the sidecar by 10 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
