// Package kubetest starts a real kube-apiserver for tests. Call [Start]
// for a [Server], and [NewHarness] for the Kubernetes backend's
// conformance harness on it:
//
//	s, err := kubetest.Start(ctx)
//	defer s.Close()
//	conformance.Run(t, kubetest.NewHarness(s))
//
// The apiserver runs over an etcd embedded in the test process (etcdtest),
// on free loopback ports, with throwaway keys. It authorizes with RBAC.
// [Token] is an administrator's static bearer token. [LimitedToken] has no
// rights until a test binds a Role to it.
//
// The binary is kube-apiserver v1.34.2, Apache-2.0. It is
// $ROSTER_KUBE_APISERVER if set, else ~/.cache/roster/kube-apiserver-v1.34.2,
// which scripts/test.sh builds once from the Go module proxy (tools/kube).
// A missing binary is an error, never a skip.
//
// No controller-manager runs unless a test calls [Server.StartControllers]:
// then kube-controller-manager v1.34.2 (built as the apiserver is) runs
// the controllers it names, such as "endpointslice", which derives
// EndpointSlices from Services and Pods as in a cluster. Without it
// nothing garbage-collects owner references or deletes namespaces. So
// tests use fresh names instead of deleting namespaces. Start takes about
// 3s and 260 MB. A test package therefore shares one Server (TestMain),
// and starts private ones only for faults.
package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/etcdtest"
	"github.com/roster-go/roster/internal/testserver"
)

// envBin names the environment variable that points at the binary.
const envBin = "ROSTER_KUBE_APISERVER"

// version is the Kubernetes release scripts/test.sh builds.
const version = "v1.34.2"

// Token is the bearer token of the Server's administrator, a member of
// system:masters. It is a test credential, valid only on test servers.
const Token = "roster-test-token"

// LimitedToken is the bearer token of the user LimitedUser, in no group
// but system:authenticated: the apiserver authorizes with RBAC, so this
// user may do only what a test grants it with a Role and RoleBinding.
const LimitedToken = "roster-limited-token"

// LimitedUser is the name of LimitedToken's user, for RoleBindings.
const LimitedUser = "roster-limited"

// findBinary returns the path of kube-apiserver: $ROSTER_KUBE_APISERVER,
// then ~/.cache/roster/kube-apiserver-v1.34.2.
func findBinary() (string, error) {
	return testserver.Binary{Pkg: "kubetest", Name: "kube-apiserver", Version: version,
		Env: envBin, Cached: "kube-apiserver-" + version}.Find()
}

// Server is a kube-apiserver on its own embedded etcd. Its methods are
// safe for concurrent use; faults are applied one at a time.
type Server struct {
	bin  string
	dir  string
	port int
	etcd *etcdtest.Cluster

	mu     sync.Mutex
	proc   testserver.Process
	kcm    testserver.Process // StartControllers
	closed bool

	proxies testserver.Proxies // the harness's Links, closed with the Server
}

// Start starts etcd and kube-apiserver and waits until /readyz answers.
// Close stops both and removes their files.
func Start(ctx context.Context) (*Server, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "roster-kubetest-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s := &Server{bin: bin, dir: dir}
	if err := s.writeCredentials(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if s.etcd, err = etcdtest.Start(ctx, etcdtest.Config{}); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if s.port, err = loopback.FreePort(); err == nil {
		err = s.start(ctx)
	}
	if err != nil {
		s.etcd.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// writeCredentials writes the service-account signing key and the token
// file; the serving certificate kube-apiserver writes itself into certs/.
func (s *Server) writeCredentials() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(s.dir, "sa.key"), pemKey, 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	tokens := Token + `,roster-test,1000,"system:masters"` + "\n" + LimitedToken + "," + LimitedUser + ",1001\n"
	if err := os.WriteFile(filepath.Join(s.dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	return nil
}

func (s *Server) args() []string {
	return []string{
		"--etcd-servers=" + s.etcd.Endpoints()[0],
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.port),
		"--cert-dir=" + filepath.Join(s.dir, "certs"),
		"--service-cluster-ip-range=10.96.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(s.dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(s.dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(s.dir, "tokens.csv"),
		// RBAC, so that tests can prove the documented Role is enough:
		// system:masters (Token) passes every check without a binding.
		"--authorization-mode=RBAC",
		// A loopback advertise address makes the default "lease"
		// reconciler log an error every 10s.
		"--endpoint-reconciler-type=none",
		// Without it SIGTERM waits up to 60s while a watch is open.
		"--shutdown-watch-termination-grace-period=1s",
	}
}

// start runs the binary and waits for /readyz (s.mu held or not yet shared).
func (s *Server) start(ctx context.Context) error {
	if err := s.proc.Start(exec.Command(s.bin, s.args()...), s.logFile()); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := s.waitReady(ctx); err != nil {
		s.stop()
		return fmt.Errorf("%w (log: %s)", err, s.logFile())
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	return pollOK(ctx, "https://"+s.Addr()+"/readyz", "Bearer "+Token, s.proc.Done(), "kube-apiserver")
}

// pollOK polls url until it answers 200, for at most a minute, or until
// the process whose exit done signals is gone. TLS is unverified for
// this probe only: a certificate may not be written yet when polling
// starts, and the controller manager's is self-signed.
func pollOK(ctx context.Context, url, auth string, done <-chan struct{}, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for {
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("kubetest: %s exited before it was ready", name)
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %s not ready: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 10s.
func (s *Server) stop() { s.proc.Stop(10 * time.Second) }

// Addr is the apiserver's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// caFile is the PEM file that verifies the apiserver's certificate.
func (s *Server) caFile() string { return filepath.Join(s.dir, "certs", "apiserver.crt") }

// logFile is where the apiserver's output goes.
func (s *Server) logFile() string { return filepath.Join(s.dir, "apiserver.log") }

// Kubeconfig writes a kubeconfig that reaches the apiserver at addr (Addr,
// or a proxy in front of it) as the test user with the given default
// namespace, and returns its path. The file holds the token: it lives in
// the Server's private directory, removed by Close.
func (s *Server) Kubeconfig(addr, namespace string) (string, error) {
	return s.KubeconfigFor(Access{Addr: addr, Namespace: namespace})
}

// Access is what a kubeconfig written by KubeconfigFor holds.
type Access struct {
	Addr      string // host:port of the apiserver; Server.Addr when empty
	Namespace string // the context's namespace
	Token     string // bearer token; Token when empty
	CAFile    string // CA bundle that verifies the apiserver; the Server's when empty
}

// KubeconfigFor writes a kubeconfig of a as KubeconfigFor does, for tests
// of other users and of misconfigurations (a foreign CA, a revoked
// token), and returns its path.
func (s *Server) KubeconfigFor(a Access) (string, error) {
	if a.Addr == "" {
		a.Addr = s.Addr()
	}
	if a.Token == "" {
		a.Token = Token
	}
	if a.CAFile == "" {
		a.CAFile = s.caFile()
	}
	f, err := os.CreateTemp(s.dir, "kubeconfig-")
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, kubeconfig, a.Addr, a.CAFile, a.Namespace, a.Token)
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	return f.Name(), nil
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: https://%s
    certificate-authority: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: kubetest
    namespace: %s
current-context: kubetest
users:
- name: kubetest
  user:
    token: %s
`

// Restart stops the apiserver and starts it again on the same port. With
// keepData false etcd is wiped first, so the apiserver comes back on
// empty storage (it recreates the default namespaces).
func (s *Server) Restart(ctx context.Context, keepData bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kubetest: server closed")
	}
	s.stop()
	if !keepData {
		if err := s.etcd.Wipe(ctx); err != nil {
			return err
		}
	}
	return s.start(ctx)
}

// Kill stops the apiserver abruptly (SIGKILL, as a crash would), keeping
// etcd and its data; Start starts it again. It is safe to call twice.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.Kill()
}

// Start starts a killed apiserver again on the same port and waits for
// /readyz. With keepData false etcd is wiped first, as in Restart.
func (s *Server) Start(ctx context.Context, keepData bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("kubetest: server closed")
	}
	if !keepData {
		if err := s.etcd.Wipe(ctx); err != nil {
			return err
		}
	}
	return s.start(ctx)
}

// Close stops the apiserver and etcd and removes their files.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.proxies.Close()
	s.kcm.Stop(10 * time.Second)
	s.stop()
	err := s.etcd.Close()
	return errors.Join(err, os.RemoveAll(s.dir))
}
