package consul

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/registry/driver"
)

// Meta keys. Roster keeps its own fields (weight, version, zone, region) in one
// key, metaFields, so they cost one of Consul's 64 Meta pairs:
// backend.MaxMetadataPairs is 63 for that reason. The common validation
// reserves the roster_ prefix, so user metadata never collides with it.
const (
	metaFields = "roster_fields"
	// metaForeignWeight is the weight key of instances registered by other
	// tools, such as the PHP article's payload: Meta {"weight": "3"}.
	metaForeignWeight = "weight"
)

// checkOutput is constant: Consul syncs a TTL check to the servers when
// its status changes, or its output changes (at most every 5 min), so a
// constant output keeps heartbeats off the Raft log.
const checkOutput = "roster lease"

func checkID(id string) string { return "service:" + id }

// toConsul builds the agent registration of inst.
func (d *Driver) toConsul(inst driver.Instance, ttl time.Duration) (*api.AgentServiceRegistration, error) {
	host, portS, err := net.SplitHostPort(inst.Address)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: address %q", driver.ErrInvalid, inst.Address)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: port of %q", driver.ErrInvalid, inst.Address)
	}
	meta := make(map[string]string, len(inst.Metadata)+1)
	maps.Copy(meta, inst.Metadata)
	meta[metaFields] = encodeFields(inst)
	check := &api.AgentServiceCheck{
		CheckID:                        checkID(inst.ID),
		DeregisterCriticalServiceAfter: d.o.DeregisterAfter.String(),
	}
	switch d.o.Check {
	case CheckHTTP:
		check.Name = "roster HTTP check"
		check.HTTP = "http://" + net.JoinHostPort(host, portS) + d.o.HTTPPath
		check.Interval = d.o.HTTPInterval.String()
		check.Timeout = d.o.HTTPTimeout.String()
		check.Method = http.MethodGet
	default:
		check.Name = "roster lease TTL"
		check.TTL = ttl.String()
		// Checks start critical by default: without this a new instance
		// would be missing from ?passing until its first heartbeat.
		check.Status = api.HealthPassing
	}
	asr := &api.AgentServiceRegistration{
		ID:              inst.ID,
		Name:            inst.Service,
		Tags:            slices.Clone(inst.Tags),
		Address:         host,
		Port:            port,
		Meta:            meta,
		TaggedAddresses: taggedAddresses(inst.Endpoints),
		// DNS SRV consumers see the weight too; Consul requires 1 to
		// 65535 (backend.MaxWeight), so a drained 0 is written as 1 here.
		Weights: &api.AgentWeights{Passing: max(int(inst.Weight), 1), Warning: 1},
	}
	// The notes carry a digest of the instance, so that an Update changes
	// the check too: the watches' catalog-wide checks query (hub.go) then
	// sees which service changed.
	digest, err := json.Marshal(asr)
	if err != nil {
		return nil, fmt.Errorf("consul: %w: encode %s: %v", driver.ErrInvalid, inst.ID, err)
	}
	f := fnv.New64a()
	f.Write(digest)
	check.Notes = fmt.Sprintf("%s %016x", checkOutput, f.Sum64())
	if len(inst.Endpoints) > 0 {
		check.Notes += notesEndpoints + backend.FormatEndpoints(inst.Endpoints)
	}
	asr.Check = check
	return asr, nil
}

// notesEndpoints starts the named endpoints in the check's notes. They
// are there, not in Meta, because Meta has no room: Roster's one pair
// holds up to 266 bytes of its 512, and 8 endpoints take up to 2.5 KB
// (names, protocols and host names of 253 bytes). Notes have no limit,
// and a Consul tool ignores them.
const notesEndpoints = " endpoints="

// taggedAddresses shows the named endpoints the Consul way, to the UI,
// the API and consul-template: one tagged address per name. Roster
// reads them from the check's notes, which also hold the order and the
// protocols. Names Consul gives a meaning of its own are left out of
// the tagged addresses: "lan" and "wan" would change the address Consul
// answers with across datacenters, "virtual" and "consul-…" are
// Connect's virtual IPs.
func taggedAddresses(eps []driver.Endpoint) map[string]api.ServiceAddress {
	var out map[string]api.ServiceAddress
	for _, e := range eps {
		if e.Name == "lan" || e.Name == "wan" || e.Name == "virtual" || strings.HasPrefix(e.Name, "consul-") {
			continue
		}
		host, portS, _ := net.SplitHostPort(e.Address)
		port, _ := strconv.Atoi(portS)
		if out == nil {
			out = make(map[string]api.ServiceAddress, len(eps))
		}
		out[e.Name] = api.ServiceAddress{Address: host, Port: port}
	}
	return out
}

// endpointsOf reads the named endpoints from the notes of the entry's
// Roster check; ok is false when the notes hold endpoints it cannot read.
func endpointsOf(e *api.ServiceEntry) ([]driver.Endpoint, bool) {
	id := checkID(e.Service.ID)
	for _, c := range e.Checks {
		if c.CheckID != id || c.ServiceID != e.Service.ID {
			continue
		}
		if _, text, found := strings.Cut(c.Notes, notesEndpoints); found {
			return backend.ParseEndpoints(text)
		}
	}
	return nil, true
}

// fromConsul reads one health entry back into an instance.
func fromConsul(e *api.ServiceEntry) driver.Instance {
	s := e.Service
	host := s.Address
	if host == "" && e.Node != nil {
		host = e.Node.Address // Consul's rule: no service address means the node's
	}
	in := driver.Instance{
		ID:      s.ID,
		Service: s.Service,
		Address: net.JoinHostPort(host, strconv.Itoa(s.Port)),
		Tags:    slices.Clone(s.Tags),
	}
	if len(in.Tags) == 0 {
		in.Tags = nil
	}
	md := map[string]string{}
	for k, v := range s.Meta {
		if !strings.HasPrefix(k, "roster_") { // ours, or a newer Roster's field: never user metadata
			md[k] = v
		}
	}
	if f, ok := s.Meta[metaFields]; ok {
		var fs fields
		fs, ok = decodeFields(f)
		in.Weight, in.Version, in.Zone, in.Region = fs.weight, fs.version, fs.zone, fs.region
		if !ok {
			// Not ours after all: a weight past backend.MaxWeight, so the
			// check of what is read back skips the record and reports it.
			in.Weight = math.MaxUint32
		}
	} else {
		// Registered by another tool: Meta.weight as the PHP article
		// writes it, DefaultWeight otherwise.
		in.Weight = backend.DefaultWeight
		if w, ok := s.Meta[metaForeignWeight]; ok {
			if n, err := strconv.ParseUint(strings.TrimSpace(w), 10, 32); err == nil {
				in.Weight = uint32(n)
			}
		}
	}
	if len(md) > 0 {
		in.Metadata = md
	}
	eps, ok := endpointsOf(e)
	if !ok {
		in.Weight = math.MaxUint32 // as for fields it cannot read: skipped and reported
	}
	in.Endpoints = eps
	return in
}

// standing is what decides between entries that claim one service ID
// (the same ID registered on two nodes). Live: the node is an agent's
// (its serfHealth check passes) and the service has a check of its own;
// a catalog registration of an invented node has neither. Own: Roster's
// check and fields.
func standing(e *api.ServiceEntry) backend.Standing {
	var st backend.Standing
	var serf, checked, ours bool
	for _, c := range e.Checks {
		switch {
		case c.CheckID == "serfHealth" && c.ServiceID == "":
			serf = c.Status == api.HealthPassing
		case c.ServiceID == e.Service.ID:
			checked = true
			ours = ours || c.CheckID == checkID(e.Service.ID)
		}
	}
	if serf && checked {
		st |= backend.Live
	}
	if _, ok := e.Service.Meta[metaFields]; ok && ours {
		st |= backend.Own
	}
	return st
}

// encodeFields packs Roster's own fields into one Meta value:
// "<weight>,<len(version)>,<version><zone>", and with a region
// "<weight>,<len(version)>:<len(region)>,<version><zone><region>". The
// length prefixes need no escaping, and the longest value (5 + 1 + 3 +
// 1 + 3 + 1 + 3 × 128 bytes) is well inside Consul's 512-byte limit on a
// Meta value. An instance without a region keeps the first form, which
// Roster releases before regions read; they skip an instance with one
// (its second field is no number) rather than read a wrong zone.
func encodeFields(in driver.Instance) string {
	lens := strconv.Itoa(len(in.Version))
	if in.Region != "" {
		lens += ":" + strconv.Itoa(len(in.Region))
	}
	return strconv.FormatUint(uint64(in.Weight), 10) + "," + lens + "," + in.Version + in.Zone + in.Region
}

// fields are Roster's own fields, as encodeFields packs them.
type fields struct {
	weight                uint32
	version, zone, region string
}

// decodeFields reverses encodeFields; ok is false for a value it did not
// write.
func decodeFields(s string) (f fields, ok bool) {
	w, rest, ok1 := strings.Cut(s, ",")
	n, rest, ok2 := strings.Cut(rest, ",")
	nv, nr, hasRegion := strings.Cut(n, ":")
	wn, err1 := strconv.ParseUint(w, 10, 32)
	vn, err2 := strconv.Atoi(nv)
	rn, err3 := 0, error(nil)
	if hasRegion {
		rn, err3 = strconv.Atoi(nr)
		if err3 == nil && (rn <= 0 || nr != strconv.Itoa(rn)) {
			err3 = strconv.ErrSyntax // one spelling per value: "01" or "+1" is not ours
		}
	}
	if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || vn < 0 || rn < 0 || vn+rn > len(rest) {
		return fields{}, false
	}
	return fields{weight: uint32(wn), version: rest[:vn], zone: rest[vn : len(rest)-rn], region: rest[len(rest)-rn:]}, true
}

// Register implements driver.Driver: an agent registration with
// ReplaceExistingChecks, so that a re-registration replaces the check
// rather than adding one. It is retried as the package doc describes.
func (d *Driver) Register(ctx context.Context, inst driver.Instance, ttl time.Duration) (driver.Registration, error) {
	reg := &registration{d: d, id: inst.ID, service: inst.Service, ttl: ttl}
	if err := reg.write(ctx, inst); err != nil {
		return nil, err
	}
	return reg, nil
}

type registration struct {
	d           *Driver
	id, service string
	ttl         time.Duration

	mu     sync.Mutex
	lastOK time.Time // start of the last call that reset the agent's TTL timer
}

func (r *registration) renewed(start time.Time) {
	r.mu.Lock()
	if start.After(r.lastOK) {
		r.lastOK = start
	}
	r.mu.Unlock()
}

// expired reports whether the agent's TTL timer has (or may have) fired
// since the last successful renewal: the check is then critical and the
// instance out of every ?passing result, though the agent still holds it
// until DeregisterCriticalServiceAfter.
func (r *registration) expired() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.lastOK) >= r.ttl
}

// write registers inst, with retries. With a TTL check, the check is
// created passing with a full TTL: a renewal.
func (r *registration) write(ctx context.Context, inst driver.Instance) error {
	asr, err := r.d.toConsul(inst, r.ttl)
	if err != nil {
		return err
	}
	return r.d.write(ctx, "register "+inst.ID, plainWrite, func(ctx context.Context) error {
		start := time.Now()
		opts := api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)
		if err := r.d.client.Agent().ServiceRegisterOpts(asr, opts); err != nil {
			return err
		}
		if r.d.o.Check == CheckTTL {
			r.renewed(start)
		}
		return nil
	})
}

// Heartbeat implements driver.Registration. With a TTL check it renews
// the check; with an HTTP check it confirms that the agent still holds
// the service. Either way ErrNotFound means the agent lost it.
func (r *registration) Heartbeat(ctx context.Context) error {
	op := "heartbeat " + r.id
	if r.d.o.Check == CheckHTTP {
		return r.d.write(ctx, op, renewal, func(ctx context.Context) error {
			// 404 when unknown; the api library maps it to an error.
			_, _, err := r.d.client.Agent().Service(r.id, (&api.QueryOptions{}).WithContext(ctx))
			return err
		})
	}
	return r.d.write(ctx, op, renewal, func(ctx context.Context) error {
		// Checked before every attempt, retries included.
		if r.expired() {
			// Renewing would quietly revive a check that went critical,
			// after watchers saw the instance leave. Report the expiry
			// instead: the lease registers again, writing the whole
			// definition afresh (the agent may hold an old one, restored
			// from its data dir).
			return fmt.Errorf("consul: %s: %w: TTL check expired (no renewal for %v)", op, driver.ErrNotFound, r.ttl)
		}
		start := time.Now()
		err := r.d.client.Agent().UpdateTTLOpts(checkID(r.id), checkOutput, api.HealthPassing, (&api.QueryOptions{}).WithContext(ctx))
		if err == nil {
			// Even when the caller has given up: the agent renewed.
			r.renewed(start)
		}
		return err
	})
}

// Update implements driver.Registration: the same registration, written
// again with the new fields (the TTL check is re-created passing).
func (r *registration) Update(ctx context.Context, inst driver.Instance) error {
	return r.write(ctx, inst)
}

// Deregister implements driver.Registration, by the unique ID only. It
// retries until it succeeds or ctx ends: a lost deregistration would leave
// the instance behind, critical, until DeregisterCriticalServiceAfter.
func (r *registration) Deregister(ctx context.Context) error {
	err := r.d.write(ctx, "deregister "+r.id, removal, func(ctx context.Context) error {
		return r.d.client.Agent().ServiceDeregisterOpts(r.id, (&api.QueryOptions{}).WithContext(ctx))
	})
	if r.d.ErrorKind(err) == driver.ErrNotFound {
		return nil // already gone: not an error
	}
	return err
}
