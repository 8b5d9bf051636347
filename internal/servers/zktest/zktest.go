// Package zktest starts private ZooKeeper servers for tests. Call [Start]
// for a server and [NewHarness] for the ZooKeeper backend's conformance
// harness on it:
//
//	conformance.Run(t, zktest.NewHarness(t, zktest.Start(t)))
//
// [StartEnsemble] starts an ensemble, and [StartTLS] a server that also
// serves TLS. Each runs Debian's zookeeper package, ZooKeeper 3.8 under
// Apache-2.0, on free loopback ports. Its configuration, data and log sit
// in a temporary directory.
//
// The JVM is $JAVA_HOME/bin/java, else java on PATH. The class path is
// $ROSTER_ZOOKEEPER_CLASSPATH if set. Else it is Debian's
// /usr/share/java/zookeeper.jar, whose manifest names its dependencies,
// plus slf4j-simple for the log. netty-codec, from libnetty-java, serves
// the TLS port. scripts/test.sh installs the package. It never skips. A
// missing server is an error that says how to get one.
package zktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/testserver"
)

// EnvClasspath names the environment variable that overrides the server's
// Java class path.
const EnvClasspath = "ROSTER_ZOOKEEPER_CLASSPATH"

// defaultClasspath is where Debian's zookeeper package puts the server.
// netty-codec (of libnetty-java, a dependency of the package) is missing
// from zookeeper.jar's manifest, and the secure client port needs it.
const defaultClasspath = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar"

// TickTime is the servers' tick: sessions expire on tick boundaries, and
// the session timeouts they grant lie in [1s, 60s].
const TickTime = 500 * time.Millisecond

// findJava returns the java binary and the class path, checking that the
// class path's files exist.
func findJava() (string, string, error) {
	cp := os.Getenv(EnvClasspath)
	if cp == "" {
		cp = defaultClasspath
	}
	for _, f := range filepath.SplitList(cp) {
		if _, err := os.Stat(f); err != nil {
			return "", "", fmt.Errorf("zktest: class path %s: %v; install Debian's zookeeper and libslf4j-java packages "+
				"(apt-get install -y zookeeper; scripts/test.sh does this) or set %s", cp, err, EnvClasspath)
		}
	}
	java := "java"
	if h := os.Getenv("JAVA_HOME"); h != "" {
		java = filepath.Join(h, "bin", "java")
	}
	p, err := exec.LookPath(java)
	if err != nil {
		return "", "", fmt.Errorf("zktest: no Java runtime (%v): apt-get install -y zookeeper pulls one in", err)
	}
	return p, cp, nil
}

// Server is one ZooKeeper server process, standalone or a member of an
// Ensemble. Its methods are safe for concurrent use.
type Server struct {
	java, classpath string
	dir             testserver.Dir
	id              int
	clientPort      int
	securePort      int       // TLS client port, 0 without TLS
	tls             *TLSFiles // nil: plain TCP only
	peers           string    // the ensemble's server.N lines, empty when standalone

	proc testserver.Process
}

// Start starts a standalone server and stops it, removing its directory,
// when the test ends. It fails the test if the server cannot start.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := NewServer("")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// NewServer starts a standalone server in dir (a new temporary directory
// if dir is empty, removed by Close) and waits until it serves. The caller
// closes it.
func NewServer(dir string) (*Server, error) { return newStandalone(dir, nil) }

func newStandalone(dir string, tls *TLSFiles) (*Server, error) {
	s, err := newServer(dir, 1)
	if err != nil {
		return nil, err
	}
	if tls != nil {
		if err := s.setTLS(*tls); err != nil {
			s.dir.Remove()
			return nil, err
		}
	}
	var lastErr error
	for range 3 { // a free port may be taken by someone else before the server binds it
		if s.clientPort, lastErr = loopback.FreePort(); lastErr != nil {
			break
		}
		if s.tls != nil {
			if s.securePort, lastErr = loopback.FreePort(); lastErr != nil {
				break
			}
		}
		if lastErr = s.launch(); lastErr == nil {
			if lastErr = s.waitReady(30 * time.Second); lastErr == nil {
				return s, nil
			}
			s.Stop()
		}
	}
	s.dir.Remove()
	return nil, lastErr
}

func newServer(dir string, id int) (*Server, error) {
	java, cp, err := findJava()
	if err != nil {
		return nil, err
	}
	s := &Server{java: java, classpath: cp, id: id}
	if s.dir, err = testserver.NewDir(dir, "roster-zk-"); err != nil {
		return nil, fmt.Errorf("zktest: %w", err)
	}
	return s, nil
}

// Addr is the host:port clients connect to.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort)) }

// URL returns the registry URL of the server, zk://127.0.0.1:<port><root>,
// followed by ?query if query is not empty (for example "session_timeout=3s").
func (s *Server) URL(root, query string) string { return url([]string{s.Addr()}, root, query) }

func url(addrs []string, root, query string) string {
	return testserver.URL("zk://"+strings.Join(addrs, ",")+root, query)
}

// logPath is the file the server writes its log to (level warn).
func (s *Server) logPath() string { return filepath.Join(s.dir.Path, "server.log") }

// logTail returns the last n bytes of the server's log.
func (s *Server) logTail(n int) string { return testserver.LogTail(s.logPath(), n) }

func (s *Server) dataDir() string { return filepath.Join(s.dir.Path, "data") }

// writeConfig writes zoo.cfg and, in an ensemble, the data dir's myid.
// forceSync=no: a killed process loses nothing the kernel already has,
// which is all Restart(keepData) needs, and fsync per write would make the
// suite's writes crawl on a shared disk.
func (s *Server) writeConfig() (string, error) {
	if err := os.MkdirAll(s.dataDir(), 0o755); err != nil {
		return "", fmt.Errorf("zktest: %w", err)
	}
	cfg := fmt.Sprintf(`tickTime=%d
initLimit=20
syncLimit=10
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=%d
maxSessionTimeout=60000
forceSync=no
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr,conf
`, TickTime.Milliseconds(), s.dataDir(), s.clientPort, 2*TickTime.Milliseconds())
	cfg += s.tlsConfig()
	if s.peers != "" {
		cfg += s.peers
		if err := os.WriteFile(filepath.Join(s.dataDir(), "myid"), []byte(strconv.Itoa(s.id)+"\n"), 0o644); err != nil {
			return "", fmt.Errorf("zktest: %w", err)
		}
	}
	p := filepath.Join(s.dir.Path, "zoo.cfg")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		return "", fmt.Errorf("zktest: %w", err)
	}
	return p, nil
}

// launch starts the JVM; it does not wait for the server to serve.
func (s *Server) launch() error {
	if s.proc.Running() {
		return errors.New("zktest: server already running")
	}
	cfg, err := s.writeConfig()
	if err != nil {
		return err
	}
	// A small serial-GC heap and the client compiler: the JVM starts in
	// well under a second and a test server needs nothing more.
	cmd := exec.Command(s.java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dzookeeper.jmx.log4j.disable=true",
		// Empty service (container) znodes go within a second, not a minute,
		// so that the tests see the driver live with their removal.
		"-Dznode.container.checkIntervalMs=1000",
		"-cp", s.classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg)
	cmd.Dir = s.dir.Path
	if err := s.proc.Start(cmd, s.logPath()); err != nil {
		return fmt.Errorf("zktest: %w", err)
	}
	return nil
}

// waitReady polls the srvr command until the server reports its mode
// (standalone, leader or follower): it then serves clients. The port was
// free when chosen, but another test's server may have bound it first and
// would answer while this one exits: the server must report this one's
// data directory (conf).
func (s *Server) waitReady(limit time.Duration) error {
	exited := s.proc.Done()
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-exited:
			return fmt.Errorf("zktest: server %d on %s exited during start\n%s", s.id, s.Addr(), s.logTail(4000))
		default:
		}
		if strings.Contains(s.fourLetter("srvr"), "Mode: ") {
			if conf := s.fourLetter("conf"); !strings.Contains(conf, "dataDir="+s.dataDir()+"/") &&
				!strings.Contains(conf, "dataDir="+s.dataDir()+"\n") {
				return fmt.Errorf("zktest: the server on %s is another one (not in %s)", s.Addr(), s.dataDir())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zktest: server %d on %s not serving within %v\n%s", s.id, s.Addr(), limit, s.logTail(4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fourLetter sends one of ZooKeeper's four-letter commands and returns the
// answer, empty on error.
func (s *Server) fourLetter(cmd string) string {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return ""
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

// Mode is the server's role as srvr reports it: standalone, leader or
// follower; empty while it does not serve.
func (s *Server) Mode() string {
	for _, line := range strings.Split(s.fourLetter("srvr"), "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return m
		}
	}
	return ""
}

// Stop kills the server (SIGKILL, as a crash would), keeping its
// directory; Start or Restart starts it again. It is safe to call twice.
func (s *Server) Stop() { s.proc.Kill() }

// Start starts a stopped server again on the same ports and waits until
// it serves. keepData false deletes its data first: it comes back empty,
// its transaction counter back at zero. A member of an ensemble serves
// only once a quorum is up.
func (s *Server) Start(ctx context.Context, keepData bool) error {
	if !keepData {
		if err := os.RemoveAll(s.dataDir()); err != nil {
			return err
		}
	}
	if err := s.launch(); err != nil {
		return err
	}
	limit := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		limit = time.Until(d)
	}
	return s.waitReady(limit)
}

// Restart kills the server (as a crash would) and starts it again on the
// same ports, with or without its data.
func (s *Server) Restart(ctx context.Context, keepData bool) error {
	s.Stop()
	return s.Start(ctx, keepData)
}

// Close stops the server and removes its directory if NewServer created
// it. It is safe to call twice.
func (s *Server) Close() error {
	s.Stop()
	return s.dir.Remove()
}
