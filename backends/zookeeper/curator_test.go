package zookeeper_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// curatorClasspath is Debian's Apache Curator service discovery
// (libcurator-discovery-java 5.4); the jars' manifests name the rest.
var curatorClasspath = []string{
	"/usr/share/java/curator-x-discovery.jar", "/usr/share/java/curator-framework.jar",
	"/usr/share/java/curator-client.jar", "/usr/share/java/zookeeper.jar",
	"/usr/share/java/jackson-databind.jar", "/usr/share/java/guava.jar",
}

// curatorPeer compiles testdata/curator/CuratorPeer.java, a program on
// Curator's ServiceDiscovery with a Map payload, and returns a command
// builder for it.
func curatorPeer(t *testing.T) func(args ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	cp := strings.Join(curatorClasspath, ":")
	out, err := exec.Command("javac", "-d", dir, "-cp", cp, "testdata/curator/CuratorPeer.java").CombinedOutput()
	if err != nil {
		t.Fatalf("javac (scripts/test.sh installs default-jdk-headless and libcurator-discovery-java): %v\n%s", err, out)
	}
	return func(args ...string) *exec.Cmd {
		return exec.Command("java", append([]string{"-cp", dir + ":" + cp, "CuratorPeer"}, args...)...)
	}
}

// TestCuratorPeer: with layout=curator, Roster and Apache Curator's own
// service discovery read each other's instances on one ZooKeeper. A
// Curator registration appears in a Roster watch with its metadata and
// leaves it when Curator unregisters; a Roster registration is returned
// by Curator's queryForInstances with Roster's fields in its payload.
func TestCuratorPeer(t *testing.T) {
	s := zktest.Start(t)
	peer := curatorPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := registry.Open(ctx, s.URL("/services", "layout=curator&payload=map"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()

	// Curator registers; Roster follows.
	w, err := reg.Watch(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if snap, err := w.Next(ctx); err != nil || len(snap.Instances) != 0 {
		t.Fatalf("first state = %v, %v; want empty", snap.Instances, err)
	}
	java := peer("register", s.Addr(), "/services", "orders", "java-1", "127.0.0.1", "9090")
	stdin, _ := java.StdinPipe()
	stdout, _ := java.StdoutPipe()
	if err := java.Start(); err != nil {
		t.Fatal(err)
	}
	defer java.Wait()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "registered\n" {
		t.Fatalf("Curator peer: %q, %v", line, err)
	}
	snap, err := w.Next(ctx)
	if err != nil || len(snap.Instances) != 1 {
		t.Fatalf("after Curator registered: %v, %v", snap.Instances, err)
	}
	if in := snap.Instances[0]; in.ID != "java-1" || in.Address != "127.0.0.1:9090" || in.Metadata["team"] != "java" || in.Weight != 100 {
		t.Fatalf("Curator's instance read as %+v", in)
	}
	stdin.Close() // the peer unregisters and exits
	go io.Copy(io.Discard, stdout)
	if snap, err = w.Next(ctx); err != nil || len(snap.Instances) != 0 {
		t.Fatalf("after Curator unregistered: %v, %v", snap.Instances, err)
	}

	// Roster registers; Curator reads.
	lease, err := reg.Register(ctx, registry.Instance{Service: "orders", ID: "go-1", Address: "127.0.0.1:8080",
		Version: "v2", Zone: "z1", Tags: []string{"canary"}, Metadata: map[string]string{"team": "go"}})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Deregister(ctx)
	out, err := peer("query", s.Addr(), "/services", "orders").Output()
	if err != nil {
		t.Fatalf("Curator query: %v", err)
	}
	got := strings.TrimSpace(string(out))
	for _, want := range []string{"go-1 127.0.0.1 8080 ", "team=go", `"version":"v2"`, `"zone":"z1"`, `"tags":["canary"]`} {
		if !strings.Contains(got, want) {
			t.Errorf("Curator's queryForInstances = %q, want it to hold %q", got, want)
		}
	}
}

// TestCuratorSpringRecord reads a record as Spring Cloud Zookeeper
// writes it (ZookeeperInstance payload; the form of
// spring-cloud-zookeeper's ZookeeperServiceRegistry, see
// docs/backends/zookeeper.md).
func TestCuratorSpringRecord(t *testing.T) {
	s := zktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := zktest.Connect(ctx, s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	val, err := readFixture("spring-instance.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/services", "/services/user-service"} {
		if _, err := c.Create(p, nil, 0, worldACL); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create("/services/user-service/5f6a2c1e-9d7b-4c1a-8e3f-2b1d0c9a8e7f", val, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(ctx, s.URL("/services", "layout=curator"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	snap, err := reg.Lookup(ctx, "user-service")
	if err != nil || len(snap.Instances) != 1 {
		t.Fatalf("Lookup = %v, %v", snap.Instances, err)
	}
	in := snap.Instances[0]
	if in.Address != "127.0.0.1:8081" || in.Metadata["instance_status"] != "UP" || in.Version != "" {
		t.Fatalf("Spring's instance read as %+v", in)
	}
}

var worldACL = zk.WorldACL(zk.PermAll)

func readFixture(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", "curator", name))
}
