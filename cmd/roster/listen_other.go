//go:build !unix

package main

import (
	"net"
	"os"
)

// listenUnix creates a Unix socket at path; without Unix permissions,
// mode is not applied.
func listenUnix(path string, _ os.FileMode) (net.Listener, error) {
	return net.Listen("unix", path)
}
