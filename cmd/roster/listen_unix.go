//go:build unix

package main

import (
	"net"
	"os"
	"sync"
	"syscall"
)

// umaskMu serializes the umask changes of listenUnix.
var umaskMu sync.Mutex

// listenUnix creates a Unix socket at path with permissions mode. The
// socket is born with at most mode (the umask is narrowed around bind),
// so no other user can connect in between, and a chmod then sets mode
// exactly: a wide umask (000) does not widen it, a narrow one not narrow.
// The umask is the process's: a file another goroutine creates meanwhile
// comes out narrower, never wider.
func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	umaskMu.Lock()
	old := syscall.Umask(0o777 &^ int(mode.Perm()))
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
