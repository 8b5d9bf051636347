package dnssrv

import "github.com/roster-go/roster/registry/driver"

// ParseURL is parseURL, for the URL tests.
var ParseURL = parseURL

// NameOf is the SRV name d asks for service.
func NameOf(d driver.Driver, service string) string { return d.(*srvDriver).nameOf(service) }

// EndpointNameOf is the SRV name d asks for an endpoint of service.
func EndpointNameOf(d driver.Driver, service, endpoint string) string {
	return d.(*srvDriver).endpointNameOf(service, endpoint)
}
