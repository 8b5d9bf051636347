package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/loopback"
)

// Failover is a master, one replica and one Sentinel on loopback.
type Failover struct {
	Master, Replica, Sentinel *Server
	Name                      string // the master's name in Sentinel
}

// StartFailover starts a master, a replica of it and a Sentinel that
// monitors them as "mymaster" (quorum 1, down after 1s), and waits until
// the Sentinel knows the replica. Everything stops at test cleanup.
func StartFailover(t testing.TB) *Failover {
	t.Helper()
	f := &Failover{Name: "mymaster", Master: Start(t)}
	f.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(f.Master.Port()))
	bin, err := FindServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir}
	for range 5 {
		if s.port, err = loopback.FreePort(); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		cfg := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			s.port, f.Name, f.Master.Port(), f.Name, f.Name)
		if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		// redis-server <conf> --sentinel: the config file must come first.
		s.args = nil
		s.pre = []string{conf, "--sentinel"}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: start sentinel: %v", err)
	}
	t.Cleanup(s.Stop)
	f.Sentinel = s
	c := s.Client()
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		reps, err := c.Do(context.Background(), "SENTINEL", "REPLICAS", f.Name).Slice()
		if err == nil && len(reps) > 0 {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel never saw the replica: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
