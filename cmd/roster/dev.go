package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/version"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roster-go/roster/backends/etcd/etcdlocal"
)

func newDev() *cobra.Command {
	var (
		listen, dataDir string
		temp, verbose   bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local registry for development (an embedded etcd)",
		Long: `dev runs a single-member etcd in this process, as the registry of services
under development, like "consul agent -dev". It prints the registry URL to
give them (ROSTER_REGISTRY=etcd://127.0.0.1:2379) and runs until SIGINT
(Ctrl-C) or SIGTERM.

The data (registrations and their leases) is kept in --data-dir between runs,
by default in roster/dev under the user's cache directory; --temp keeps it in
a temporary directory instead, removed on exit. An address or data directory
already in use is an error, at once.

The server has no authentication and no TLS: keep --listen on loopback unless
everyone who can reach the address may read and write the registry. It is a
development registry with no redundancy, not a production etcd.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := etcdlocal.Config{Addr: listen, Dir: dataDir}
			if verbose {
				cfg.Logger = stderrLogger(cmd.ErrOrStderr())
			}
			if !temp && cfg.Dir == "" {
				cache, err := os.UserCacheDir()
				if err != nil {
					return fmt.Errorf("no --data-dir and no user cache directory (%v): give --data-dir, or --temp", err)
				}
				cfg.Dir = filepath.Join(cache, "roster", "dev")
			}
			return runDev(cmd.Context(), cmd.OutOrStdout(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", etcdlocal.DefaultAddr, "client address ip:port (port 0: a free port; an empty ip: every interface)")
	f.StringVar(&dataDir, "data-dir", "", "where the data is kept between runs (default <user cache dir>/roster/dev)")
	f.BoolVar(&temp, "temp", false, "keep the data in a temporary directory, removed on exit")
	f.BoolVar(&verbose, "verbose", false, "write etcd's own log to stderr")
	cmd.MarkFlagsMutuallyExclusive("data-dir", "temp")
	return cmd
}

// runDev serves until ctx ends (a signal), then stops the server.
func runDev(ctx context.Context, out io.Writer, cfg etcdlocal.Config) error {
	srv, err := etcdlocal.Start(ctx, cfg)
	switch {
	case errors.Is(err, etcdlocal.ErrAddrInUse):
		return fmt.Errorf("%w: is another roster dev or etcd running? Choose another address with --listen", err)
	case errors.Is(err, etcdlocal.ErrDirInUse):
		return fmt.Errorf("%w: is another roster dev running on it? Choose another with --data-dir, or use --temp", err)
	case err != nil:
		return err
	}
	data := "data in " + srv.Dir()
	if cfg.Dir == "" {
		data = "throwaway data, removed on exit"
	}
	fmt.Fprintf(out, "roster dev: etcd %s ready, %s\n\n", version.Version, data)
	fmt.Fprintf(out, "    export ROSTER_REGISTRY=%s\n\n", srv.URL())
	fmt.Fprintln(out, "Services and roster commands find the registry through $ROSTER_REGISTRY")
	fmt.Fprintln(out, `(add "?prefix=/name" to keep projects apart). Stop with Ctrl-C or SIGTERM.`)
	<-ctx.Done()
	fmt.Fprintln(out, "roster dev: stopping")
	if err := srv.Close(); err != nil {
		return err
	}
	fmt.Fprintln(out, "roster dev: stopped")
	return nil
}

// stderrLogger is a human-readable logger for etcd's own log.
func stderrLogger(w io.Writer) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), zapcore.InfoLevel))
}
