package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// The operator's actions on one instance (docs/operations.md, "Acting on
// an instance"): each is an override in the registry's record store that
// every reader applies and the owner's heartbeats cannot undo.

// actionFlags are the flags every action takes.
type actionFlags struct {
	by, reason string
}

func (f *actionFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.by, "by", "", "who acts, for the record (default user@host)")
	cmd.Flags().StringVar(&f.reason, "reason", "", "why, for the record")
}

// target fills in an override's instance: an argument with a ':' is an
// address, which outlives the owner's restarts; anything else an ID.
func target(o *registry.Override, arg string) {
	if strings.Contains(arg, ":") {
		o.Address = arg
	} else {
		o.ID = arg
	}
}

// newActions returns drain, weight, maint, restore, deregister and
// overrides.
func newActions() []*cobra.Command {
	return []*cobra.Command{
		newOverrideAction("drain SERVICE ID|ADDRESS", "Serve an instance at weight 0 until restore (it stays registered)",
			func(o *registry.Override, _ []string) error { o.Drain = true; return nil }),
		newOverrideAction("weight SERVICE ID|ADDRESS WEIGHT", "Serve an instance at WEIGHT until restore, whatever its owner writes",
			func(o *registry.Override, args []string) error {
				n, err := strconv.Atoi(args[2])
				if err != nil || n < 0 || n > 65535 {
					return fmt.Errorf("invalid WEIGHT %s: want a whole number from 0 to 65535", quote(args[2]))
				}
				o.Weight = &n
				return nil
			}),
		newOverrideAction("maint SERVICE ID|ADDRESS", "Leave an instance out of every reader's list until restore",
			func(o *registry.Override, _ []string) error { o.Maintenance = true; return nil }),
		newRestore(), newDeregister(), newOverrides(),
	}
}

func newOverrideAction(use, short string, set func(*registry.Override, []string) error) *cobra.Command {
	var f actionFlags
	nargs := len(strings.Fields(use)) - 1
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(nargs),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			o := registry.Override{Service: args[0], By: f.by, Reason: f.reason}
			target(&o, args[1])
			if err := set(&o, args); err != nil {
				return err
			}
			warnIfAbsent(cmd, reg, o)
			if err := reg.SetOverride(cmd.Context(), o); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s until \"roster restore %s %s\"\n",
				quote(o.Service), quote(o.Target()), o.Action(), quote(o.Service), quote(o.Target()))
			return nil
		}),
	}
	f.add(cmd)
	return cmd
}

// warnIfAbsent warns when no instance of the override's target is
// registered now: a mistyped ID would otherwise act on nothing in
// silence. An address override for a process not yet started is
// legitimate, so it is a warning, not a refusal. It asks the backend
// itself: Lookup would leave out an instance already in maintenance.
func warnIfAbsent(cmd *cobra.Command, reg *registry.Registry, o registry.Override) {
	var drv driver.Driver
	if !reg.As(&drv) {
		return
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), registry.DefaultLookupTimeout)
	defer cancel()
	snap, err := drv.List(ctx, o.Service)
	if err != nil {
		return // SetOverride reports the backend's state
	}
	for _, in := range snap.Instances {
		if in.ID == o.ID || o.Address != "" && in.Address == o.Address {
			return
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "roster: warning: no instance %s of %s is listed now; the override applies when one is\n",
		quote(o.Target()), quote(o.Service))
}

func newRestore() *cobra.Command {
	return &cobra.Command{
		Use:   "restore SERVICE ID|ADDRESS",
		Short: "Lift the override of an instance (drain, weight, maint or deregister)",
		Args:  cobra.ExactArgs(2),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			if err := reg.ClearOverride(cmd.Context(), args[0], args[1]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: restored: served as its owner registers it\n", quote(args[0]), quote(args[1]))
			return nil
		}),
	}
}

func newDeregister() *cobra.Command {
	var f actionFlags
	cmd := &cobra.Command{
		Use:   "deregister SERVICE ID|ADDRESS",
		Short: "Remove an instance for good, a zombie or a live one, until restore",
		Long: `deregister removes an instance's record from the registry and leaves a
maintenance override marked "deregistered": a zombie (a record whose owner
is gone) is gone for good, and a live owner's heartbeats, which write its
record back, cannot bring it back into any reader's list. "roster restore"
lifts the override.`,
		Args: cobra.ExactArgs(2),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			o := registry.Override{Service: args[0], By: f.by, Reason: f.reason}
			target(&o, args[1])
			warnIfAbsent(cmd, reg, o)
			if err := reg.Deregister(cmd.Context(), o); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: deregistered; kept out until \"roster restore %s %s\"\n",
				quote(args[0]), quote(args[1]), quote(args[0]), quote(args[1]))
			return nil
		}),
	}
	f.add(cmd)
	return cmd
}

func newOverrides() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "overrides [SERVICE]",
		Short: "List the operators' overrides, of one service or of all",
		Args:  cobra.MaximumNArgs(1),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			service := ""
			if len(args) == 1 {
				service = args[0]
			}
			ovs, err := reg.Overrides(cmd.Context(), service)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if ovs == nil {
					ovs = []registry.Override{}
				}
				return json.NewEncoder(out).Encode(ovs)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tINSTANCE\tACTION\tBY\tAT\tREASON")
			for _, o := range ovs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", quote(o.Service), quote(o.Target()), o.Action(),
					quote(o.By), o.At.Format(time.RFC3339), dash(quote(o.Reason)))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
