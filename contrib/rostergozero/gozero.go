// Package rostergozero lets go-zero's zrpc clients call services found in
// a Roster registry. A zrpc client config names a Roster target, and
// ClientOptions supplies the resolver and balancer for it:
//
//	reg, err := registry.Open(ctx, "etcd://10.0.0.1:2379")
//	cli, err := zrpc.NewClient(zrpc.RpcClientConf{Target: "roster:///user-svc"},
//		rostergozero.ClientOptions(reg)...)
//
// The calls then go through Roster's balancer, as rostergrpc's do: its
// strategies, quarantine and retries on another instance, in place of
// go-zero's p2c. zrpc's interceptors (breaker, timeouts, tracing) stay.
package rostergozero

import (
	"github.com/zeromicro/go-zero/zrpc"

	"github.com/roster-go/roster/contrib/rostergrpc"
	"github.com/roster-go/roster/registry"
)

// ClientOptions returns the zrpc options that resolve roster:///service
// targets from reg, with rostergrpc's options applied. They come after
// zrpc's own, so Roster's balancer replaces go-zero's default p2c.
func ClientOptions(reg *registry.Registry, opts ...rostergrpc.Option) []zrpc.ClientOption {
	dial := rostergrpc.DialOptions(reg, opts...)
	out := make([]zrpc.ClientOption, 0, len(dial))
	for _, d := range dial {
		out = append(out, zrpc.WithDialOption(d))
	}
	return out
}

// Target is the zrpc Target of a service: "roster:///" + service.
func Target(service string) string { return rostergrpc.Target(service) }
