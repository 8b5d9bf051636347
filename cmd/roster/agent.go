package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// defaultAgentListen is roster agent's default address: loopback only.
const defaultAgentListen = "127.0.0.1:7946"

type agentFlags struct {
	listen      string
	strategy    string
	tokenTTL    time.Duration
	maxStale    time.Duration
	snapshotDir string
	templates   []string
	exec        string
	passEnv     []string
	socketMode  os.FileMode
	debounce    time.Duration
	instMetrics bool
	// The host's locality, agent.Config's Zone and Region.
	zone, region string
	// The agent's bounds, agent.Config's fields of the same names.
	readTimeout, writeTimeout, idleTimeout, serviceIdle time.Duration
	maxConns, maxServices, maxTokens                    int
	allowActions                                        bool

	// The xDS server, agent.Config's XDS and XDSAllowRemote.
	xds            string
	xdsAllowRemote bool

	// The DNS listener, agent.Config's DNS fields.
	dns, dnsDomain string
	dnsTTL         time.Duration
	dnsRemote      bool
	dnsRate        int
}

// config is the agent.Config the flags describe.
func (fl agentFlags) config(reg *registry.Registry) agent.Config {
	return agent.Config{Registry: reg, Strategy: selector.Strategy(fl.strategy), TokenTTL: fl.tokenTTL,
		MaxStaleness: fl.maxStale, SnapshotDir: fl.snapshotDir,
		ReadTimeout: fl.readTimeout, WriteTimeout: fl.writeTimeout, IdleTimeout: fl.idleTimeout,
		MaxConns: fl.maxConns, MaxServices: fl.maxServices, MaxTokens: fl.maxTokens, ServiceIdle: fl.serviceIdle,
		InstanceMetrics: fl.instMetrics, Zone: fl.zone, Region: fl.region, AllowActions: fl.allowActions,
		XDS: fl.xds, XDSAllowRemote: fl.xdsAllowRemote,
		DNS: fl.dns, DNSDomain: fl.dnsDomain, DNSTTL: fl.dnsTTL, DNSAllowRemote: fl.dnsRemote, DNSRate: fl.dnsRate}
}

func newAgent() *cobra.Command {
	cmd, _ := newAgentCmd()
	return cmd
}

// newAgentCmd returns the agent command and the flags it parses into.
func newAgentCmd() (*cobra.Command, *agentFlags) {
	var fl agentFlags
	cmd := &cobra.Command{
		Use:   "agent --registry URL [--listen 127.0.0.1:PORT | unix:/path]",
		Short: "Serve discovery, picks and a dashboard to every program on the host",
		Long: `agent is one long-running process per host that follows the registry for
every program on it: PHP-FPM workers, Python, Node or shell scripts ask it over
loopback HTTP (JSON) for a service's instances, pick one with Roster's
strategies, report the call's outcome by token (feeding the least-request and
latency state and the local quarantine) and register local processes. While
the registry fails, picks go on from the last good list, flagged stale.

It serves /metrics (Prometheus) and a live console at / (docs/operations.md;
its actions need --allow-actions). The API has no
authentication: --listen takes a loopback address or a Unix socket only, the
socket with --socket-mode (0660: the agent's user and group) whatever the umask.

With --template in.tmpl:out.conf (repeatable) it re-renders each text/template
on every change of the services it reads (debounced), writes it atomically and
runs --exec CMD after a change, as consul-template does for Nginx. CMD gets
no registry credential unless --pass-env names it. SIGHUP reads the template
files again and re-renders them.

See docs/agent.md for the API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd, fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.listen, "listen", defaultAgentListen, "loopback ip:port (port 0: a free one) or unix:/path/to/socket")
	f.StringVar(&fl.strategy, "strategy", string(selector.DefaultStrategy), fmt.Sprintf("default strategy of picks %v", selector.Strategies()))
	durationVar(f, &fl.tokenTTL, "token-ttl", time.Minute, 100*time.Millisecond, maxTimeout, "how long a pick's token waits for its report")
	boundVar(f, &fl.maxStale, "max-staleness", 0, time.Second, maxStaleness, "how long picks go on from a stale list while the registry fails (0: for the whole outage)")
	f.StringVar(&fl.snapshotDir, "snapshot-dir", "", "keep each service's last good list here, for a start during an outage")
	f.StringArrayVar(&fl.templates, "template", nil, "in.tmpl:out.conf to re-render on every change (repeatable)")
	f.StringVar(&fl.exec, "exec", "", "command run (sh -c) after a template's output changed")
	passEnvVar(f, &fl.passEnv, "--exec")
	modeVar(f, &fl.socketMode, "socket-mode", 0o660, "permissions of the --listen unix: socket, whatever the umask")
	durationVar(f, &fl.debounce, "debounce", 200*time.Millisecond, time.Millisecond, time.Minute, "quiet time before re-rendering the templates after a change")
	durationVar(f, &fl.readTimeout, "read-timeout", 30*time.Second, 100*time.Millisecond, maxTimeout,
		"how long a client may take to send a request, headers and body; a trickling one is cut off")
	durationVar(f, &fl.writeTimeout, "write-timeout", 30*time.Second, 100*time.Millisecond, maxTimeout,
		"how long writing an answer may take once it is due (a long poll's when its wait ends)")
	durationVar(f, &fl.idleTimeout, "idle-timeout", 2*time.Minute, 100*time.Millisecond, maxTimeout,
		"how long a kept-alive connection may wait between requests")
	intVar(f, &fl.maxConns, "max-conns", 1024, 1, 1<<20, "connections open at a time; more wait to be accepted")
	intVar(f, &fl.maxServices, "max-services", 1024, 1, 1<<20,
		"services followed for clients, and local registrations; one more is 429 too_many")
	intVar(f, &fl.maxTokens, "max-tokens", 1<<16, 1, 1<<24, "pick tokens waiting for a report; past it the oldest expires")
	f.StringVar(&fl.zone, "zone", "", "this host's zone: picks prefer its instances and fail over as they are ejected")
	f.StringVar(&fl.region, "region", "", "this host's region (with --zone): a zone fails over to the rest of its region first")
	f.BoolVar(&fl.instMetrics, "instance-metrics", false, "add /metrics series by instance ID, ended when an instance leaves")
	durationVar(f, &fl.serviceIdle, "service-idle", 5*time.Minute, time.Second, 24*time.Hour,
		"how long a service no pick or long poll asked for stays followed")
	f.BoolVar(&fl.allowActions, "allow-actions", false,
		"let the console and POST /v1/actions/* drain, weigh, maintain, restore and deregister instances (same-origin only)")

	f.StringVar(&fl.xds, "xds", "", "serve xDS (ADS) for Envoy and proxyless gRPC on loopback ip:port or unix:/path (default: off)")
	f.BoolVar(&fl.xdsAllowRemote, "xds-allow-remote", false, "let --xds listen on an address other hosts reach (the xDS server has no authentication)")

	f.StringVar(&fl.dns, "dns", "", "serve the usable instances over DNS (UDP and TCP) at this loopback ip:port, e.g. 127.0.0.1:8600")
	f.StringVar(&fl.dnsDomain, "dns-domain", agent.DefaultDNSDomain, "the domain --dns answers for: <service>.<domain>")
	durationVar(f, &fl.dnsTTL, "dns-ttl", agent.DefaultDNSTTL, time.Second, time.Hour, "TTL of the --dns records")
	f.BoolVar(&fl.dnsRemote, "dns-allow-remote", false, "let --dns take an address that is not loopback (no authentication: see docs/security.md)")
	intVar(f, &fl.dnsRate, "dns-rate", agent.DefaultDNSRate, -1, 1<<24, "DNS queries per second one source may send (-1: no limit)")
	return cmd, &fl
}

func (fl agentFlags) validate() ([]agent.Template, error) {
	if _, err := selector.ParseStrategy(fl.strategy); err != nil {
		return nil, fmt.Errorf("%w: --strategy: %w", registry.ErrInvalid, err)
	}
	if fl.region != "" && fl.zone == "" {
		return nil, fmt.Errorf("%w: --region %q needs --zone", registry.ErrInvalid, fl.region)
	}
	if err := checkPassEnv(fl.passEnv); err != nil {
		return nil, err
	}
	if fl.xds != "" && !fl.xdsAllowRemote && !strings.HasPrefix(fl.xds, "unix:") {
		host, _, err := net.SplitHostPort(fl.xds)
		if ip := net.ParseIP(host); err != nil || host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("%w: --xds %q is not a loopback ip:port or unix:/path (--xds-allow-remote serves other hosts)", registry.ErrInvalid, fl.xds)
		}
	}
	if fl.exec != "" && len(fl.templates) == 0 {
		return nil, fmt.Errorf("%w: --exec needs at least one --template", registry.ErrInvalid)
	}
	var tpls []agent.Template
	for _, t := range fl.templates {
		in, out, ok := strings.Cut(t, ":")
		if !ok || in == "" || out == "" {
			return nil, fmt.Errorf("%w: --template %q is not in.tmpl:out.conf", registry.ErrInvalid, t)
		}
		tpls = append(tpls, agent.Template{In: in, Out: out})
	}
	return tpls, nil
}

// listenAgent opens --listen: a loopback TCP address, or a Unix socket
// with permissions mode.
func listenAgent(addr string, mode os.FileMode) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("%w: --listen unix: needs a path", registry.ErrInvalid)
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
				return nil, fmt.Errorf("--listen %s: another process serves on it", addr)
			}
			_ = os.Remove(path) // a socket left by an agent that died
		}
		return listenUnix(path, mode)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --listen %q is neither ip:port nor unix:/path", registry.ErrInvalid, addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: --listen %q is not a loopback address: the agent's API has no authentication", registry.ErrInvalid, addr)
	}
	return net.Listen("tcp", addr)
}

func runAgent(cmd *cobra.Command, fl agentFlags) error {
	tpls, err := fl.validate()
	if err != nil {
		return err
	}
	ln, err := listenAgent(fl.listen, fl.socketMode)
	if err != nil {
		return err
	}
	defer ln.Close()
	reg, err := openRegistry(cmd)
	if err != nil {
		return err
	}
	defer reg.Close()
	a, err := agent.New(fl.config(reg))
	if err != nil {
		return err
	}
	defer a.Close()
	return serveAgent(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), ln, a, reg, tpls, fl)
}

// serveAgent serves until ctx ends (a signal) or the template runner
// fails, then shuts the server down.
func serveAgent(ctx context.Context, out, errOut io.Writer, ln net.Listener, a *agent.Agent, reg *registry.Registry, tpls []agent.Template, fl agentFlags) error {
	srv := a.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(a.Listener(ln)) }()
	url := "http://" + ln.Addr().String()
	if ln.Addr().Network() == "unix" {
		url = "unix:" + ln.Addr().String()
	}
	fmt.Fprintf(out, "roster agent: listening on %s, registry %s\n", url, reg)
	if x := a.XDSAddr(); x != nil {
		fmt.Fprintf(out, "roster agent: xDS on %s:%s\n", x.Network(), x)
	}
	if d := a.DNSAddr(); d != nil {
		fmt.Fprintf(out, "roster agent: DNS on %s (udp and tcp)\n", d)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// SIGHUP reloads, as it does nginx; by Go's default it would kill the
	// agent and leave its local registrations to their TTL.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	tplDone := make(chan error, 1)
	if len(tpls) > 0 {
		go func() {
			tplDone <- a.RunTemplates(ctx, agent.TemplateConfig{Templates: tpls, Exec: fl.exec, Env: childEnviron(os.Environ(), fl.passEnv), Debounce: fl.debounce, Log: errOut, Reload: reload})
		}()
	}
	err := waitAgent(ctx, errOut, hup, reload, len(tpls), served, tplDone)
	cancel()
	shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = a.Close() // ends long polls and event streams, so Shutdown need not wait for them
	if serr := srv.Shutdown(shut); serr != nil && err == nil {
		err = serr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// waitAgent waits for ctx to end (SIGTERM, SIGINT) or the server or the
// template runner to fail, and passes each SIGHUP on to the runner.
func waitAgent(ctx context.Context, errOut io.Writer, hup <-chan os.Signal, reload chan<- struct{}, ntpl int, served, tplDone <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return err
		case err := <-tplDone:
			return err
		case <-hup:
			if ntpl == 0 {
				fmt.Fprintln(errOut, "roster agent: SIGHUP: no --template to reload")
				continue
			}
			fmt.Fprintf(errOut, "roster agent: SIGHUP: reloading %d template(s)\n", ntpl)
			select {
			case reload <- struct{}{}:
			default: // a reload is pending already
			}
		}
	}
}
