package backend

import (
	"strings"

	"github.com/roster-go/roster/registry/driver"
)

// FormatEndpoints is the compact text form of named endpoints, for
// backends that store fields as strings (Redis's keys layout, Consul's
// check notes): "grpc=10.0.0.1:9090/grpc,metrics=10.0.0.1:9100", in
// order, the protocol after a '/' when there is one. Names, canonical
// addresses and protocols never hold ',', '=' or '/', so nothing needs
// escaping. It returns "" for no endpoints.
func FormatEndpoints(eps []driver.Endpoint) string {
	var b strings.Builder
	for i, e := range eps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Name)
		b.WriteByte('=')
		b.WriteString(e.Address)
		if e.Protocol != "" {
			b.WriteByte('/')
			b.WriteString(e.Protocol)
		}
	}
	return b.String()
}

// ParseEndpoints reverses FormatEndpoints. It returns false for text it
// did not write (an entry without a name or an address); the registry
// validates what it returns like every other field read back.
func ParseEndpoints(s string) ([]driver.Endpoint, bool) {
	if s == "" {
		return nil, true
	}
	var eps []driver.Endpoint
	for entry := range strings.SplitSeq(s, ",") {
		name, rest, ok := strings.Cut(entry, "=")
		addr, proto, _ := strings.Cut(rest, "/")
		if !ok || name == "" || addr == "" {
			return nil, false
		}
		eps = append(eps, driver.Endpoint{Name: name, Address: addr, Protocol: proto})
	}
	return eps, true
}

// ValidateEndpointName checks an endpoint name given elsewhere than in
// an instance (the agent's pick, a read-only driver's options) as a
// registration's names are checked. The error names field.
func ValidateEndpointName(field, name string) error { return validateEndpointName(field, name) }
