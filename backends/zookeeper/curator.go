package zookeeper

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/roster-go/roster/internal/backend"
	"github.com/roster-go/roster/registry/driver"
)

// Layouts of the instance znodes' data. The paths are the same in both:
// <root>/<service>/<instance-id>, as Curator's <basePath>/<name>/<id>.
const (
	LayoutRoster  = "roster"  // Roster's JSON (the default)
	LayoutCurator = "curator" // Apache Curator service discovery's ServiceInstance
)

// Payload classes a Curator record names, for readers that deserialize
// the payload with Jackson's class ids: Spring Cloud Zookeeper's
// instance, or a plain map for Curator programs that use Map.class.
const (
	PayloadSpring = "spring"
	PayloadMap    = "map"
)

const (
	springInstanceClass = "org.springframework.cloud.zookeeper.discovery.ZookeeperInstance"
	mapClass            = "java.util.HashMap"
)

// curFields is the payload metadata key that carries Roster's own fields
// (version, zone, weight, tags, endpoints…), which a Curator record has no
// place for, as the JSON of the instance without what Curator holds.
const curFields = "roster.instance"

// curatorInstance is Curator's ServiceInstance as its
// JsonInstanceSerializer writes it (Curator 5.4, curator-x-discovery).
type curatorInstance struct {
	Name                string          `json:"name"`
	ID                  string          `json:"id"`
	Address             string          `json:"address"`
	Port                *int            `json:"port"`
	SSLPort             *int            `json:"sslPort"`
	Payload             json.RawMessage `json:"payload"`
	RegistrationTimeUTC int64           `json:"registrationTimeUTC"`
	ServiceType         string          `json:"serviceType"`
	URISpec             json.RawMessage `json:"uriSpec"`
	Enabled             *bool           `json:"enabled,omitempty"`
}

// curatorPayload is the part of a payload Roster reads and writes: Spring
// Cloud Zookeeper's ZookeeperInstance (id, name, metadata) or a map with
// the same keys.
type curatorPayload struct {
	Class    string            `json:"@class"`
	ID       string            `json:"id,omitempty"`
	Name     string            `json:"name,omitempty"`
	Metadata map[string]string `json:"metadata"`
}

// encodeCurator writes in as a Curator ServiceInstance whose payload is
// of the given class.
func encodeCurator(in driver.Instance, payload string) ([]byte, error) {
	host, portStr, err := net.SplitHostPort(in.Address)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: encode %s: %w: address %q: %v", in.ID, driver.ErrInvalid, in.Address, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: encode %s: %w: port %q", in.ID, driver.ErrInvalid, portStr)
	}
	md := make(map[string]string, len(in.Metadata)+1)
	for k, v := range in.Metadata {
		md[k] = v
	}
	rest := in.Clone()
	rest.Service, rest.ID, rest.Address, rest.Metadata = "", "", "", nil
	fields, err := json.Marshal(rest)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: encode %s: %w: %v", in.ID, driver.ErrInvalid, err)
	}
	md[curFields] = string(fields)
	p := curatorPayload{Class: mapClass, Metadata: md}
	if payload != PayloadMap {
		p = curatorPayload{Class: springInstanceClass, ID: in.ID, Name: in.Service, Metadata: md}
	}
	pb, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: encode %s: %w: %v", in.ID, driver.ErrInvalid, err)
	}
	ci := curatorInstance{
		Name: in.Service, ID: in.ID, Address: host, Port: &port, Payload: pb,
		RegistrationTimeUTC: time.Now().UnixMilli(), ServiceType: "DYNAMIC", URISpec: json.RawMessage("null"),
	}
	return json.Marshal(ci)
}

// decodeCurator reads a Curator ServiceInstance. Records Roster cannot
// serve (no address or port, disabled, an ID other than the znode's) are
// skipped, as DecodeStored skips what it cannot read.
func decodeCurator(service, id string, val []byte) (driver.Instance, bool) {
	var ci curatorInstance
	if json.Unmarshal(val, &ci) != nil || ci.Address == "" || ci.ID != id {
		return driver.Instance{}, false
	}
	if ci.Enabled != nil && !*ci.Enabled {
		return driver.Instance{}, false // Curator's providers leave it out too
	}
	port := ci.Port
	if port == nil {
		port = ci.SSLPort
	}
	if port == nil || *port <= 0 || *port > 65535 {
		return driver.Instance{}, false
	}
	in := driver.Instance{Service: service, ID: id, Address: net.JoinHostPort(ci.Address, strconv.Itoa(*port)), Weight: backend.DefaultWeight}
	var p curatorPayload
	if len(ci.Payload) > 0 && json.Unmarshal(ci.Payload, &p) == nil {
		in.Metadata = fromCuratorMetadata(&in, p.Metadata)
	}
	return in, true // Registry checks every field of what it reads
}

// fromCuratorMetadata reads Roster's own fields into in and returns the
// rest of the metadata. A record Curator or Spring wrote has none.
func fromCuratorMetadata(in *driver.Instance, md map[string]string) map[string]string {
	if f, ok := md[curFields]; ok {
		var rest driver.Instance
		if json.Unmarshal([]byte(f), &rest) == nil {
			rest.Service, rest.ID, rest.Address = in.Service, in.ID, in.Address
			*in = rest
		}
	}
	var out map[string]string
	for k, v := range md {
		if k == curFields {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// encode writes in in the driver's layout.
func (d *Driver) encode(in driver.Instance) ([]byte, error) {
	if d.opts.Layout == LayoutCurator {
		return encodeCurator(in, d.opts.CuratorPayload)
	}
	return encode(in)
}

// decode reads a znode's data in the driver's layout.
func (d *Driver) decode(service, id string, val []byte) (driver.Instance, bool) {
	if d.opts.Layout == LayoutCurator {
		return decodeCurator(service, id, val)
	}
	return backend.DecodeStored(service, id, val)
}

// defaultCuratorRoot is Curator's usual base path: Spring Cloud
// Zookeeper's default root, and Dubbo 3's for application discovery.
const defaultCuratorRoot = "/services"

// checkLayout validates the layout options and fills in their defaults.
func checkLayout(o *Options) error {
	switch o.Layout {
	case "", LayoutRoster:
		o.Layout = LayoutRoster
		if o.CuratorPayload != "" {
			return backend.Invalid("payload", "%q applies to layout=curator only", o.CuratorPayload)
		}
		if o.Root == "" {
			o.Root = defaultRoot
		}
	case LayoutCurator:
		switch o.CuratorPayload {
		case "":
			o.CuratorPayload = PayloadSpring
		case PayloadSpring, PayloadMap:
		default:
			return backend.Invalid("payload", "%q: want %s or %s", o.CuratorPayload, PayloadSpring, PayloadMap)
		}
		if o.Root == "" {
			o.Root = defaultCuratorRoot
		}
	default:
		return backend.Invalid("layout", "%q: want %s or %s", o.Layout, LayoutRoster, LayoutCurator)
	}
	return nil
}
