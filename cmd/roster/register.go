package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

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
	)
	cmd := &cobra.Command{
		Use:   "register --service S --addr HOST:PORT [flags] [-- CMD ARGS…]",
		Short: "Keep a process registered: a sidecar for non-Go services",
		Long: `register announces an instance and keeps it alive with heartbeats.

With "-- CMD ARGS…" it starts CMD and acts as its entrypoint: it registers once
the health check passes (at once without --check-http), keeps the registration
while the check passes, and on SIGTERM or SIGINT it deregisters FIRST, waits
--drain so that clients stop picking the instance, then forwards the signal to
CMD and exits with CMD's exit code. If CMD exits by itself, the instance is
deregistered and roster exits with CMD's code.

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
			if cmd.ArgsLenAtDash() < 0 && len(args) > 0 {
				return fmt.Errorf("%w: unexpected arguments %q (put the command after --)", registry.ErrInvalid, args)
			}
			opts := []registry.RegisterOption{registry.WithTTL(ttl)}
			if checkURL != "" {
				opts = append(opts, registry.WithHealthCheck(httpCheck(checkURL), checkInterval))
			}
			return runSidecar(cmd, in, opts, args, drain)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.Service, "service", "", "service name (required)")
	f.StringVar(&in.Address, "addr", "", "instance address host:port (required)")
	f.StringVar(&in.ID, "id", "", "instance ID (default <service>-<host>-<port>-<random>)")
	f.StringVar(&in.Version, "version", "", "version, for canary routing")
	f.StringVar(&in.Zone, "zone", "", "zone, for zone-aware routing")
	f.Uint32Var(&in.Weight, "weight", registry.DefaultWeight, "relative weight")
	f.StringArrayVar(&meta, "meta", nil, "metadata key=value (repeatable)")
	f.StringArrayVar(&tags, "tag", nil, "tag (repeatable)")
	f.DurationVar(&ttl, "ttl", registry.DefaultTTL, "registration TTL; heartbeats every TTL/3")
	f.StringVar(&checkURL, "check-http", "", "health check URL: registered only while it answers 2xx")
	f.DurationVar(&checkInterval, "check-interval", 2*time.Second, "health check interval")
	f.DurationVar(&drain, "drain", 5*time.Second, "wait between deregistering and signalling CMD")
	cmd.MarkFlagRequired("service")
	cmd.MarkFlagRequired("addr")
	return cmd
}

// httpCheck passes while url answers 2xx within the check's deadline.
func httpCheck(url string) func(context.Context) error {
	client := &http.Client{}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s answered %s", url, resp.Status)
		}
		return nil
	}
}

func runSidecar(cmd *cobra.Command, in registry.Instance, opts []registry.RegisterOption, args []string, drain time.Duration) error {
	logf := func(format string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "roster: "+format+"\n", a...) }
	// Signals are ours to handle in order: take them from the root context.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	reg, err := openRegistry(cmd)
	if err != nil {
		return err
	}
	defer reg.Close()

	var child *exec.Cmd
	exited := make(chan error, 1)
	if len(args) > 0 {
		child = exec.Command(args[0], args[1:]...)
		child.Stdin, child.Stdout, child.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
		if err := child.Start(); err != nil {
			return fmt.Errorf("start %s: %w", args[0], err)
		}
		go func() { exited <- child.Wait() }()
	}

	opts = append(opts, registry.WithStateHook(func(s registry.LeaseState, err error) {
		if err != nil {
			logf("%s: %s (%v)", in.Service, s, err)
		} else {
			logf("%s: %s", in.Service, s)
		}
	}))
	lease, err := reg.Register(context.Background(), in, opts...)
	if err != nil {
		if child != nil {
			child.Process.Signal(syscall.SIGTERM)
			<-exited
		}
		return err
	}
	inst := lease.Instance()
	if lease.State() == registry.LeaseWithdrawn {
		logf("started %s at %s; waiting for the health check (%v)", inst.ID, inst.Address, lease.Err())
	} else {
		logf("registered %s at %s (ttl %v)", inst.ID, inst.Address, lease.TTL())
	}

	deregister := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lease.Deregister(ctx); err != nil {
			logf("deregister %s: %v (it expires with its TTL)", inst.ID, err)
		} else {
			logf("deregistered %s", inst.ID)
		}
	}

	select {
	case sig := <-sigs:
		deregister()
		if child == nil {
			return nil
		}
		if drain > 0 {
			logf("draining for %v before forwarding %v", drain, sig)
			t := time.NewTimer(drain)
			select {
			case <-t.C:
			case err := <-exited: // the child left early
				t.Stop()
				return exitCode(err)
			}
		}
		child.Process.Signal(sig)
		return exitCode(<-exited)
	case err := <-exited:
		deregister()
		return exitCode(err)
	}
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
