// Command roster is Roster's command line. Start with the demo, which runs
// the whole library on an embedded etcd:
//
//	go run ./cmd/roster demo
//	roster dev                     # etcd on 127.0.0.1:2379 until Ctrl-C
//	roster register --registry etcd://10.0.0.1:2379 --service api --addr 10.0.0.5:8080 -- ./server
//	roster ls api --registry redis://10.0.0.2:6379
//	roster conformance consul://127.0.0.1:8500
//
// roster dev serves a local registry for development. roster register is a
// registration sidecar for processes not written in Go. ls, watch and pick
// inspect a registry. roster conformance runs the conformance suite against
// a live deployment, and roster bench measures one. roster agent is the
// host agent for programs in other languages.
//
// The registry URL comes from --registry or the ROSTER_REGISTRY environment
// variable. docs/cli.md describes every command.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	_ "github.com/roster-go/roster/backends/all" // every scheme: a switch of backend is a change of URL
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/internal/liblog"
	"github.com/roster-go/roster/registry"
)

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	liblog.CaptureProcessLoggers() // grpc's and client-go's lines are not roster's output
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRoot().ExecuteContext(ctx)
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "roster:", escapeControls(err.Error()))
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "roster",
		Short: "Service registration, discovery and client-side load balancing",
		Long: `roster runs Roster from the command line.

The registry is chosen by URL, from --registry or $ROSTER_REGISTRY:
  etcd://host:2379[,host2:2379]?prefix=/roster     etcd (etcds:// for TLS)
  redis://[user:pass@]host:6379/0?layout=hash      Redis (rediss://, redis+sentinel://)
  consul://host:8500?token=…&dc=…                  Consul (consuls:// for TLS)
  k8s://?namespace=shop&kubeconfig=/path           Kubernetes (k8s://in-cluster in a pod)
  zk://host:2181[,host2:2181]/roster               ZooKeeper
  dns+srv://127.0.0.1:8600/{service}.service.consul  DNS SRV records (read-only)
  dual://?old=<URL>&new=<URL>                      both at once, for a migration (URL-encode each)
  mem://name                                       in-process (this process only)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("registry", "", "registry URL (default $ROSTER_REGISTRY)")
	root.AddCommand(newDemo(), newDev(), newRegister(), newLs(), newWatch(), newPick(), newConformance(), newAgent(), newBench(), newPolicy())
	root.AddCommand(newActions()...)
	return root
}

// registryURL returns --registry, or $ROSTER_REGISTRY.
func registryURL(cmd *cobra.Command) string {
	u, _ := cmd.Flags().GetString("registry")
	if u == "" {
		u = os.Getenv("ROSTER_REGISTRY")
	}
	return u
}

// openRegistry opens the registry named by --registry / $ROSTER_REGISTRY.
func openRegistry(cmd *cobra.Command) (*registry.Registry, error) {
	u := registryURL(cmd)
	if u == "" {
		return nil, fmt.Errorf("no registry: set --registry or ROSTER_REGISTRY (schemes: %v)", registry.Schemes())
	}
	reg, err := registry.Open(cmd.Context(), u)
	if err == nil {
		warnInProcess(cmd, u) // not beside an error: one line then
	}
	return reg, err
}

// withRegistry is the RunE of a command that reads the registry: it
// opens the registry, runs f with it and closes it.
func withRegistry(f func(cmd *cobra.Command, args []string, reg *registry.Registry) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		reg, err := openRegistry(cmd)
		if err != nil {
			return err
		}
		defer reg.Close()
		return f(cmd, args, reg)
	}
}

// warnInProcess warns on stderr when u names the in-process memory
// backend: what this roster process registers or lists there, no other
// process can see.
func warnInProcess(cmd *cobra.Command, u string) {
	if pu, err := url.Parse(u); err == nil && pu.Scheme == memory.Scheme {
		fmt.Fprintf(cmd.ErrOrStderr(), "roster: warning: %s is a registry inside this roster process: no other process can see it, and it is gone when roster exits\n",
			quote(registry.Redact(u)))
	}
}
