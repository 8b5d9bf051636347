package selector

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/roster-go/roster/registry"
)

// A Filter narrows the instances a Selector chooses from. Filters run in
// Update, in the order given to WithFilters, never in Pick. A filter must
// not modify its input; it returns the instances to keep (possibly the
// input itself).
//
// If the filters leave nothing, Pick returns ErrNoInstances: a version
// filter for a canary that is not deployed fails loudly rather than
// sending traffic elsewhere. Use WithLocality (or PreferZone) for a soft
// preference.
type Filter func([]registry.Instance) []registry.Instance

func keep(in []registry.Instance, ok func(*registry.Instance) bool) []registry.Instance {
	var out []registry.Instance
	for i := range in {
		if ok(&in[i]) {
			out = append(out, in[i])
		}
	}
	return out
}

// Version keeps instances whose Version is one of versions (canary or gray
// release: one Selector per version group).
func Version(versions ...string) Filter {
	vs := slices.Clone(versions)
	return func(in []registry.Instance) []registry.Instance {
		return keep(in, func(i *registry.Instance) bool { return slices.Contains(vs, i.Version) })
	}
}

// Tags keeps instances that carry every one of tags.
func Tags(tags ...string) Filter {
	ts := slices.Clone(tags)
	return func(in []registry.Instance) []registry.Instance {
		return keep(in, func(i *registry.Instance) bool {
			for _, t := range ts {
				if !slices.Contains(i.Tags, t) {
					return false
				}
			}
			return true
		})
	}
}

// Metadata keeps instances whose Metadata has every key of match with the
// same value.
func Metadata(match map[string]string) Filter {
	m := make(map[string]string, len(match))
	for k, v := range match {
		m[k] = v
	}
	return func(in []registry.Instance) []registry.Instance {
		return keep(in, func(i *registry.Instance) bool {
			for k, v := range m {
				if got, ok := i.Metadata[k]; !ok || got != v {
					return false
				}
			}
			return true
		})
	}
}

// PreferZone keeps the instances of zone when at least minHealthy of them
// are serving (weight > 0); otherwise it spills over to every zone, so a
// zone that is nearly empty or draining does not concentrate its clients'
// traffic on its last instances. minHealthy < 1 counts as 1.
//
// PreferZone sees only what the registry says, at Update: an instance
// that fails every call but stays registered keeps the zone's traffic.
// For a preference that follows health (the quarantine's ejections) and
// spills in proportion, use WithLocality.
func PreferZone(zone string, minHealthy int) Filter {
	minHealthy = max(minHealthy, 1)
	return func(in []registry.Instance) []registry.Instance {
		local := keep(in, func(i *registry.Instance) bool { return i.Zone == zone })
		healthy := 0
		for i := range local {
			if local[i].Weight > 0 {
				healthy++
			}
		}
		if healthy >= minHealthy {
			return local
		}
		return in
	}
}

// Subset keeps a deterministic subset of size instances for this client:
// rendezvous hashing of (clientKey, instance ID), as gRPC A68. Each client
// (distinct clientKey) talks to a different, stable subset, and an
// instance joining or leaving changes at most one member of each subset.
// Use it when thousands of clients would otherwise each connect to
// thousands of instances. The subset is taken before the strategy, so
// draining instances count towards size.
func Subset(size int, clientKey string) Filter {
	return func(in []registry.Instance) []registry.Instance {
		if size <= 0 || len(in) <= size {
			return in
		}
		type scored struct {
			s uint64
			i int
		}
		sc := make([]scored, len(in))
		buf := make([]byte, 0, 64)
		for i := range in {
			buf = append(append(append(buf[:0], clientKey...), '/'), in[i].ID...)
			sc[i] = scored{xxhash.Sum64(buf), i}
		}
		slices.SortFunc(sc, func(a, b scored) int { return cmp.Compare(b.s, a.s) })
		idx := make([]int, size)
		for k := range idx {
			idx[k] = sc[k].i
		}
		slices.Sort(idx) // keep the snapshot's ID order
		out := make([]registry.Instance, size)
		for k, i := range idx {
			out[k] = in[i]
		}
		return out
	}
}
