package zktest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/loopback"
)

// Ensemble is a ZooKeeper ensemble of servers on loopback ports, each in a
// directory of its own under one temporary directory.
type Ensemble struct {
	Servers []*Server
	dir     string
}

// StartEnsemble starts an ensemble of n servers and closes it when the
// test ends. It fails the test if the ensemble does not serve.
func StartEnsemble(tb testing.TB, n int) *Ensemble {
	tb.Helper()
	e, err := newEnsemble(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// newEnsemble starts n servers (n odd, at least 3) and waits until every
// one serves. The caller closes it.
func newEnsemble(n int) (*Ensemble, error) {
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("zktest: an ensemble of %d servers: want an odd number, at least 3", n)
	}
	dir, err := os.MkdirTemp("", "roster-zk-ensemble-")
	if err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	e := &Ensemble{dir: dir}
	var peers strings.Builder
	for i := 1; i <= n; i++ {
		s, err := newServer(filepath.Join(dir, fmt.Sprint(i)), i)
		if err == nil {
			err = os.MkdirAll(s.dir.Path, 0o755)
		}
		var ports [3]int
		for j := range ports {
			if err == nil {
				ports[j], err = loopback.FreePort()
			}
		}
		if err != nil {
			e.Close()
			return nil, err
		}
		s.clientPort = ports[0]
		fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i, ports[1], ports[2])
		e.Servers = append(e.Servers, s)
	}
	if err := e.launchAll(peers.String()); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Ensemble) launchAll(peers string) error {
	for _, s := range e.Servers {
		s.peers = peers
		if err := s.launch(); err != nil {
			return err
		}
	}
	var errs []error
	for _, s := range e.Servers {
		errs = append(errs, s.waitReady(60*time.Second))
	}
	return errors.Join(errs...)
}

// Addrs are the servers' client addresses.
func (e *Ensemble) Addrs() []string {
	var out []string
	for _, s := range e.Servers {
		out = append(out, s.Addr())
	}
	return out
}

// URL returns the registry URL naming every server.
func (e *Ensemble) URL(root, query string) string { return url(e.Addrs(), root, query) }

// Leader returns the index of the server that leads, or -1.
func (e *Ensemble) Leader() int {
	for i, s := range e.Servers {
		if s.Mode() == "leader" {
			return i
		}
	}
	return -1
}

// Close stops every server and removes the ensemble's directory.
func (e *Ensemble) Close() error {
	for _, s := range e.Servers {
		s.Stop()
	}
	return os.RemoveAll(e.dir)
}
