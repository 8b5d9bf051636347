package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/spf13/cobra"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// urlHarness runs the conformance suite against a live deployment: its
// drivers are the URL's, and the suite opens its observers by the URL.
// It has no fault hooks: checks that need control of the server are
// reported as not run.
type urlHarness struct {
	url string
	cfg conformance.Config
}

func (h urlHarness) MakeDriver(ctx context.Context) (driver.Driver, error) {
	return backend.OpenURL(ctx, h.url)
}

func (h urlHarness) URL() string { return h.url }

func (h urlHarness) Config() conformance.Config { return h.cfg }

// noter is what a driver implements to describe its deployment where it
// makes the backend behave worse than its best case (for example Redis
// layout keys without keyspace notifications). It is optional.
type noter interface {
	Notes(ctx context.Context) []string
}

// driverNotes returns the notes of the registry's driver, if it has any.
func driverNotes(ctx context.Context, r *registry.Registry) []string {
	var drv driver.Driver
	if !r.As(&drv) {
		return nil
	}
	if n, ok := drv.(noter); ok {
		return n.Notes(ctx)
	}
	return nil
}

func newConformance() *cobra.Command {
	cr := &conformanceCmd{}
	cmd := &cobra.Command{
		Use:   "conformance [URL]",
		Short: "Run the backend conformance suite against a live registry",
		Long: `conformance runs Roster's backend conformance suite against the registry at URL
(or --registry, $ROSTER_REGISTRY) and prints one line per check.

It only touches services named conf-<start>-<run>-…, and deregisters what it
registers. Every record it writes has a TTL of at most 30s, so a run killed
outright leaves nothing listed for longer. It first removes what earlier runs
killed that way left: records of runs older than two minutes whose marker
(conf-<start>-<run>-run) is gone, and conf-<8 hex>-… records of older versions. Checks that need control of the server (restart, wipe, partition,
deleting keys by hand) are reported as not run. Notes the backend gives about
the deployment (say, Redis without keyspace notifications) are printed before
the results (on stderr with --json). The exit status is 1 if any check fails.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u := registryURL(cmd)
			if len(args) == 1 {
				u = args[0]
			}
			if u == "" {
				return fmt.Errorf("no registry URL: give one, or set --registry or ROSTER_REGISTRY")
			}
			return cr.run(cmd, u)
		},
	}
	f := cmd.Flags()
	durationVar(f, &cr.cfg.TTL, "ttl", 0, 0, conformance.MaxRecordTTL,
		"TTL of the liveness checks, up to 30s and at least the backend's minimum (default max(3s, the backend's minimum))")
	durationVar(f, &cr.cfg.ExpirySlack, "expiry-slack", 1500*time.Millisecond, 10*time.Millisecond, maxTimeout,
		"how late after its TTL a crashed instance may disappear (10ms to 1h)")
	durationVar(f, &cr.cfg.Propagation, "propagation", 2*time.Second, 10*time.Millisecond, maxTimeout,
		"how long a write may take to reach another client (10ms to 1h)")
	f.StringVar(&cr.filter, "run", "", "run only the checks matching this regular expression")
	f.BoolVar(&cr.asJSON, "json", false, "print the results as JSON")
	return cmd
}

// conformanceCmd is one "roster conformance" invocation.
type conformanceCmd struct {
	cfg    conformance.Config
	filter string
	asJSON bool
}

func (cr *conformanceCmd) run(cmd *cobra.Command, u string) error {
	shown := u
	u, shared := sharedMem(u)
	notes, lim, err := probeRegistry(cmd.Context(), u)
	if err != nil {
		return err
	}
	if shared {
		notes = append(notes, "mem:// is a server inside this roster process: the checks share one, "+
			"so they test the memory backend, not a deployment")
	}
	if cr.cfg.TTL == 0 {
		cr.cfg.TTL = max(3*time.Second, lim.MinTTL)
	} else if _, err := backend.ValidateTTL(cr.cfg.TTL, lim); err != nil {
		return fmt.Errorf("--ttl: %w", err)
	}
	names, err := selectChecks(cr.filter)
	if err != nil {
		return err
	}
	h := urlHarness{u, cr.cfg}
	notes = append(notes, cleanLeftovers(cmd.Context(), h)...)
	out := cmd.OutOrStdout()
	row := rowPrinter(out, names)
	if !cr.asJSON {
		fmt.Fprintf(out, "conformance of %s (ttl %v)\n", quote(registry.Redact(shown)), cr.cfg.TTL)
		for _, n := range notes {
			fmt.Fprintf(out, "note: %s\n", escapeControls(n))
		}
		row("CHECK", "RESULT", "TIME", "REASON")
	} else {
		for _, n := range notes {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", escapeControls(n))
		}
	}
	var passed, failed, notRun int
	rows := []resultJSON{}
	conformance.RunChecks(cmd.Context(), h, names, func(r conformance.Result) {
		res := "pass"
		switch {
		case r.Skipped:
			res = "not run"
			notRun++
		case !r.Passed:
			res = "FAIL"
			failed++
		default:
			passed++
		}
		rows = append(rows, resultJSON{Name: r.Name, Result: strings.ToLower(strings.ReplaceAll(res, " ", "_")),
			Reason: r.Reason, DurationMS: milliseconds(r.Duration)})
		if !cr.asJSON {
			row(r.Name, res, fmt.Sprintf("%.1fs", r.Duration.Seconds()), escapeControls(r.Reason))
		}
	})
	if cr.asJSON {
		if err := json.NewEncoder(out).Encode(rows); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "%d passed, %d failed, %d not run\n", passed, failed, notRun)
	}
	if failed > 0 {
		return exitError{1}
	}
	return nil
}

// cleanLeftovers removes what earlier killed runs left, and returns a
// note saying so when there was any.
func cleanLeftovers(ctx context.Context, h urlHarness) []string {
	cleaned, err := conformance.CleanLeftovers(ctx, h)
	if len(cleaned) == 0 && err == nil {
		return nil
	}
	note := fmt.Sprintf("removed what earlier killed runs left in %d services", len(cleaned))
	if err != nil {
		note += fmt.Sprintf(" (not all: %v)", err)
	}
	return []string{note}
}

// sharedMem rewrites "mem://", which opens a private server for each
// registry (so the suite's clients would never see each other's
// writes), to a server of this process that they all share.
func sharedMem(u string) (string, bool) {
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != memory.Scheme || pu.Opaque != "" || pu.Host != "" {
		return u, false
	}
	pu.Host = fmt.Sprintf("roster-conformance-%d", rand.Uint64())
	return pu.String(), true
}

// resultJSON is one check in --json output: lower-case snake_case keys
// and durations in milliseconds, as in every --json of roster.
type resultJSON struct {
	Name       string  `json:"name"`
	Result     string  `json:"result"` // pass, fail or not_run
	Reason     string  `json:"reason,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// milliseconds is d in milliseconds, to the microsecond.
func milliseconds(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// probeRegistry checks reachability once, with a clear error, before 30
// checks fail alike; it returns the backend's notes and limits.
func probeRegistry(ctx context.Context, u string) ([]string, registry.Limits, error) {
	probe, err := registry.Open(ctx, u)
	if err != nil {
		return nil, registry.Limits{}, err
	}
	defer probe.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := probe.Services(ctx); err != nil {
		return nil, registry.Limits{}, fmt.Errorf("%s is not usable: %w", registry.Redact(u), err)
	}
	return driverNotes(ctx, probe), probe.Limits(), nil
}

// selectChecks returns the checks whose names match filter (all: nil).
func selectChecks(filter string) ([]string, error) {
	if filter == "" {
		return nil, nil
	}
	re, err := regexp.Compile(filter)
	if err != nil {
		return nil, fmt.Errorf("--run: %w", err)
	}
	var names []string
	for _, n := range conformance.Names() {
		if re.MatchString(n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--run %q matches no check (checks: %s)", filter, strings.Join(conformance.Names(), ", "))
	}
	return names, nil
}

// rowPrinter prints result rows as checks finish, so the columns are
// sized up front (a tabwriter flushed per row aligns nothing).
func rowPrinter(out io.Writer, names []string) func(name, res, dur, reason string) {
	if len(names) == 0 {
		names = conformance.Names()
	}
	width := len("CHECK")
	for _, n := range names {
		width = max(width, len(n))
	}
	return func(name, res, dur, reason string) {
		fmt.Fprintln(out, strings.TrimRight(fmt.Sprintf("%-*s  %-7s  %6s  %s", width, name, res, dur, reason), " "))
	}
}
