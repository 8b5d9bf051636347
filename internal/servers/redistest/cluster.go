package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/internal/loopback"
)

// Cluster is a Redis Cluster of masters only, on loopback.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// StartCluster starts n redis-server processes with cluster mode on,
// joins them with redis-cli --cluster create (no replicas) and waits until
// every node reports cluster_state:ok. The nodes stop at test cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := findServer()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := findCLI(bin)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	for range n {
		s := &Server{bin: bin, dir: t.TempDir(), args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
		}}
		var err error
		for range 10 {
			// The cluster bus listens on port+10000: both must be free.
			if s.port, err = clusterPort(); err != nil {
				continue
			}
			if err = s.start(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: start cluster node: %v", err)
		}
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitOK waits until every node reports cluster_state:ok, for 30s at most.
func (c *Cluster) waitOK(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		cl := s.Client()
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				return fmt.Errorf("redistest: node %s not ok within 30s: %v %s", s.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return nil
}

// Restart restarts every node, one after the other, as Server.Restart
// does (each keeps its cluster configuration, nodes.conf, either way),
// and waits until the cluster is whole again.
func (c *Cluster) Restart(ctx context.Context, keepData bool) error {
	for _, n := range c.Nodes {
		if err := n.Restart(ctx, keepData); err != nil {
			return err
		}
	}
	return c.waitOK(ctx)
}

func clusterPort() (int, error) {
	for range 50 {
		p, err := loopback.FreePort()
		if err != nil {
			return 0, err
		}
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("redistest: no port p with p and p+10000 free")
}

// Client returns a cluster client over every node; the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}
