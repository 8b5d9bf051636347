package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/internal/loadgen"
)

func newBench() *cobra.Command {
	c := loadgen.Config{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "bench [URL]",
		Short: "Measure a registry under load: registration, heartbeats, watch propagation, lookups, connections",
		Long: `bench registers --instances instances across --services services from
--processes simulated processes (separate registries, each with its own
connections), holds them with heartbeats for --hold, watches every service
from --watchers more processes, and reports what each operation cost.

Everything it writes is under services named bench-<run>-sNNNN and is
deregistered before it exits. The URL is the argument, else --registry or
$ROSTER_REGISTRY.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c.URL = registryURL(cmd)
			if len(args) == 1 {
				c.URL = args[0]
			}
			if err := c.Validate(); err != nil {
				return err
			}
			errOut := cmd.ErrOrStderr()
			start := time.Now()
			c.Progress = func(step string) {
				fmt.Fprintf(errOut, "\rbench: %-10s %6.1fs", step, time.Since(start).Seconds())
			}
			rep, err := loadgen.Run(cmd.Context(), c)
			fmt.Fprintf(errOut, "\rbench: done in %.1fs        \n", time.Since(start).Seconds())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	intVar(f, &c.Instances, "instances", 100, 1, maxBenchInstances, "instances to register (N)")
	intVar(f, &c.Services, "services", 10, 1, maxBenchInstances, "services they are spread over (S ≤ N)")
	intVar(f, &c.Processes, "processes", 4, 1, maxBenchRegistries, "registering processes (P), each a Registry with its own connections")
	intVar(f, &c.Watchers, "watchers", 2, 1, maxBenchRegistries, "watching processes, each watching every service")
	intVar(f, &c.Workers, "workers", 32, 1, maxWorkers, "concurrent registrations")
	intVar(f, &c.Probes, "probes", 50, 1, maxBenchProbes, "deregistrations and lookups timed (crashes: a tenth)")
	durationVar(f, &c.TTL, "ttl", 10*time.Second, minTTL, maxTTL, "lease TTL")
	durationVar(f, &c.Hold, "hold", 10*time.Second, time.Second, maxTimeout, "how long to hold the leases while measuring heartbeat cost")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
