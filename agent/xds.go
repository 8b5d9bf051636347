package agent

// xDS: the agent serves the services it follows over Envoy's aggregated
// discovery service (ADS), so that Envoy and proxyless gRPC (Go, Java,
// C++) discover Roster services without a Roster library. A resource
// name is a service, or "<service>:<endpoint>" for a named endpoint;
// the Listener, RouteConfiguration, Cluster and ClusterLoadAssignment
// of a name all carry that name. See docs/agent.md, section "xDS".

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/roster-go/roster/registry"
)

// xDS bounds. A stream names at most xdsMaxNames resources per request;
// a message is at most xdsMaxRecv bytes. Past them the stream is closed.
const (
	xdsMaxNames       = 256
	xdsMaxRecv        = 64 << 10
	xdsMaxConnStreams = 16
	// xdsRefresh is how often quarantines are looked at again: they move
	// with the calls reported, not with registry changes.
	xdsRefresh = time.Second
	// xdsFirstWait bounds the wait for a new service's first list.
	xdsFirstWait = 2 * time.Second
)

// xdsTypes are the resource types served; any other closes the stream.
var xdsTypes = []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType}

// xds is the agent's ADS server.
type xds struct {
	a       *Agent
	ln      net.Listener
	srv     *grpc.Server
	caches  map[string]*cache.LinearCache
	kick    chan struct{}
	done    chan struct{}
	streams atomic.Int64

	mu   sync.Mutex
	held map[int64]map[string]func() // stream → service → release of its view

	pushMu sync.Mutex        // one refresh at a time
	last   map[string]xdsSet // name → resources last pushed; guarded by pushMu
}

// xdsSet is the four resources of one name.
type xdsSet struct {
	lis *listener.Listener
	rc  *route.RouteConfiguration
	cl  *cluster.Cluster
	cla *endpoint.ClusterLoadAssignment
}

// listenXDS checks Config.XDS and listens on it.
func listenXDS(c Config) (net.Listener, error) {
	if path, ok := strings.CutPrefix(c.XDS, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("%w: agent: Config.XDS %q: no socket path", registry.ErrInvalid, c.XDS)
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if conn, err := net.Dial("unix", path); err == nil {
				conn.Close()
				return nil, fmt.Errorf("agent: Config.XDS %q: another process serves on it", c.XDS)
			}
			_ = os.Remove(path) // a socket left by an agent that died; never another file
		}
		return net.Listen("unix", path)
	}
	host, _, err := net.SplitHostPort(c.XDS)
	if err != nil {
		return nil, fmt.Errorf("%w: agent: Config.XDS %q: %v", registry.ErrInvalid, c.XDS, err)
	}
	ip := net.ParseIP(host)
	if !c.XDSAllowRemote && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: agent: Config.XDS %q: not a loopback address or unix:/path (set Config.XDSAllowRemote to serve other hosts)", registry.ErrInvalid, c.XDS)
	}
	return net.Listen("tcp", c.XDS)
}

// startXDS serves ADS on ln until stop.
func (a *Agent) startXDS(ln net.Listener) *xds {
	x := &xds{a: a, ln: ln, caches: map[string]*cache.LinearCache{}, kick: make(chan struct{}, 1), done: make(chan struct{}),
		held: map[int64]map[string]func(){}, last: map[string]xdsSet{}}
	caches := map[string]cache.Cache{}
	for _, t := range xdsTypes {
		lc := cache.NewLinearCache(t)
		x.caches[t], caches[t] = lc, lc
	}
	mux := &cache.MuxCache{
		Classify:      func(r *cache.Request) string { return r.GetTypeUrl() },
		ClassifyDelta: func(r *cache.DeltaRequest) string { return r.GetTypeUrl() },
		Caches:        caches,
	}
	cb := xdsserver.CallbackFuncs{
		StreamOpenFunc:        x.open,
		StreamClosedFunc:      func(id int64, _ *core.Node) { x.close(id) },
		DeltaStreamOpenFunc:   x.open,
		DeltaStreamClosedFunc: func(id int64, _ *core.Node) { x.close(id) },
		StreamRequestFunc: func(id int64, r *discovery.DiscoveryRequest) error {
			return x.request(id, r.GetTypeUrl(), r.GetResourceNames())
		},
		StreamDeltaRequestFunc: func(id int64, r *discovery.DeltaDiscoveryRequest) error {
			return x.request(id, r.GetTypeUrl(), r.GetResourceNamesSubscribe())
		},
		FetchRequestFunc: func(context.Context, *discovery.DiscoveryRequest) error {
			return status.Error(codes.Unimplemented, "agent: xDS: only streams are served")
		},
	}
	x.srv = grpc.NewServer(
		grpc.MaxRecvMsgSize(xdsMaxRecv),
		grpc.MaxConcurrentStreams(xdsMaxConnStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	discovery.RegisterAggregatedDiscoveryServiceServer(x.srv, xdsserver.NewServer(a.ctx, mux, cb))
	go func() { _ = x.srv.Serve(ln) }()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); x.follow(a.ctx) }()
	return x
}

// stop ends every stream and releases the views they held.
func (x *xds) stop() {
	x.srv.Stop()
	x.mu.Lock()
	defer x.mu.Unlock()
	for id, svcs := range x.held {
		for _, release := range svcs {
			release()
		}
		delete(x.held, id)
	}
}

func (x *xds) open(context.Context, int64, string) error {
	if n := x.streams.Add(1); n > int64(x.a.cfg.XDSMaxStreams) {
		x.streams.Add(-1)
		return status.Errorf(codes.ResourceExhausted, "agent: xDS: %d streams open already (Config.XDSMaxStreams)", n-1)
	}
	return nil
}

func (x *xds) close(id int64) {
	x.streams.Add(-1)
	x.mu.Lock()
	svcs := x.held[id]
	delete(x.held, id)
	x.mu.Unlock()
	for _, release := range svcs {
		release()
	}
	x.poke()
}

// request checks a request and follows the services it names.
func (x *xds) request(id int64, typeURL string, names []string) error {
	known := false
	for _, t := range xdsTypes {
		known = known || t == typeURL
	}
	if !known {
		return status.Errorf(codes.InvalidArgument, "agent: xDS: type %q is not served", typeURL)
	}
	if len(names) > xdsMaxNames {
		return status.Errorf(codes.InvalidArgument, "agent: xDS: %d resource names, at most %d allowed", len(names), xdsMaxNames)
	}
	added := false
	for _, n := range names {
		svc, _, ok := parseXDSName(n)
		if !ok {
			continue // never answered: the client reports the resource missing
		}
		x.mu.Lock()
		svcs := x.held[id]
		if svcs == nil {
			svcs = map[string]func(){}
			x.held[id] = svcs
		}
		_, have := svcs[svc]
		x.mu.Unlock()
		if have {
			continue
		}
		v, release, err := x.a.holdView(svc)
		if err != nil {
			continue // MaxServices reached, or closing: the name stays unanswered
		}
		// Wait (bounded) for the registry's first list, so that the
		// first answer has the resource: state of the world reads a
		// listener or cluster missing from an answer as deleted.
		ctx, cancel := context.WithTimeout(x.a.ctx, xdsFirstWait)
		_, _ = v.wait(ctx, 0)
		cancel()
		x.mu.Lock()
		if _, open := x.held[id]; open && x.held[id][svc] == nil {
			x.held[id][svc] = release
			release = nil
		}
		x.mu.Unlock()
		if release != nil {
			release() // the stream closed meanwhile, or another request won
		}
		added = true
	}
	if added {
		x.refresh() // before the server looks at the caches for this request
	}
	return nil
}

// parseXDSName splits "<service>" or "<service>:<endpoint>". A name from
// an xds:/// target may come with a leading slash.
func parseXDSName(n string) (svc, ep string, ok bool) {
	n = strings.TrimPrefix(n, "/")
	svc, ep, _ = strings.Cut(n, ":")
	if svc == "" || strings.ContainsAny(ep, ":/") { // the registry checks the service name
		return "", "", false
	}
	return svc, ep, true
}

func (x *xds) poke() {
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// follow pushes the resources on every change of a followed service,
// on each new name asked for, and every xdsRefresh for quarantines.
func (x *xds) follow(ctx context.Context) {
	defer close(x.done)
	tick := time.NewTicker(xdsRefresh)
	defer tick.Stop()
	for {
		ch := x.a.events.wait()
		x.refresh()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-x.kick:
		case <-tick.C:
		}
	}
}

// names returns the resource names the open streams asked for.
func (x *xds) names() map[string]bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[string]bool{}
	for _, svcs := range x.held {
		for svc := range svcs {
			out[svc] = true
		}
	}
	return out
}

// refresh builds the resources of every name asked for and pushes those
// that changed; it deletes those of services no stream asks for.
func (x *xds) refresh() {
	x.pushMu.Lock()
	defer x.pushMu.Unlock()
	svcs := x.names()
	want := map[string]xdsSet{}
	for svc := range svcs {
		x.a.mu.Lock()
		v := x.a.views[svc]
		x.a.mu.Unlock()
		if v == nil {
			continue
		}
		cur, _ := v.current()
		if cur.Index == 0 {
			continue // no answer from the registry yet: the client waits
		}
		ejected := x.a.quarantined(svc)
		for _, ep := range endpointNames(cur.Instances) {
			name := svc
			if ep != "" {
				name += ":" + ep
			}
			want[name] = buildXDS(name, svc, ep, cur.Instances, ejected)
		}
	}
	upd := map[string]map[string]types.Resource{}
	del := map[string][]string{}
	for _, t := range xdsTypes {
		upd[t] = map[string]types.Resource{}
	}
	for name, s := range want {
		old, ok := x.last[name]
		if !ok || !proto.Equal(old.lis, s.lis) {
			upd[resource.ListenerType][name] = s.lis
		}
		if !ok || !proto.Equal(old.rc, s.rc) {
			upd[resource.RouteType][name] = s.rc
		}
		if !ok || !proto.Equal(old.cl, s.cl) {
			upd[resource.ClusterType][name] = s.cl
		}
		if !ok || !proto.Equal(old.cla, s.cla) {
			upd[resource.EndpointType][name] = s.cla
		}
		x.last[name] = s
	}
	for name := range x.last {
		if _, ok := want[name]; !ok {
			for _, t := range xdsTypes {
				del[t] = append(del[t], name)
			}
			delete(x.last, name)
		}
	}
	// Endpoints first, listeners last: a client that follows a new
	// listener finds its route, cluster and endpoints ready.
	for _, t := range []string{resource.EndpointType, resource.ClusterType, resource.RouteType, resource.ListenerType} {
		if len(upd[t]) > 0 || len(del[t]) > 0 {
			_ = x.caches[t].UpdateResources(upd[t], del[t])
		}
	}
}

// endpointNames returns "" (the primary address) and the endpoint names
// the instances announce.
func endpointNames(ins []registry.Instance) []string {
	out := []string{""}
	seen := map[string]bool{"": true}
	for _, in := range ins {
		for _, e := range in.Endpoints {
			if !seen[e.Name] {
				seen[e.Name] = true
				out = append(out, e.Name)
			}
		}
	}
	return out
}

// buildXDS returns the resources of name, endpoint ep of service svc.
// Each instance is a locality of its own (sub-zone: its ID) weighted by
// its Weight: gRPC's default policy weighs localities and rounds robin
// inside each, so one instance per locality honours instance weights.
func buildXDS(name, svc, ep string, ins []registry.Instance, ejected map[string]bool) xdsSet {
	router, _ := anypb.New(&router.Router{})
	mgr, _ := anypb.New(&hcm.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource:    &core.ConfigSource{ResourceApiVersion: core.ApiVersion_V3, ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}},
			RouteConfigName: name,
		}},
		HttpFilters: []*hcm.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: router}}},
	})
	s := xdsSet{
		lis: &listener.Listener{Name: name, ApiListener: &listener.ApiListener{ApiListener: mgr}},
		rc: &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{{
			Name: name, Domains: []string{"*"},
			Routes: []*route.Route{{
				Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: ""}},
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: name}}},
			}},
		}}},
		cl: &cluster.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
			EdsClusterConfig: &cluster.Cluster_EdsClusterConfig{
				EdsConfig:   &core.ConfigSource{ResourceApiVersion: core.ApiVersion_V3, ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}},
				ServiceName: name,
			},
			LbPolicy: cluster.Cluster_ROUND_ROBIN,
		},
		cla: &endpoint.ClusterLoadAssignment{ClusterName: name},
	}
	for _, in := range ins {
		e, ok := in.Endpoint(ep)
		if !ok {
			continue
		}
		host, port, ok := splitAddr(e.Address)
		if !ok {
			continue
		}
		health := core.HealthStatus_HEALTHY
		switch {
		case ejected[in.ID]:
			health = core.HealthStatus_UNHEALTHY
		case in.Weight == 0:
			health = core.HealthStatus_DRAINING
		}
		w := max(in.Weight, 1) // xDS weights are at least 1; a drained one gets no traffic anyway
		s.cla.Endpoints = append(s.cla.Endpoints, &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: in.Region, Zone: in.Zone, SubZone: in.ID},
			LoadBalancingWeight: wrapperspb.UInt32(w),
			LbEndpoints: []*endpoint.LbEndpoint{{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: &core.Address{
					Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}}},
				HealthStatus:        health,
				LoadBalancingWeight: wrapperspb.UInt32(w),
			}},
		})
	}
	return s
}

// splitAddr splits host:port with a numeric port.
func splitAddr(addr string) (string, uint32, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	var port uint32
	if _, err := fmt.Sscan(p, &port); err != nil || port == 0 || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}

// XDSAddr returns the address the xDS server listens on, nil when
// Config.XDS is empty.
func (a *Agent) XDSAddr() net.Addr {
	if a.xds == nil {
		return nil
	}
	return a.xds.ln.Addr()
}
