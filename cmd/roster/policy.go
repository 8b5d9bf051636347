package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
)

// newPolicy is `roster policy`: the traffic policies stored in the
// registry, which every client that follows stored policies applies.
func newPolicy() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Get, set, list and remove the traffic policies stored in the registry",
		Long: `roster policy reads and writes the traffic policy of a service in the
registry (record policy/<service>). Every middleware.Client that follows stored
policies (the default) applies a change within the registry's watch delay,
keeping its per-instance state. See docs/policy.md for the fields.`,
	}
	cmd.AddCommand(newPolicyGet(), newPolicySet(), newPolicyLs(), newPolicyRm())
	return cmd
}

func newPolicyGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get SERVICE",
		Short: "Print the stored policy of a service, as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			s, err := policy.Get(cmd.Context(), reg, args[0])
			if err != nil {
				return err
			}
			return printPolicy(cmd.OutOrStdout(), s.Policy)
		}),
	}
}

func printPolicy(w io.Writer, p policy.Policy) error {
	b, err := policy.Marshal(p)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// policyFlags are the fields `roster policy set` changes one by one.
type policyFlags struct {
	file, strategy, hashKey, split, timeout string
	attempts                                int
}

func newPolicySet() *cobra.Command {
	var f policyFlags
	cmd := &cobra.Command{
		Use:   "set SERVICE [--file FILE | --split v2=50% ...]",
		Short: "Store the policy of a service: a whole one (--file), or the fields given",
		Long: `roster policy set stores the policy of SERVICE. --file FILE (- for stdin) gives
the whole policy as JSON. The other flags change only their field of the policy
stored now (read, change, write if unchanged meanwhile):

  roster policy set user-svc --split v2=5%
  roster policy set user-svc --split v1=50%,v2=50% --strategy p2c_ewma
  roster policy set user-svc --split none          # no split

A --split entry is VERSION=PERCENT, or tag:TAG=PERCENT. The policy is
validated before it is written: an invalid one is an error naming the field,
and nothing is written.`,
		Args: cobra.ExactArgs(1),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			return policySet(cmd, reg, args[0], &f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.file, "file", "", "the whole policy, as JSON (- for stdin)")
	fl.StringVar(&f.strategy, "strategy", "", "selector strategy (\"none\": the client's)")
	fl.StringVar(&f.hashKey, "hash-key", "", "header of the affinity key (\"none\": no header)")
	fl.StringVar(&f.split, "split", "", "canary split: VERSION=PERCENT[,VERSION=PERCENT] or tag:TAG=PERCENT (\"none\": no split)")
	fl.StringVar(&f.timeout, "timeout", "", "timeout of each call, such as 2s (\"none\": the caller's)")
	fl.IntVar(&f.attempts, "attempts", 0, "retry attempts, the first included (1 to 10)")
	return cmd
}

func policySet(cmd *cobra.Command, reg *registry.Registry, service string, f *policyFlags) error {
	ctx := cmd.Context()
	fl := cmd.Flags()
	edits := fl.Changed("strategy") || fl.Changed("hash-key") || fl.Changed("split") || fl.Changed("timeout") || fl.Changed("attempts")
	if f.file != "" {
		if edits {
			return fmt.Errorf("--file gives the whole policy: give it alone, or the field flags alone")
		}
		b, err := readPolicyFile(cmd, f.file)
		if err != nil {
			return err
		}
		p, err := policy.Parse(b)
		if err != nil {
			return fmt.Errorf("--file %s: %w", f.file, err)
		}
		v, err := policy.Put(ctx, reg, service, p)
		if err != nil {
			return err
		}
		return setDone(cmd, service, v, p)
	}
	if !edits {
		return fmt.Errorf("nothing to set: give --file or a field flag (--split, --strategy, --hash-key, --timeout, --attempts)")
	}
	cur, ifVersion := policy.Policy{}, registry.VersionAbsent
	s, err := policy.Get(ctx, reg, service)
	switch {
	case err == nil:
		cur, ifVersion = s.Policy, s.Version
	case errors.Is(err, registry.ErrNotFound):
	case s.Version != "":
		// A record that is no policy: the flags replace it.
		ifVersion = s.Version
	default:
		return err
	}
	p, err := f.apply(cmd, cur)
	if err != nil {
		return err
	}
	v, err := policy.PutIf(ctx, reg, service, p, ifVersion)
	if errors.Is(err, registry.ErrConflict) {
		return fmt.Errorf("the policy of %s changed while it was being set: run the command again (%w)", service, err)
	}
	if err != nil {
		return err
	}
	return setDone(cmd, service, v, p)
}

func setDone(cmd *cobra.Command, service, version string, p policy.Policy) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "roster: policy of %s stored (version %s)\n", service, version)
	return printPolicy(cmd.OutOrStdout(), p)
}

func readPolicyFile(cmd *cobra.Command, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
	}
	return os.ReadFile(name)
}

// apply changes the fields of p whose flags were given.
func (f *policyFlags) apply(cmd *cobra.Command, p policy.Policy) (policy.Policy, error) {
	fl := cmd.Flags()
	none := func(s string) string {
		if s == "none" {
			return ""
		}
		return s
	}
	if fl.Changed("strategy") {
		p.Strategy = none(f.strategy)
	}
	if fl.Changed("hash-key") {
		p.HashKey = none(f.hashKey)
	}
	if fl.Changed("timeout") {
		p.Timeout = 0
		if t := none(f.timeout); t != "" {
			d, err := time.ParseDuration(t)
			if err != nil {
				return p, fmt.Errorf("--timeout %q: want a duration such as 2s", f.timeout)
			}
			p.Timeout = policy.Duration(d)
		}
	}
	if fl.Changed("attempts") {
		r := policy.Retry{}
		if p.Retry != nil {
			r = *p.Retry
		}
		r.Attempts = f.attempts
		p.Retry = &r
	}
	if fl.Changed("split") {
		split, err := parseSplit(none(f.split))
		if err != nil {
			return p, err
		}
		p.Split = split
	}
	return p, p.Validate()
}

// parseSplit reads VERSION=PERCENT[%] or tag:TAG=PERCENT[%] entries,
// comma-separated.
func parseSplit(s string) ([]policy.SplitEntry, error) {
	if s == "" {
		return nil, nil
	}
	var out []policy.SplitEntry
	for e := range strings.SplitSeq(s, ",") {
		name, pct, ok := strings.Cut(strings.TrimSpace(e), "=")
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(pct), "%"), 64)
		if !ok || name == "" || err != nil {
			return nil, fmt.Errorf("--split %q: want VERSION=PERCENT or tag:TAG=PERCENT, such as v2=50%%", e)
		}
		entry := policy.SplitEntry{Version: name, Percent: v}
		if tag, ok := strings.CutPrefix(name, "tag:"); ok {
			entry = policy.SplitEntry{Tag: tag, Percent: v}
		}
		out = append(out, entry)
	}
	return out, nil
}

func newPolicyLs() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the stored policies",
		Args:  cobra.NoArgs,
		RunE: withRegistry(func(cmd *cobra.Command, _ []string, reg *registry.Registry) error {
			all, err := policy.List(cmd.Context(), reg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				type row struct {
					Service string          `json:"service"`
					Version string          `json:"version"`
					Policy  json.RawMessage `json:"policy,omitempty"`
					Error   string          `json:"error,omitempty"`
				}
				rows := []row{}
				for _, s := range all {
					r := row{Service: s.Service, Version: s.Version}
					if s.Err != nil {
						r.Error = s.Err.Error()
					} else {
						r.Policy, _ = policy.Marshal(s.Policy)
					}
					rows = append(rows, r)
				}
				return json.NewEncoder(out).Encode(rows)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tVERSION\tPOLICY")
			for _, s := range all {
				desc := "invalid: " + errString(s.Err)
				if s.Err == nil {
					b, _ := policy.Marshal(s.Policy)
					desc = string(b)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Service, s.Version, desc)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func newPolicyRm() *cobra.Command {
	return &cobra.Command{
		Use:   "rm SERVICE",
		Short: "Remove the stored policy of a service (clients go back to their own)",
		Args:  cobra.ExactArgs(1),
		RunE: withRegistry(func(cmd *cobra.Command, args []string, reg *registry.Registry) error {
			if err := policy.Delete(cmd.Context(), reg, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "roster: policy of %s removed\n", args[0])
			return nil
		}),
	}
}
