package driver

import (
	"maps"
	"net"
	"slices"
	"strconv"
	"time"
)

// Instance is one registered process of a service. Its JSON form (the
// lower-case names below) is the one backends store, so that other tools
// can read it and Go field renames never change stored data. The limits
// of each field are in docs/backends/limits.md.
type Instance struct {
	ID      string `json:"id"`                // unique per registration; Register sets <service>-<host>-<port>-<random> when empty
	Service string `json:"service"`           // [a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?
	Address string `json:"address"`           // host:port
	Version string `json:"version,omitempty"` // free form, e.g. "1.2.0"; used by version filters
	Zone    string `json:"zone,omitempty"`    // locality, e.g. "hz-1"; used by zone filters
	// Region is the wider locality that holds Zone, e.g. "eu-west"
	// (optional): selector.WithLocality fails a zone over to the rest
	// of its region before any other.
	Region   string            `json:"region,omitempty"`
	Weight   uint32            `json:"weight"`             // relative share of traffic; 0 after Drain
	Tags     []string          `json:"tags,omitempty"`     // labels, e.g. "canary"
	Metadata map[string]string `json:"metadata,omitempty"` // bounded, validated key/value pairs
	// Endpoints names the ports of a process that serves several, such as
	// "http" and "grpc". Address stays the primary: a record without
	// endpoints is a process with one port. See Endpoint.
	Endpoints []Endpoint `json:"endpoints,omitempty"`
}

// Endpoint is one named port of an instance.
type Endpoint struct {
	Name     string `json:"name"`               // [a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?, a Kubernetes port name
	Address  string `json:"address"`            // host:port
	Protocol string `json:"protocol,omitempty"` // e.g. "http", "grpc", "tcp"; free form
}

// Endpoint returns the endpoint called name. The empty name is the
// primary, Address. So is a name the instance does not announce, unless
// the primary has a name of its own: an instance whose primary is "grpc"
// serves no "http", but a one-port instance serves every name.
func (i Instance) Endpoint(name string) (Endpoint, bool) {
	primaryNamed := false
	for _, e := range i.Endpoints {
		if e.Name == name && name != "" {
			return e, true
		}
		if e.Address == i.Address {
			primaryNamed = true
		}
	}
	if name != "" && primaryNamed {
		return Endpoint{}, false
	}
	return Endpoint{Address: i.Address}, true
}

// Host returns the host part of Address.
func (i Instance) Host() string {
	h, _, _ := net.SplitHostPort(i.Address)
	return h
}

// Port returns the port part of Address, or 0 if it does not parse.
func (i Instance) Port() int {
	_, p, _ := net.SplitHostPort(i.Address)
	n, _ := strconv.Atoi(p)
	return n
}

// Equal reports whether two instances have identical fields. Tag order is
// significant; a nil and an empty map or slice are equal.
func (i Instance) Equal(o Instance) bool {
	return i.ID == o.ID && i.Service == o.Service && i.Address == o.Address &&
		i.Version == o.Version && i.Zone == o.Zone && i.Region == o.Region && i.Weight == o.Weight &&
		slices.Equal(i.Tags, o.Tags) && maps.Equal(i.Metadata, o.Metadata) &&
		slices.Equal(i.Endpoints, o.Endpoints)
}

// Clone returns a deep copy, so that the copy shares no slice or map with i.
func (i Instance) Clone() Instance {
	i.Tags = slices.Clone(i.Tags)
	i.Endpoints = slices.Clone(i.Endpoints)
	if i.Metadata != nil {
		i.Metadata = maps.Clone(i.Metadata)
	}
	return i
}

// Snapshot is the set of live instances of one service at one point in
// time. Snapshots are immutable once published: readers share them and must
// not modify the Instances slice or what it holds.
type Snapshot struct {
	Service   string     `json:"service"`
	Instances []Instance `json:"instances"` // sorted by ID; empty is a real answer ("no instances")
	// Revision orders snapshots of one service: a Watcher never delivers a
	// lower revision after a higher one. It is the backend's revision or
	// index where the backend has one; after a backend wipe resets that
	// counter the cache keeps counting up from the last value it delivered.
	Revision uint64 `json:"revision"`
	// Stale is set when the backend is failing and this is the last good
	// state served from cache.
	Stale bool      `json:"stale"`
	At    time.Time `json:"at"` // when this state was read from the backend
}

// Find returns the instance with the given ID.
func (s Snapshot) Find(id string) (Instance, bool) {
	n, ok := slices.BinarySearchFunc(s.Instances, id, func(in Instance, id string) int {
		switch {
		case in.ID < id:
			return -1
		case in.ID > id:
			return 1
		}
		return 0
	})
	if !ok {
		return Instance{}, false
	}
	return s.Instances[n], true
}

// SameInstances reports whether s and o hold the same instances with the
// same fields, ignoring Revision, Stale and At.
func (s Snapshot) SameInstances(o Snapshot) bool {
	return slices.EqualFunc(s.Instances, o.Instances, Instance.Equal)
}
