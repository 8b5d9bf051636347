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

// FailoverOptions secure a Failover.
type FailoverOptions struct {
	// TLS, when set, makes every server (master, replica, Sentinel)
	// listen for mutual TLS too (see StartTLS), replicate over TLS, and the
	// Sentinel monitor the master's TLS port, so that clients reach the
	// master it names over TLS. Use the servers' TLSAddr.
	TLS *TLSFiles
	// SentinelPassword, when set, is the Sentinel's requirepass.
	SentinelPassword string
}

// StartFailover starts a master, a replica of it and a Sentinel that
// monitors them as "mymaster" (quorum 1, down after 1s), and waits until
// the Sentinel knows the replica. Everything stops at test cleanup.
func StartFailover(t testing.TB) *Failover { return StartFailoverWith(t, FailoverOptions{}) }

// StartFailoverWith is StartFailover with TLS or a Sentinel password.
func StartFailoverWith(t testing.TB, o FailoverOptions) *Failover {
	t.Helper()
	f := &Failover{Name: "mymaster"}
	masterPort := func() int { return f.Master.Port() }
	if o.TLS != nil {
		f.Master = StartTLS(t, *o.TLS, "--tls-replication", "yes")
		f.Replica = StartTLS(t, *o.TLS, "--tls-replication", "yes", "--replicaof", "127.0.0.1", strconv.Itoa(f.Master.tlsPort))
		masterPort = func() int { return f.Master.tlsPort }
	} else {
		f.Master = Start(t)
		f.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(f.Master.Port()))
	}
	f.Sentinel = startSentinel(t, f.Name, masterPort(), o)
	f.waitReplica(t)
	return f
}

func startSentinel(t testing.TB, name string, masterPort int, o FailoverOptions) *Server {
	bin, err := findServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir, tls: o.TLS, pass: o.SentinelPassword}
	for range 5 {
		if s.port, err = loopback.FreePort(); err != nil {
			t.Fatal(err)
		}
		if s.tlsPort, err = loopback.FreePort(); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		cfg := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			s.port, name, masterPort, name, name)
		if o.SentinelPassword != "" {
			cfg += fmt.Sprintf("requirepass %q\n", o.SentinelPassword)
		}
		if o.TLS != nil {
			cfg += "tls-replication yes\n" // Sentinel talks to the servers over TLS
		}
		if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		// redis-server <conf> --sentinel: the config file must come first.
		s.pre = []string{conf, "--sentinel"}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: start sentinel: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// waitReplica waits until the Sentinel knows the replica.
func (f *Failover) waitReplica(t testing.TB) {
	c := f.Sentinel.Client()
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		reps, err := c.Do(context.Background(), "SENTINEL", "REPLICAS", f.Name).Slice()
		if err == nil && len(reps) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel never saw the replica: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
