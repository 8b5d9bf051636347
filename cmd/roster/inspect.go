package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

func newLs() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [SERVICE]",
		Short: "List services, or the instances of one service",
		Args:  cobra.MaximumNArgs(1),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				snap, err := reg.Lookup(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(out).Encode(snap)
				}
				printInstances(out, snap.Instances)
				return nil
			}
			return listServices(cmd, reg, asJSON)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// listServices prints the services and their instance counts. A name
// listed by the backend that no registration could have (written there
// by someone else) is skipped with a warning, not a failure of the list.
func listServices(cmd *cobra.Command, reg *registry.Registry, asJSON bool) error {
	names, err := reg.Services(cmd.Context())
	if err != nil {
		return err
	}
	type row struct {
		Service   string `json:"service"`
		Instances int    `json:"instances"`
	}
	rows := []row{}
	for _, n := range names {
		snap, err := reg.Lookup(cmd.Context(), n)
		if errors.Is(err, registry.ErrInvalid) {
			fmt.Fprintf(cmd.ErrOrStderr(), "roster: warning: skipped service %s listed by the registry: %s\n", quote(n), escapeControls(err.Error()))
			continue
		}
		if err != nil {
			return err
		}
		rows = append(rows, row{n, len(snap.Instances)})
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return json.NewEncoder(out).Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tINSTANCES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\n", quote(r.Service), r.Instances)
	}
	return tw.Flush()
}

func printInstances(w io.Writer, ins []registry.Instance) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tENDPOINTS\tVERSION\tZONE\tWEIGHT\tTAGS\tMETADATA")
	for _, in := range ins {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", quote(in.ID), quote(in.Address), dash(endpointString(in.Endpoints)),
			dash(quote(in.Version)), dash(quote(in.Zone)), in.Weight, dash(tagString(in.Tags)), dash(metaString(in.Metadata)))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// metaString renders metadata as k=v,k=v; a key or value holding a
// separator or an unprintable rune is quoted.
func metaString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, quoteUnless(k, ",=")+"="+quoteUnless(m[k], ",="))
	}
	return strings.Join(parts, ",")
}

// tagString renders tags as t,t; a tag holding a comma or an unprintable
// rune is quoted.
func tagString(tags []string) string {
	q := make([]string, len(tags))
	for i, t := range tags {
		q[i] = quoteUnless(t, ",")
	}
	return strings.Join(q, ",")
}

// endpointString renders endpoints as --endpoint spells them,
// name=host:port/protocol joined by commas; a part holding a separator
// or an unprintable rune is quoted.
func endpointString(eps []registry.Endpoint) string {
	q := make([]string, len(eps))
	for i, e := range eps {
		q[i] = quoteUnless(e.Name, ",=/") + "=" + quoteUnless(e.Address, ",=/")
		if e.Protocol != "" {
			q[i] += "/" + quoteUnless(e.Protocol, ",=/")
		}
	}
	return strings.Join(q, ",")
}

func newWatch() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "watch SERVICE",
		Short: "Print one line per change of a service's instances",
		Long: `watch prints the current instances of SERVICE, then one line per change:
the revision, and +ID (added), -ID (removed) or ~ID (changed fields).
"stale" marks a registry that cannot be reached; the last good state is kept.`,
		Args: cobra.ExactArgs(1),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			w, err := reg.Watch(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer w.Close()
			out := cmd.OutOrStdout()
			var prev *registry.Snapshot
			for {
				snap, err := w.Next(cmd.Context())
				if err != nil && !snap.Stale {
					if cmd.Context().Err() != nil {
						return nil // interrupted: a normal end
					}
					return err
				}
				if asJSON {
					type line struct {
						registry.Snapshot
						Error string `json:"error,omitempty"`
					}
					l := line{Snapshot: snap}
					if err != nil {
						l.Error = err.Error()
					}
					if err := json.NewEncoder(out).Encode(l); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(out, describeChange(prev, snap, err))
				}
				prev = &snap
			}
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON snapshot per line")
	return cmd
}

// describeChange renders one watch delivery as a line.
func describeChange(prev *registry.Snapshot, s registry.Snapshot, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rev %d  %s", s.Revision, plural(len(s.Instances), "instance"))
	if s.Stale {
		fmt.Fprintf(&b, "  stale (%s)", escapeControls(fmt.Sprint(err)))
		return b.String()
	}
	if prev == nil {
		for _, in := range s.Instances {
			fmt.Fprintf(&b, "  +%s %s", quote(in.ID), quote(in.Address))
		}
		return b.String()
	}
	for _, in := range s.Instances {
		old, ok := prev.Find(in.ID)
		switch {
		case !ok:
			fmt.Fprintf(&b, "  +%s %s", quote(in.ID), quote(in.Address))
		case !old.Equal(in):
			fmt.Fprintf(&b, "  ~%s %s", quote(in.ID), changedFields(old, in))
		}
	}
	for _, in := range prev.Instances {
		if _, ok := s.Find(in.ID); !ok {
			fmt.Fprintf(&b, "  -%s", quote(in.ID))
		}
	}
	return b.String()
}

func changedFields(a, b registry.Instance) string {
	var f []string
	if a.Address != b.Address {
		f = append(f, "address="+quote(b.Address))
	}
	if a.Version != b.Version {
		f = append(f, "version="+quote(b.Version))
	}
	if a.Zone != b.Zone {
		f = append(f, "zone="+quote(b.Zone))
	}
	if a.Region != b.Region {
		f = append(f, "region="+quote(b.Region))
	}
	if a.Weight != b.Weight {
		f = append(f, fmt.Sprintf("weight=%d", b.Weight))
	}
	if !slices.Equal(a.Tags, b.Tags) {
		f = append(f, "tags="+tagString(b.Tags))
	}
	if !maps.Equal(a.Metadata, b.Metadata) {
		f = append(f, "metadata="+metaString(b.Metadata))
	}
	if !slices.Equal(a.Endpoints, b.Endpoints) {
		f = append(f, "endpoints="+endpointString(b.Endpoints))
	}
	return "(" + strings.Join(f, " ") + ")"
}

func newPick() *cobra.Command {
	var (
		strategy string
		key      string
		endpoint string
		count    int
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "pick SERVICE",
		Short: "Pick instances of a service with a strategy, as a client would",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := selector.ParseStrategy(strategy)
			if err != nil {
				return err
			}
			if endpoint != "" {
				if err := backend.ValidateEndpointName("--endpoint", endpoint); err != nil {
					return err
				}
			}
			reg, err := openRegistry(cmd)
			if err != nil {
				return err
			}
			defer reg.Close()
			snap, err := reg.Lookup(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			sel, err := selector.New(selector.WithStrategy(st))
			if err != nil {
				return err
			}
			sel.Update(snap)
			counts := map[string]int{}
			var picked []registry.Instance
			for range count {
				in, done, err := sel.Pick(cmd.Context(), selector.PickOptions{Key: key, Exclude: servesNo(endpoint)})
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				done.Done(nil, 0)
				if counts[in.ID] == 0 {
					picked = append(picked, in)
				}
				counts[in.ID]++
			}
			out := cmd.OutOrStdout()
			if asJSON {
				type row struct {
					registry.Instance
					Endpoint registry.Endpoint `json:"endpoint"` // the address to call
					Picks    int               `json:"picks"`
				}
				rows := []row{}
				for _, in := range picked {
					e, _ := in.Endpoint(endpoint)
					rows = append(rows, row{in, e, counts[in.ID]})
				}
				return json.NewEncoder(out).Encode(rows)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDRESS\tWEIGHT\tPICKS")
			for _, in := range picked {
				e, _ := in.Endpoint(endpoint) // the picks excluded the instances without it
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", quote(in.ID), quote(e.Address), in.Weight, counts[in.ID])
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&strategy, "strategy", string(selector.P2CEWMA), "selection strategy: "+strategyNames())
	cmd.Flags().StringVar(&key, "key", "", "affinity key for consistent_hash and maglev (a user ID, …)")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "pick only instances serving this endpoint, such as grpc, and show its address")
	intVar(cmd.Flags(), &count, "count", 1, 1, maxPicks, fmt.Sprintf("number of picks (1 to %d)", maxPicks))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// servesNo returns the pick filter of --endpoint: it rejects the
// instances that do not serve it, as registry.Instance.Endpoint decides.
func servesNo(endpoint string) func(*registry.Instance) bool {
	if endpoint == "" {
		return nil
	}
	return func(in *registry.Instance) bool {
		_, ok := in.Endpoint(endpoint)
		return !ok
	}
}

func strategyNames() string {
	var n []string
	for _, s := range selector.Strategies() {
		n = append(n, string(s))
	}
	return strings.Join(n, ", ")
}
