package zktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/internal/servers/zktest"
)

// TestRestartKeepsOrLosesData: a persistent znode survives a kill and a
// start with the data directory, and not one without.
func TestRestartKeepsOrLosesData(t *testing.T) {
	s := zktest.Start(t)
	write := func() {
		c, err := zktest.Connect(t.Context(), s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Create("/kept", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := zktest.Connect(ctx, s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ok, _, err := c.Exists("/kept")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	write()
	if err := s.Restart(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatal("znode lost by a restart that keeps the data")
	}
	if err := s.Restart(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("znode kept by a restart without the data")
	}
}

// TestMissingClasspathSaysHowToGetIt: a wrong class path is an error that
// names the variable and the package, not a skip.
func TestMissingClasspathSaysHowToGetIt(t *testing.T) {
	t.Setenv(zktest.EnvClasspath, "/nonexistent/zookeeper.jar")
	_, err := zktest.NewServer("")
	if err == nil || !strings.Contains(err.Error(), zktest.EnvClasspath) || !strings.Contains(err.Error(), "apt-get install") {
		t.Fatalf("NewServer with a missing jar: %v", err)
	}
}

// TestEnsembleSizeChecked: an even or too small ensemble is refused.
func TestEnsembleSizeChecked(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		if _, err := zktest.NewEnsemble(n); err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("NewEnsemble(%d): %v", n, err)
		}
	}
}
