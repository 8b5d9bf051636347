package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// The limits of the numeric and duration flags. A value outside is
// rejected when the flag is parsed, before anything runs, with an error
// naming the flag and the range (pflag words it as `invalid argument "0"
// for "--count" flag: …`). docs/cli.md lists them.
const (
	maxPicks   = 1_000_000
	maxWorkers = 256
	maxTimeout = time.Hour // --drain, --check-interval, conformance timings, bench --hold, agent --token-ttl
	minTTL     = 10 * time.Millisecond
	maxTTL     = 24 * time.Hour
	// maxStaleness bounds a set agent --max-staleness: a week of serving
	// the last good list through an outage (0, the default, sets none).
	maxStaleness = 7 * 24 * time.Hour
	// bench: beyond these a run measures the machine, not the registry
	// (each registry is its own connections; each instance a lease).
	maxBenchInstances  = 1_000_000
	maxBenchRegistries = 1_000
	maxBenchProbes     = 10_000
)

// durationFlag is a time.Duration flag bounded to [min, max], or 0 where
// zero says "no bound".
type durationFlag struct {
	p         *time.Duration
	min, max  time.Duration
	zeroIsOff bool
}

// durationVar defines a duration flag whose value must lie in [min, max].
func durationVar(f *pflag.FlagSet, p *time.Duration, name string, value, min, max time.Duration, usage string) {
	*p = value
	f.Var(&durationFlag{p: p, min: min, max: max}, name, usage)
}

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (write it like 500ms, 3s or 1m)")
	}
	if f.zeroIsOff && d == 0 {
		*f.p = 0
		return nil
	}
	if d < f.min || d > f.max {
		if f.zeroIsOff {
			return fmt.Errorf("must be 0 (no bound) or from %s to %s", shortDuration(f.min), shortDuration(f.max))
		}
		return fmt.Errorf("must be from %s to %s", shortDuration(f.min), shortDuration(f.max))
	}
	*f.p = d
	return nil
}

// boundVar defines a duration flag that is 0 (no bound) or in [min, max].
func boundVar(f *pflag.FlagSet, p *time.Duration, name string, value, min, max time.Duration, usage string) {
	*p = value
	f.Var(&durationFlag{p, min, max, true}, name, usage)
}

func (f *durationFlag) String() string { return shortDuration(*f.p) }
func (f *durationFlag) Type() string   { return "duration" }

// intFlag is an int flag bounded to [min, max].
type intFlag struct {
	p        *int
	min, max int
}

// intVar defines an int flag whose value must lie in [min, max].
func intVar(f *pflag.FlagSet, p *int, name string, value, min, max int, usage string) {
	*p = value
	f.Var(&intFlag{p, min, max}, name, usage)
}

func (f *intFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < f.min || n > f.max {
		return fmt.Errorf("must be a whole number from %d to %d", f.min, f.max)
	}
	*f.p = n
	return nil
}

func (f *intFlag) String() string { return strconv.Itoa(*f.p) }
func (f *intFlag) Type() string   { return "int" }

// shortDuration prints d without the zero units time.Duration.String
// appends ("1h", not "1h0m0s").
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// checkHTTPURL validates --check-http: an absolute http or https URL.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("invalid --check-http: want an http:// or https:// URL with a host")
	}
	return nil
}

// modeFlag is a file permission flag, written in octal (0660).
type modeFlag struct{ p *os.FileMode }

// modeVar defines a permission flag of at most 0777.
func modeVar(f *pflag.FlagSet, p *os.FileMode, name string, value os.FileMode, usage string) {
	*p = value
	f.Var(modeFlag{p}, name, usage)
}

func (f modeFlag) Set(s string) error {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return errors.New("not a permission mode (write it in octal, 0600 to 0777)")
	}
	*f.p = os.FileMode(m)
	return nil
}

func (f modeFlag) String() string { return fmt.Sprintf("%04o", uint32(*f.p)) }
func (modeFlag) Type() string     { return "mode" }
