package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/internal/backoff"
	"github.com/roster-go/roster/internal/childproc"
	"github.com/roster-go/roster/registry"
)

func newRegister() *cobra.Command {
	var (
		in            registry.Instance
		meta, tags    []string
		ttl           time.Duration
		checkURL      string
		checkInterval time.Duration
		drain         time.Duration
		passEnv       []string
		endpoints     []string
	)
	cmd := &cobra.Command{
		Use:   "register --service S (--addr HOST:PORT | --endpoint NAME=HOST:PORT…) [flags] [-- CMD ARGS…]",
		Short: "Keep a process registered: a sidecar for non-Go services",
		Long: `register announces an instance and keeps it alive with heartbeats.

With "-- CMD ARGS…" it starts CMD and acts as its entrypoint: it registers once
the health check passes (at once without --check-http), keeps the registration
while the check passes, and on SIGTERM or SIGINT it deregisters FIRST, waits
--drain so that clients stop picking the instance, then forwards the signal to
CMD's process group and exits with CMD's exit code. If CMD exits by itself, the
instance is deregistered and roster exits with CMD's code. SIGHUP, SIGUSR1 and
SIGUSR2 (reload signals) are forwarded to CMD, and roster stays up.

CMD runs in a process group of its own: Ctrl-C in a terminal reaches roster
only, and CMD gets it after the deregistration and the drain. CMD reads stdin
unless that is a terminal. On Linux, CMD is killed if roster dies. CMD's
environment is roster's without the registry's credentials (ROSTER_REGISTRY,
the backends' password and token variables): --pass-env NAME lets one through.

If the registry cannot be reached, CMD starts anyway and roster keeps trying to
register in the background, with backoff, saying so on stderr. Invalid input
(service, address, endpoint, metadata, TTL, registry URL) fails at once, before CMD
starts.

A process that serves several ports announces them in one registration, with
one drain: --endpoint http=10.0.0.5:8080 --endpoint grpc=:9090/grpc (a port
without a host takes the primary's). The primary is --addr, or without it the
first endpoint.

Without CMD it keeps the registration alive until it is signalled.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			md := map[string]string{}
			for _, kv := range meta {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("%w: --meta %q is not key=value", registry.ErrInvalid, kv)
				}
				md[k] = v
			}
			if len(md) > 0 {
				in.Metadata = md
			}
			in.Tags = tags
			var err error
			if in.Endpoints, err = parseEndpoints(endpoints, in.Address); err != nil {
				return err
			}
			if in.Address == "" && len(in.Endpoints) == 0 {
				return fmt.Errorf("%w: --addr or --endpoint is required", registry.ErrInvalid)
			}
			if cmd.ArgsLenAtDash() < 0 && len(args) > 0 {
				return fmt.Errorf("%w: unexpected arguments %q (put the command after --)", registry.ErrInvalid, args)
			}
			if err := checkPassEnv(passEnv); err != nil {
				return err
			}
			opts := []registry.RegisterOption{registry.WithTTL(ttl)}
			if in.Weight == 0 { // --weight 0: start drained, out of rotation
				opts = append(opts, registry.Drained())
			}
			if checkURL != "" {
				if err := checkHTTPURL(checkURL); err != nil {
					return err
				}
				opts = append(opts, registry.WithHealthCheck(registry.HTTPHealthCheck(checkURL), checkInterval))
			}
			return runSidecar(cmd, in, ttl, opts, args, drain, passEnv)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Service, "service", "", "service name (required)")
	f.StringVar(&in.Address, "addr", "", "instance address host:port, the primary (default: the first --endpoint)")
	f.StringArrayVar(&endpoints, "endpoint", nil, "named endpoint NAME=HOST:PORT[/PROTOCOL], e.g. grpc=:9090/grpc (repeatable)")
	f.StringVar(&in.ID, "id", "", "instance ID (default <service>-<host>-<port>-<random>)")
	f.StringVar(&in.Version, "version", "", "version, for canary routing")
	f.StringVar(&in.Zone, "zone", "", "zone, for zone-aware routing")
	f.StringVar(&in.Region, "region", "", "region holding the zone, for failover within a region first")
	f.Uint32Var(&in.Weight, "weight", registry.DefaultWeight, "relative weight, 0 to 65535; 0 starts the instance drained")
	f.StringArrayVar(&meta, "meta", nil, "metadata key=value (repeatable)")
	f.StringArrayVar(&tags, "tag", nil, "tag (repeatable)")
	durationVar(f, &ttl, "ttl", registry.DefaultTTL, minTTL, maxTTL,
		"registration TTL, 10ms to 24h and at least the backend's minimum; heartbeats every TTL/3")
	f.StringVar(&checkURL, "check-http", "", "health check URL (http or https): registered only while it answers 2xx")
	durationVar(f, &checkInterval, "check-interval", 2*time.Second, 10*time.Millisecond, maxTimeout, "health check interval (10ms to 1h)")
	passEnvVar(f, &passEnv, "CMD")
	durationVar(f, &drain, "drain", 5*time.Second, 0, maxTimeout, "wait between deregistering and signalling CMD (0 to 1h)")
	cmd.MarkFlagRequired("service")
	return cmd
}

// parseEndpoints reads the --endpoint flags: NAME=HOST:PORT[/PROTOCOL].
// A port without a host (":9090") takes the host of primary, or of the
// first endpoint when primary is empty.
func parseEndpoints(flags []string, primary string) ([]registry.Endpoint, error) {
	var eps []registry.Endpoint
	for _, f := range flags {
		name, addr, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("%w: --endpoint %q is not NAME=HOST:PORT[/PROTOCOL]", registry.ErrInvalid, f)
		}
		addr, proto, _ := strings.Cut(addr, "/")
		if strings.HasPrefix(addr, ":") {
			if primary == "" && len(eps) > 0 {
				primary = eps[0].Address
			}
			host, _, err := net.SplitHostPort(primary)
			if err != nil || host == "" {
				return nil, fmt.Errorf("%w: --endpoint %q has no host, and neither has --addr or a first endpoint", registry.ErrInvalid, f)
			}
			addr = net.JoinHostPort(host, addr[1:])
		}
		canon, err := backend.CanonicalAddress(addr)
		if err != nil {
			return nil, fmt.Errorf("--endpoint %q: %w", f, err)
		}
		eps = append(eps, registry.Endpoint{Name: name, Address: canon, Protocol: proto})
	}
	return eps, nil
}

func runSidecar(cmd *cobra.Command, in registry.Instance, ttl time.Duration, opts []registry.RegisterOption, args []string, drain time.Duration, passEnv []string) error {
	// Signals are ours to handle in order: take them from the root context.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// Reload signals are CMD's (php-fpm's USR2, nginx's HUP): by Go's
	// default, SIGHUP would kill the sidecar and USR1/USR2 be lost.
	fwd := make(chan os.Signal, 1)
	for sig := range forwardSignals {
		signal.Notify(fwd, sig)
	}
	defer signal.Stop(fwd)

	s := &sidecar{out: cmd.ErrOrStderr(), drain: drain, exited: make(chan error, 1)}
	// Bad input fails here, before CMD starts. An unreachable registry does
	// not: CMD starts and the registration is retried in the background.
	in, reg, err := prepare(cmd, in, ttl)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		if s.child, err = startChild(cmd, args, passEnv); err != nil {
			if reg != nil {
				reg.Close()
			}
			return err
		}
		go func() { s.exited <- s.child.Wait() }()
	}
	opts = append(opts, registry.WithStateHook(func(st registry.LeaseState, err error) {
		if err != nil {
			s.logf("%s: %s (%v)", in.Service, st, err)
		} else {
			s.logf("%s: %s", in.Service, st)
		}
	}))
	s.startAnnouncing(registryURL(cmd), reg, in, opts)
	defer s.close()
	for {
		select {
		case a := <-s.results:
			if err := s.registered(a); err != nil {
				return err
			}
		case sig := <-sigs:
			return s.shutdown(sig, sigs)
		case sig := <-fwd:
			s.forward(sig)
		case err := <-s.exited:
			s.settle()
			s.deregister()
			return exitCode(err)
		}
	}
}

// prepare validates the instance, gives it its ID, and opens the registry.
// Only bad input fails: the registry is nil when it cannot be reached yet.
func prepare(cmd *cobra.Command, in registry.Instance, ttl time.Duration) (registry.Instance, *registry.Registry, error) {
	in, err := withID(in)
	if err != nil {
		return in, nil, err
	}
	reg, err := openRegistry(cmd)
	switch {
	case errors.Is(err, registry.ErrUnavailable):
		return in, nil, nil
	case err != nil:
		return in, nil, err
	}
	if _, err := backend.ValidateTTL(ttl, reg.Limits()); err != nil {
		reg.Close()
		return in, nil, fmt.Errorf("--ttl: %w", err)
	}
	return in, reg, nil
}

// sidecar is the state of roster register while CMD runs.
type sidecar struct {
	out    io.Writer
	drain  time.Duration
	child  *exec.Cmd  // nil without CMD
	exited chan error // CMD's exit

	stop    chan struct{}  // closed to stop announcing
	results chan announced // announce's outcome; nil once received
	got     announced
}

// logf writes one line; what it quotes (IDs, addresses, errors naming
// records) may come from the registry, so unprintable runes are escaped.
func (s *sidecar) logf(format string, a ...any) {
	fmt.Fprintln(s.out, "roster: "+escapeControls(fmt.Sprintf(format, a...)))
}

// startAnnouncing registers in, in the background.
func (s *sidecar) startAnnouncing(url string, reg *registry.Registry, in registry.Instance, opts []registry.RegisterOption) {
	s.stop, s.results = make(chan struct{}), make(chan announced, 1)
	meanwhile := ""
	if s.child != nil {
		meanwhile = " (the command runs meanwhile)"
	}
	go func() { s.results <- announce(s.stop, url, reg, in, opts, s.logf, meanwhile) }()
}

// registered takes announce's outcome. An error means the registry
// rejected the instance for good: CMD is stopped and roster fails.
func (s *sidecar) registered(a announced) error {
	s.got, s.results = a, nil
	if a.err != nil {
		if s.child != nil {
			signalGroup(s.child.Process, syscall.SIGTERM)
			<-s.exited
		}
		return a.err
	}
	inst := a.lease.Instance()
	if a.lease.State() == registry.LeaseWithdrawn {
		s.logf("started %s at %s%s; waiting for the health check (%v)", inst.ID, inst.Address, endpointsNote(inst), a.lease.Err())
	} else {
		s.logf("registered %s at %s%s (ttl %v)", inst.ID, inst.Address, endpointsNote(inst), a.lease.TTL())
	}
	return nil
}

// settle stops announcing, and waits for an attempt under way.
func (s *sidecar) settle() {
	if s.results != nil {
		close(s.stop)
		s.got, s.results = <-s.results, nil
	}
}

// shutdown handles SIGTERM or SIGINT: deregister, drain, then forward sig
// to CMD's process group. A second signal cuts the drain short.
func (s *sidecar) shutdown(sig os.Signal, sigs <-chan os.Signal) error {
	s.settle()
	registered := s.deregister()
	if s.child == nil {
		return nil
	}
	if registered && s.drain > 0 {
		s.logf("draining for %v before forwarding %s", s.drain, signalName(sig))
		t := time.NewTimer(s.drain)
		select {
		case <-t.C:
		case <-sigs:
			t.Stop()
			s.logf("signalled again: drain cut short")
		case err := <-s.exited: // CMD left early
			t.Stop()
			return exitCode(err)
		}
	}
	if err := signalGroup(s.child.Process, sig); err != nil {
		s.logf("forward %s: %v", signalName(sig), err)
	}
	return exitCode(<-s.exited)
}

// forward passes a reload signal to CMD, and to CMD only: a master
// process (php-fpm, nginx) tells its workers itself, and a worker may
// die of a signal it does not expect (php-fpm's die of USR2).
func (s *sidecar) forward(sig os.Signal) {
	if s.child == nil {
		s.logf("%s: no command to forward it to", forwardSignals[sig])
		return
	}
	if err := s.child.Process.Signal(sig); err != nil {
		s.logf("forward %s: %v", forwardSignals[sig], err)
		return
	}
	s.logf("forwarded %s to the command (pid %d)", forwardSignals[sig], s.child.Process.Pid)
}

// deregister removes the instance, and reports whether there was one.
func (s *sidecar) deregister() bool {
	lease := s.got.lease
	if lease == nil {
		s.logf("not registered yet: nothing to deregister")
		return false
	}
	id := lease.Instance().ID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lease.Deregister(ctx); err != nil {
		s.logf("deregister %s: %v (it expires with its TTL)", id, err)
	} else {
		s.logf("deregistered %s", id)
	}
	return true
}

func (s *sidecar) close() {
	s.settle()
	if s.got.reg != nil {
		s.got.reg.Close()
	}
}

// withID gives in an ID, so that every attempt to register it — the
// background ones too — upserts one registration, and validates it.
func withID(in registry.Instance) (registry.Instance, error) {
	if err := backend.ValidateService(in.Service); err != nil {
		return in, err
	}
	if in.Address == "" && len(in.Endpoints) > 0 {
		in.Address = in.Endpoints[0].Address // as Register does
	}
	addr, err := backend.CanonicalAddress(in.Address)
	if err != nil {
		return in, err
	}
	in.Address = addr
	if in.ID == "" {
		in.ID = backend.NewID(in.Service, in.Address)
	}
	return in, backend.ValidateInstance(in)
}

// startChild starts CMD in a process group of its own (terminal signals
// reach the sidecar only, which forwards them once it has deregistered and
// drained), killed by the kernel if the sidecar dies first. CMD gets no
// registry credential but those passEnv names.
func startChild(cmd *cobra.Command, args, passEnv []string) (*exec.Cmd, error) {
	child := exec.Command(args[0], args[1:]...)
	child.Env = childEnviron(os.Environ(), passEnv)
	child.Stdout, child.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	// Outside the terminal's foreground group, reading the terminal would
	// stop CMD (SIGTTIN): it gets stdin only when that is not a terminal.
	if !isTerminal(os.Stdin) {
		child.Stdin = os.Stdin
	}
	ownGroup(child)
	childproc.OrphanProof(child)
	if err := child.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	return child, nil
}

// announced is what announce got: the registry (nil if it never opened),
// the lease (nil if it never registered), and an error when the registry
// rejected the instance for good.
type announced struct {
	reg   *registry.Registry
	lease *registry.Lease
	err   error
}

// attemptTimeout bounds one attempt to open the registry and register.
const attemptTimeout = 10 * time.Second

// announce opens the registry (unless reg is open already) and registers
// in. While the registry cannot be reached it tries again with backoff,
// saying so, until it succeeds, the registry rejects the instance as
// invalid, or stop is closed. An attempt under way when stop closes is
// finished, not cancelled: it may have reached the registry, and what
// registered must be deregistered. Once registered, the lease keeps the
// registration alive by itself.
func announce(stop <-chan struct{}, url string, reg *registry.Registry, in registry.Instance, opts []registry.RegisterOption,
	logf func(string, ...any), meanwhile string) announced {
	policy := backoff.Policy{Base: 200 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 0; ; attempt++ {
		var (
			lease *registry.Lease
			err   error
		)
		reg, lease, err = register(url, reg, in, opts)
		if err == nil || errors.Is(err, registry.ErrInvalid) {
			return announced{reg: reg, lease: lease, err: err}
		}
		d := policy.Delay(attempt)
		logf("cannot register yet, retrying in %v%s: %v", d.Round(time.Millisecond), meanwhile, err)
		t := time.NewTimer(d)
		select {
		case <-stop:
			t.Stop()
			return announced{reg: reg}
		case <-t.C:
		}
	}
}

// register makes one attempt to open the registry, unless reg is open,
// and register in.
func register(url string, reg *registry.Registry, in registry.Instance, opts []registry.RegisterOption) (*registry.Registry, *registry.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	if reg == nil {
		r, err := registry.Open(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		reg = r
	}
	lease, err := reg.Register(ctx, in, opts...)
	return reg, lease, err
}

// exitCode turns a child's exit into roster's own.
func exitCode(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitError{128 + int(ws.Signal())}
		}
		return exitError{ee.ExitCode()}
	}
	return err
}
