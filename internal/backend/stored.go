package backend

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/roster-go/roster/registry/driver"
)

// DefaultWeight is the weight given to an instance registered with Weight 0.
// A weight of 0 set later (Lease.Drain) means "draining": selectors pick a
// draining instance only when nothing else is left.
const DefaultWeight = 100

// DecodeStored reads an instance stored in Instance's JSON form under a
// key (or path) that is the truth for its service and ID, as etcd and
// ZooKeeper store them; false for a value that is not one.
func DecodeStored(service, id string, val []byte) (driver.Instance, bool) {
	var in driver.Instance
	if err := json.Unmarshal(val, &in); err != nil || in.Address == "" {
		return driver.Instance{}, false
	}
	in.ID, in.Service = id, service
	return in, true
}

// Encode returns the stored form of inst: its JSON, as every backend
// that stores a value keeps it, so that other tools can read it.
func Encode(inst driver.Instance) ([]byte, error) { return json.Marshal(inst) }

// SortInstances sorts instances by ID, the order Snapshot promises.
// Drivers call it before returning a snapshot.
func SortInstances(in []driver.Instance) {
	slices.SortFunc(in, func(a, b driver.Instance) int {
		return strings.Compare(a.ID, b.ID)
	})
}
