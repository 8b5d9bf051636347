// Package etcdtest runs real etcd servers in-process for tests, on
// go.etcd.io/etcd/server/v3/embed. Call [NewHarness] to run the
// conformance suite on a fresh cluster:
//
//	conformance.Run(t, etcdtest.NewHarness(t, etcdtest.Config{Members: 3}))
//
// [Start] gives the [Cluster] itself. It runs one member or several, on
// free loopback ports, with data in a temporary directory. The
// conformance tests of backends/etcd run on it.
//
// A Cluster offers the faults a registry must survive. It stops and
// restarts one member, the leader too. It restarts the whole cluster with
// or without its data (Wipe). Kill, then Start, makes an outage of chosen
// length. It compacts the history, and Link cuts one client off through a
// TCP proxy.
//
// Clients reach each member through a small proxy of the Cluster's own
// (Endpoints), unless Config.DirectClients is set. Stopping a member first
// drops the proxied connections, so to clients it looks like a crash.
// Close clients before closing the Cluster all the same.
//
// The server logs nothing unless Config.Logger is set. Members start and
// stop through the same code as backends/etcd/etcdlocal, the package for a
// development etcd outside tests.
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/roster-go/roster/internal/loopback"
	"github.com/roster-go/roster/internal/servers/etcdembed"
	"github.com/roster-go/roster/internal/testserver"
)

// Config describes a Cluster.
type Config struct {
	// Members is the number of members, 1 by default.
	Members int
	// Dir holds the members' data. Default: a new temporary directory,
	// removed by Close. A given Dir is left in place after Close, but Start
	// always begins a new, empty cluster: member data an earlier Start left
	// there is removed.
	Dir string
	// DirectClients makes Endpoints point at the members themselves rather
	// than at the Cluster's proxies: one hop less (for benchmarks).
	DirectClients bool
	// Logger receives the servers' logs. Default: none.
	Logger *zap.Logger
	// StartTimeout bounds each start of the cluster or a member. Default 30s.
	StartTimeout time.Duration
	// TLS, when set, serves clients over TLS with this certificate and key
	// (PEM files; the certificate must be valid for 127.0.0.1). CAFile is
	// the CA that signed it: Client and URL use it to verify the server.
	TLS *TLSFiles
	// Auth, when set, turns authentication on (see Auth).
	Auth *Auth
}

// TLSFiles names the PEM files of a server certificate.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
	// ClientCertAuth makes the servers require a client certificate signed
	// by CAFile; Client and URL present CertFile (testca's certificates
	// serve both ends).
	ClientCertAuth bool
}

// Cluster is a running etcd cluster. Its methods are safe for concurrent
// use, but faults are applied one at a time.
type Cluster struct {
	cfg   Config
	dir   testserver.Dir
	token string
	// authGen is gen+1 once Config.Auth is set up on generation gen.
	authGen int

	mu      sync.Mutex
	gen     int // data generation: bumped by Wipe
	members []*member
	links   map[*Link]struct{}
	closed  bool
}

type member struct {
	name      string
	clientURL url.URL
	peerURL   url.URL
	front     *loopback.Proxy   // nil with DirectClients
	e         *etcdembed.Member // nil while stopped
}

// Start starts a cluster and waits until every member is ready.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Members <= 0 {
		cfg.Members = 1
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	c := &Cluster{cfg: cfg, token: "roster-etcdtest", links: map[*Link]struct{}{}}
	var err error
	if c.dir, err = testserver.NewDir(cfg.Dir, "roster-etcdtest-"); err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	// Free ports can be taken between FreePort and Listen: try again then.
	for attempt := 0; attempt < 3; attempt++ {
		if err = c.allocate(); err != nil {
			break
		}
		for i := range c.members {
			os.RemoveAll(c.memberDir(i))
		}
		if err = c.startAll(ctx); err == nil {
			return c, nil
		}
		c.stopAll()
		c.closeFronts()
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	c.dir.Remove()
	return nil, err
}

func (c *Cluster) allocate() error {
	c.members = nil
	for i := 0; i < c.cfg.Members; i++ {
		cp, err1 := loopback.FreePort()
		pp, err2 := loopback.FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("etcdtest: free port: %w", err)
		}
		m := &member{
			name:      "m" + strconv.Itoa(i),
			clientURL: url.URL{Scheme: c.clientScheme(), Host: "127.0.0.1:" + strconv.Itoa(cp)},
			peerURL:   url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(pp)},
		}
		if !c.cfg.DirectClients {
			p, err := loopback.NewProxy(m.clientURL.Host)
			if err != nil {
				c.closeFronts()
				return fmt.Errorf("etcdtest: proxy: %w", err)
			}
			m.front = p
		}
		c.members = append(c.members, m)
	}
	return nil
}

func (c *Cluster) clientScheme() string {
	if c.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

func (c *Cluster) memberDir(i int) string {
	return filepath.Join(c.dir.Path, fmt.Sprintf("gen%d-%s", c.gen, c.members[i].name))
}

func (c *Cluster) spec(i int) etcdembed.Spec {
	m := c.members[i]
	var ic []string
	for _, o := range c.members {
		ic = append(ic, o.name+"="+o.peerURL.String())
	}
	s := etcdembed.Spec{
		Name:           m.name,
		Dir:            c.memberDir(i),
		ClientURL:      m.clientURL,
		PeerURL:        m.peerURL,
		InitialCluster: strings.Join(ic, ","),
		Token:          c.token,
		NoFsync:        true, // test data: speed over durability
		CheapPasswords: c.cfg.Auth != nil,
		Logger:         c.cfg.Logger.Named(m.name),
	}
	if c.cfg.TLS != nil {
		s.ClientTLS = transport.TLSInfo{CertFile: c.cfg.TLS.CertFile, KeyFile: c.cfg.TLS.KeyFile}
		if c.cfg.TLS.ClientCertAuth {
			s.ClientTLS.ClientCertAuth, s.ClientTLS.TrustedCAFile = true, c.cfg.TLS.CAFile
		}
	}
	return s
}

// startAll starts every stopped member and waits for all to be ready.
func (c *Cluster) startAll(ctx context.Context) error {
	for i, m := range c.members {
		if m.e != nil {
			continue
		}
		e, err := etcdembed.Start(c.spec(i))
		if err != nil {
			return fmt.Errorf("etcdtest: start %s: %w", m.name, err)
		}
		m.e = e
	}
	for _, m := range c.members {
		if err := c.waitReady(ctx, m); err != nil {
			return err
		}
	}
	return c.enableAuth(ctx)
}

func (c *Cluster) waitReady(ctx context.Context, m *member) error {
	if err := m.e.WaitReady(ctx, c.cfg.StartTimeout); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.name, err)
	}
	return nil
}

// stop stops one member, dropping proxied client connections first.
func (c *Cluster) stop(m *member) {
	if m.e == nil {
		return
	}
	if m.front != nil {
		_ = m.front.SetConnected(context.Background(), false)
	}
	m.e.Close()
	m.e = nil
	if m.front != nil {
		// Let clients reach the stopped member's address again: connections
		// are accepted and closed, as a dead server's port would refuse them.
		_ = m.front.SetConnected(context.Background(), true)
	}
}

func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(m) }()
	}
	wg.Wait()
}

func (c *Cluster) closeFronts() {
	for _, m := range c.members {
		if m.front != nil {
			m.front.Close()
			m.front = nil
		}
	}
}

// Members returns the number of members.
func (c *Cluster) Members() int { return len(c.members) }

// Endpoints returns the client URLs ("http://127.0.0.1:port", https with
// TLS), one per member, for clientv3.Config.Endpoints.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, c.clientScheme()+"://"+c.clientHost(m))
	}
	return out
}

func (c *Cluster) clientHost(m *member) string {
	if m.front != nil {
		return m.front.Addr()
	}
	return m.clientURL.Host
}

// URL returns a Roster registry URL for the cluster, such as
// "etcd://127.0.0.1:40001,127.0.0.1:40003?prefix=/roster" (etcds:// with
// ca_file under TLS). Extra query options (for example
// "progress_interval=1s") are appended as given.
func (c *Cluster) URL(prefix string, options ...string) string {
	var hosts []string
	for _, m := range c.members {
		hosts = append(hosts, c.clientHost(m))
	}
	return c.registryURL(hosts, prefix, options)
}

func (c *Cluster) registryURL(hosts []string, prefix string, options []string) string {
	var caFile string
	if c.cfg.TLS != nil {
		caFile = c.cfg.TLS.CAFile
		if c.cfg.TLS.ClientCertAuth {
			options = append([]string{"cert_file=" + url.QueryEscape(c.cfg.TLS.CertFile),
				"key_file=" + url.QueryEscape(c.cfg.TLS.KeyFile)}, options...)
		}
	}
	return etcdembed.RegistryURL(hosts, c.cfg.TLS != nil, caFile, prefix, options)
}

// Client returns a new client of the cluster, logged in as root under
// Config.Auth; the caller closes it (before closing the Cluster).
func (c *Cluster) Client() (*clientv3.Client, error) { return c.client(true) }

func (c *Cluster) client(asRoot bool) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if a := c.cfg.Auth; a != nil && asRoot {
		cfg.Username, cfg.Password = "root", a.RootPassword
	}
	if c.cfg.TLS != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.cfg.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.cfg.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("etcdtest: client: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			tc.RootCAs.AppendCertsFromPEM(pem)
		}
		if c.cfg.TLS.ClientCertAuth {
			pair, err := tls.LoadX509KeyPair(c.cfg.TLS.CertFile, c.cfg.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("etcdtest: client: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: client: %w", err)
	}
	return cli, nil
}

// StopMember stops member i (0-based), keeping its data.
func (c *Cluster) StopMember(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("etcdtest: no member %d", i)
	}
	c.stop(c.members[i])
	return nil
}

// StartMember starts member i again with its data and waits until it is
// ready.
func (c *Cluster) StartMember(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("etcdtest: no member %d", i)
	}
	m := c.members[i]
	if m.e != nil {
		return nil
	}
	e, err := etcdembed.Start(c.spec(i))
	if err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.name, err)
	}
	m.e = e
	return c.waitReady(ctx, m)
}

// Leader returns the index of the current leader as seen by the running
// members, or -1 if they know none.
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.e == nil {
			continue
		}
		lead := m.e.Server().Leader()
		for j, o := range c.members {
			if o.e != nil && o.e.Server().MemberID() == lead {
				return j
			}
		}
	}
	return -1
}

// Restart stops every member and starts them again: with their data, or
// with empty data directories (keepData false, the same as Wipe).
func (c *Cluster) Restart(ctx context.Context, keepData bool) error {
	if err := c.Kill(); err != nil {
		return err
	}
	return c.Start(ctx, keepData)
}

// Kill stops every member abruptly, keeping their data: client
// connections are cut first, so to clients it looks like a crash, not a
// graceful shutdown. Start brings the cluster back; the time in between
// is an outage of the caller's choosing.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("etcdtest: cluster closed")
	}
	c.stopAll()
	return nil
}

// Start starts the stopped members again on the same ports and waits
// until all are ready: with their data, or with empty data directories
// (keepData false; members still running are stopped first).
func (c *Cluster) Start(ctx context.Context, keepData bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("etcdtest: cluster closed")
	}
	if !keepData {
		c.stopAll()
		for i := range c.members {
			os.RemoveAll(c.memberDir(i))
		}
		c.gen++
		for i := range c.members {
			os.RemoveAll(c.memberDir(i)) // left by an earlier Start in a given Dir
		}
	}
	return c.startAll(ctx)
}

// Wipe restarts the cluster on empty data directories: every key and lease
// is gone and revisions start again from 1, as after a restore from
// nothing.
func (c *Cluster) Wipe(ctx context.Context) error { return c.Restart(ctx, false) }

// Compact compacts the history up to the current revision, so that a
// watcher behind it gets ErrCompacted. It returns that revision.
func (c *Cluster) Compact(ctx context.Context) (int64, error) {
	cli, err := c.Client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "compact-probe")
	if err != nil {
		return 0, fmt.Errorf("etcdtest: compact: %w", err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("etcdtest: compact: %w", err)
	}
	return rev, nil
}

// Close stops every member and removes the data directory if Start made
// it. Links still open are closed too.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for l := range c.links {
		l.close()
	}
	c.stopAll()
	c.closeFronts()
	return c.dir.Remove()
}

// Link is one client's own path to the cluster, through TCP proxies that
// can cut it off (a network partition) while other clients keep access.
type Link struct {
	c       *Cluster
	proxies []*loopback.Proxy
	once    sync.Once
}

// NewLink opens a Link with one proxy per member.
func (c *Cluster) NewLink() (*Link, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("etcdtest: cluster closed")
	}
	l := &Link{c: c}
	for _, m := range c.members {
		p, err := loopback.NewProxy(c.clientHost(m))
		if err != nil {
			l.close()
			return nil, fmt.Errorf("etcdtest: link: %w", err)
		}
		l.proxies = append(l.proxies, p)
	}
	c.links[l] = struct{}{}
	return l, nil
}

// URL is the registry URL through this link; see Cluster.URL.
func (l *Link) URL(prefix string, options ...string) string {
	var hosts []string
	for _, p := range l.proxies {
		hosts = append(hosts, p.Addr())
	}
	return l.c.registryURL(hosts, prefix, options)
}

// SetConnected cuts (false) or restores (true) the link. Cutting drops
// established connections and refuses new ones. It has the signature of
// conformance.Link.
func (l *Link) SetConnected(ctx context.Context, ok bool) error {
	for _, p := range l.proxies {
		_ = p.SetConnected(ctx, ok)
	}
	return nil
}

// Close closes the link's proxies.
func (l *Link) Close() error {
	l.c.mu.Lock()
	delete(l.c.links, l)
	l.c.mu.Unlock()
	l.close()
	return nil
}

func (l *Link) close() {
	l.once.Do(func() {
		for _, p := range l.proxies {
			p.Close()
		}
	})
}
