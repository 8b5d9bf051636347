package policy

import (
	"maps"
	"slices"

	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// SelectorOptions returns the selector options p sets, after validating
// it: its strategy, filter, split and locality (zone, region,
// overprovisioning, panic threshold). Applied after a
// client's own options (selector.New(append(own, opts...)...)), the
// strategy, split and locality replace the client's and the filter adds to
// its filters; what p leaves out stays as the client set it.
//
// A split of two versions that take every call (v1 80, v2 20) becomes a
// filter on the two versions and a split of the first one.
func (p Policy) SelectorOptions() ([]selector.Option, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var opts []selector.Option
	if p.Strategy != "" {
		opts = append(opts, selector.WithStrategy(selector.Strategy(p.Strategy)))
	}
	if f := p.Filter; f != nil && (f.Version != "" || f.Zone != "" || f.Tag != "" || len(f.Metadata) > 0) {
		opts = append(opts, selector.WithFilters(f.selector()))
	}
	switch len(p.Split) {
	case 1:
		e := p.Split[0]
		opts = append(opts, selector.WithSplit(selector.Split{
			Route: selector.Route{Version: e.Version, Tag: e.Tag}, Percent: e.Percent}))
	case 2:
		a, b := p.Split[0], p.Split[1]
		opts = append(opts, selector.WithFilters(selector.Version(a.Version, b.Version)),
			selector.WithSplit(selector.Split{Route: selector.Route{Version: a.Version}, Percent: a.Percent}))
	}
	if l := p.Locality; l != nil {
		if l.Zone != "" {
			opts = append(opts, selector.WithLocality(l.Zone))
		}
		if l.Region != "" {
			opts = append(opts, selector.WithRegion(l.Region))
		}
		if l.Overprovisioning != 0 {
			opts = append(opts, selector.WithOverprovisioning(l.Overprovisioning))
		}
		switch {
		case l.PanicThreshold < 0:
			opts = append(opts, selector.WithPanicThreshold(0)) // no panic mode
		case l.PanicThreshold > 0:
			opts = append(opts, selector.WithPanicThreshold(int(l.PanicThreshold)))
		}
	}
	return opts, nil
}

// selector returns f as a selector filter.
func (f *Filter) selector() selector.Filter {
	version, zone, tag, meta := f.Version, f.Zone, f.Tag, maps.Clone(f.Metadata)
	return func(in []registry.Instance) []registry.Instance {
		var out []registry.Instance
		for i := range in {
			if match(&in[i], version, zone, tag, meta) {
				out = append(out, in[i])
			}
		}
		return out
	}
}

func match(in *registry.Instance, version, zone, tag string, meta map[string]string) bool {
	if version != "" && in.Version != version || zone != "" && in.Zone != zone {
		return false
	}
	if tag != "" && !slices.Contains(in.Tags, tag) {
		return false
	}
	for k, v := range meta {
		if got, ok := in.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}
