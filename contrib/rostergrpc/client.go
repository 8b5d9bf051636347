package rostergrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/roster-go/roster/internal/mwhook"
	"github.com/roster-go/roster/middleware"
	"github.com/roster-go/roster/policy"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/selector"
)

// defaultClassify classifies gRPC status codes:
//   - OK → Success;
//   - the caller's context done, or Canceled → Abort;
//   - Unavailable → Retryable (the instance is down, restarting or
//     overloaded; another may serve);
//   - Internal, Unknown, DataLoss → Fatal (counted, not retried);
//   - any other code → Business: the instance answered, the answer is an
//     application error (NotFound, InvalidArgument, …), which says nothing
//     about its health. DeadlineExceeded is the caller's budget.
func defaultClassify(ctx context.Context, err error) middleware.Class {
	if err == nil {
		return middleware.Success
	}
	if ctx.Err() != nil {
		return middleware.Abort
	}
	switch status.Code(err) {
	case codes.OK:
		return middleware.Success
	case codes.Canceled, codes.DeadlineExceeded:
		return middleware.Abort
	case codes.Unavailable:
		return middleware.Retryable
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return middleware.Fatal
	}
	return middleware.Business
}

// Option configures DialOptions.
type Option func(*dialConfig)

type dialConfig struct {
	strategy    selector.Strategy
	retries     int
	retryCodes  []string
	quarantine  *middleware.Quarantine
	classify    middleware.Classifier
	serviceConf string
	endpoint    string
	selOpts     []selector.Option
	throttle    middleware.ThrottleConfig
	idempotent  []string
	policies    map[string]policy.Policy
	noStored    bool
}

// WithSelector adds options to the selector of each service's balancer:
// selector.WithLocality for a zone preference that follows health,
// selector.WithSplit for a canary, selector.WithFilters, and the
// strategy's own tuning. WithStrategy, or a strategy in the service
// config, wins over a selector.WithStrategy here. NewClient fails on an
// invalid option; with DialOptions, the RPCs fail, saying why.
//
// With selector.WithLocality, an instance counts as unusable in its tier
// while its connection is not READY, while the quarantine holds it out,
// and while it drains.
func WithSelector(opts ...selector.Option) Option {
	return func(c *dialConfig) { c.selOpts = append(c.selOpts, opts...) }
}

// WithThrottle tunes the adaptive throttling of unary RPCs, per service
// (default middleware.ThrottleConfig{}, as in middleware.Client's
// default chain): once a service refuses most calls, a share of them is
// rejected at once with Unavailable, an error matching
// middleware.ErrThrottled, and a trickle still goes through to notice
// when it is back. It counts RPCs, not attempts: one that a retry saved
// is accepted, and one that failed on an instance the quarantine now
// holds out is not counted, so a failing zone does not throttle the RPCs
// that go to a healthy one. A MinRequests of math.MaxInt turns it off.
func WithThrottle(cfg middleware.ThrottleConfig) Option {
	return func(c *dialConfig) { c.throttle = cfg }
}

// healthMethods are the methods of the standard health service, which
// are idempotent.
const healthMethods = "/grpc.health.v1.Health/"

// WithIdempotent names the methods that are safe to send again: full
// names ("/pkg.Service/Method"), or a service's prefix ending in a slash
// ("/pkg.Service/"). The health service, grpc.health.v1.Health, is
// idempotent by default. gRPC never retries an RPC once it has received
// response headers (it is committed); a unary RPC to an idempotent
// method that then fails with a Retryable status is sent again, to an
// instance it has not tried, within the attempts of WithRetry.
func WithIdempotent(methods ...string) Option {
	return func(c *dialConfig) { c.idempotent = append(c.idempotent, methods...) }
}

// defaultEndpoint is the endpoint name a channel connects to by default.
const defaultEndpoint = "grpc"

// WithEndpoint sets the endpoint of each instance that the channel
// connects to (default "grpc"; "" is the primary Address). The rule of
// registry.Instance.Endpoint picks it: an instance that announces no
// endpoints serves every name on its Address, and one whose primary is
// another named endpoint ("http" only) is left out.
func WithEndpoint(name string) Option { return func(c *dialConfig) { c.endpoint = name } }

// WithStrategy sets the selector strategy (default selector.DefaultStrategy,
// p2c_ewma). For ConsistentHash and Maglev, give each RPC a key with
// WithKey.
func WithStrategy(s selector.Strategy) Option { return func(c *dialConfig) { c.strategy = s } }

// WithRetry sets the gRPC retry policy's maximum attempts (first one
// included; default 3, gRPC caps it at 5) for the status codes given
// (default UNAVAILABLE). Each retry avoids the instances this RPC already
// tried while others are left. 1 disables retries. The retries are
// throttled as gRPC's retryThrottling does (100 tokens, ratio 0.2): once
// failures pass about a fifth of the successes, an RPC gets one attempt.
func WithRetry(maxAttempts int, retryOn ...codes.Code) Option {
	return func(c *dialConfig) {
		c.retries = maxAttempts
		c.retryCodes = nil
		for _, code := range retryOn {
			c.retryCodes = append(c.retryCodes, codeName(code))
		}
	}
}

// WithQuarantine sets the quarantine the balancer consults and feeds (the
// default is a new middleware.Quarantine with default settings per
// channel). Share one with a middleware.Client to share the evidence.
func WithQuarantine(q *middleware.Quarantine) Option { return func(c *dialConfig) { c.quarantine = q } }

// WithClassifier replaces the default classification of status codes:
// OK is Success, the caller's context done or Canceled is Abort,
// Unavailable is Retryable, Internal, Unknown and DataLoss are Fatal, and
// any other code is Business (the instance answered).
func WithClassifier(f middleware.Classifier) Option { return func(c *dialConfig) { c.classify = f } }

// WithServiceConfig replaces the generated default service config (JSON)
// entirely: use it to add per-method timeouts, keeping a
// loadBalancingConfig that names "roster".
func WithServiceConfig(js string) Option { return func(c *dialConfig) { c.serviceConf = js } }

// Retry throttling (gRFC A6) of the default service config. Every failed
// attempt takes a token and every successful RPC gives tokenRatio back;
// gRPC retries only while more than half of maxTokens are left. A ratio
// of 0.2 keeps retries going while failures stay under a fifth of the
// successes, the share middleware.Retry's budget allows (20%, Envoy's);
// past it an outage gets one attempt per call, not maxAttempts. 100
// tokens let 50 failures in a row be retried first, so a short blip on a
// quiet channel is still hidden.
const (
	retryMaxTokens  = 100
	retryTokenRatio = 0.2
)

// serviceConfig returns the default service config DialOptions installs:
// the roster balancer with the strategy, and a retry policy for every
// method, bounded by retry throttling, when maxAttempts > 1.
func serviceConfig(strategy selector.Strategy, maxAttempts int, retryCodes ...string) string {
	lb := map[string]any{}
	if strategy != "" {
		lb["strategy"] = string(strategy)
	}
	sc := map[string]any{"loadBalancingConfig": []any{map[string]any{balancerName: lb}}}
	if maxAttempts > 1 {
		if len(retryCodes) == 0 {
			retryCodes = []string{"UNAVAILABLE"}
		}
		sc["methodConfig"] = []any{map[string]any{
			"name": []any{map[string]any{}},
			"retryPolicy": map[string]any{
				"maxAttempts":          min(maxAttempts, 5),
				"initialBackoff":       "0.01s",
				"maxBackoff":           "0.1s",
				"backoffMultiplier":    2.0,
				"retryableStatusCodes": retryCodes,
			},
		}}
		sc["retryThrottling"] = map[string]any{"maxTokens": retryMaxTokens, "tokenRatio": retryTokenRatio}
	}
	js, _ := json.Marshal(sc)
	return string(js)
}

func codeName(c codes.Code) string {
	// The service config uses the canonical upper-case names.
	names := map[codes.Code]string{
		codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
		codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
		codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
	}
	if n, ok := names[c]; ok {
		return n
	}
	return fmt.Sprintf("%d", c)
}

// DialOptions returns the options that route a grpc.ClientConn for
// Target(service) through Roster: the resolver over reg, a default service
// config selecting the roster balancer (strategy, retry policy), and
// interceptors that let each retry avoid the instances its RPC already
// tried. Options given to grpc.NewClient after these win.
func DialOptions(reg *registry.Registry, opts ...Option) []grpc.DialOption {
	c := newDialConfig(opts)
	return dialOptions(reg, c, newPolicies(reg, c.policies, c.noStored))
}

func dialOptions(reg *registry.Registry, c dialConfig, ps *policies) []grpc.DialOption {
	js := c.serviceConf
	if js == "" {
		js = serviceConfig(c.strategy, c.retries, c.retryCodes...)
	}
	set := newSettings(c.quarantine, c.classify, c.selOpts)
	set.policies = ps
	st := &starts{}
	k := &calls{set: set, throttle: mwhook.NewThrottle(c.throttle), attempts: min(c.retries, 5),
		idempotent: append([]string{healthMethods}, c.idempotent...)}
	return []grpc.DialOption{
		grpc.WithResolvers(&settingsResolver{b: newResolverBuilder(reg, c.endpoint), set: set, starts: st}),
		grpc.WithDefaultServiceConfig(js),
		grpc.WithChainUnaryInterceptor(st.unary, k.unary),
		grpc.WithChainStreamInterceptor(st.stream, streamTried),
	}
}

func newDialConfig(opts []Option) dialConfig {
	c := dialConfig{retries: 3, endpoint: defaultEndpoint}
	for _, o := range opts {
		o(&c)
	}
	if c.classify == nil {
		c.classify = defaultClassify
	}
	if c.quarantine == nil {
		c.quarantine = middleware.NewQuarantine(middleware.QuarantineConfig{})
	}
	return c
}

// NewClient is grpc.NewClient(Target(service), DialOptions(reg, opts...)...,
// extra...). Transport credentials are not chosen for you: pass
// grpc.WithTransportCredentials in extra. It fails on invalid selector
// options (WithSelector), with an error wrapping registry.ErrInvalid.
func NewClient(reg *registry.Registry, service string, opts []Option, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	c := newDialConfig(opts)
	if len(c.selOpts) > 0 {
		if _, err := selector.New(c.selOpts...); err != nil {
			return nil, fmt.Errorf("rostergrpc: WithSelector: %w", err)
		}
	}
	for name, p := range c.policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("rostergrpc: WithPolicy(%q): %w", name, err)
		}
	}
	ps := newPolicies(reg, c.policies, c.noStored)
	ps.readStored(service)
	// The policy's retry attempts go into the channel's service config,
	// read once: gRPC retries per channel.
	if p, ok := ps.of(service); ok && p.Retry != nil && p.Retry.Attempts > 0 {
		c.retries = p.Retry.Attempts
	}
	return grpc.NewClient(Target(service), append(dialOptions(reg, c, ps), extra...)...)
}

// settingsResolver hands the dial's settings to the balancer through the
// resolver state (a balancer is built by name, with no dial options).
type settingsResolver struct {
	b      resolver.Builder
	set    *settings
	starts *starts
}

func (s *settingsResolver) Scheme() string { return s.b.Scheme() }

func (s *settingsResolver) Build(t resolver.Target, cc resolver.ClientConn, o resolver.BuildOptions) (resolver.Resolver, error) {
	r, err := s.b.Build(t, &settingsCC{ClientConn: cc, set: s.set}, o)
	if err != nil {
		return nil, err
	}
	return s.starts.track(t.String(), r), nil
}

type settingsCC struct {
	resolver.ClientConn
	set *settings
}

func (c *settingsCC) UpdateState(st resolver.State) error {
	st.Attributes = st.Attributes.WithValue(settingsKey{}, c.set)
	return c.ClientConn.UpdateState(st)
}

type keyCtx struct{}

// WithKey returns a context whose RPCs carry an affinity key for the
// ConsistentHash and Maglev strategies: RPCs with equal keys go to the
// same instance while the set of instances is stable.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// The outgoing metadata keys that route one RPC (see the package doc).
const (
	metadataVersion = "x-roster-version"
	metadataZone    = "x-roster-zone"
	metadataHashKey = "x-roster-hash-key"
)

// keyFrom returns the RPC's affinity key: WithKey's, else the
// x-roster-hash-key metadata.
func keyFrom(ctx context.Context) string {
	if k, ok := ctx.Value(keyCtx{}).(string); ok {
		return k
	}
	return firstValue(ctx, metadataHashKey)
}

// routeFrom returns the Route of the RPC's x-roster-version and
// x-roster-zone metadata; a selector.WithRoute in the context applies
// when they are absent.
func routeFrom(ctx context.Context) selector.Route {
	return selector.Route{Version: firstValue(ctx, metadataVersion), Zone: firstValue(ctx, metadataZone)}
}

func firstValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromOutgoingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// tried is the set of instances the attempts of one RPC failed on; the
// interceptors put one in the RPC's context, the picker reads and fills
// it (gRPC finishes an attempt before it picks for the next one). It
// counts the attempts, and whether the quarantine holds the instance of
// the last one out.
type tried struct {
	mu       sync.Mutex
	ids      []string
	attempts int
	out      bool

	// The attempt in flight and its Done, bound once per RPC so that a
	// pick returns it without allocating.
	busy   bool
	cur    attempt
	doneFn func(balancer.DoneInfo)
}

func newTried() *tried {
	t := &tried{}
	t.doneFn = t.finish
	return t
}

// begin makes a the attempt in flight; false when one already is (a
// hedging policy of the user's service config runs attempts at once).
func (t *tried) begin(a attempt) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy {
		return false
	}
	t.busy, t.cur = true, a
	return true
}

// finish is the Done of the attempt begin recorded.
func (t *tried) finish(di balancer.DoneInfo) {
	t.mu.Lock()
	a := t.cur
	t.busy, t.cur = false, attempt{}
	t.mu.Unlock()
	a.finish(t, di)
}

type triedCtx struct{}

func triedFrom(ctx context.Context) *tried {
	t, _ := ctx.Value(triedCtx{}).(*tried)
	return t
}

func (t *tried) has(id string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, x := range t.ids {
		if x == id {
			return true
		}
	}
	return false
}

// attempted records an attempt on the instance id: whether it failed,
// and whether the quarantine now holds the instance out.
func (t *tried) attempted(id string, failed, out bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.attempts++
	t.out = failed && out
	if failed {
		t.ids = append(t.ids, id)
	}
	t.mu.Unlock()
}

// last returns the attempts made, and whether the last one failed on an
// instance the quarantine holds out (its failure is contained).
func (t *tried) last() (attempts int, contained bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.attempts, t.out
}

// calls is the unary interceptor of a dial: the throttle around whole
// RPCs, the tried set of their attempts, and the re-send of idempotent
// RPCs that gRPC will not retry.
type calls struct {
	set        *settings
	throttle   any // a middleware throttle, through mwhook
	attempts   int // WithRetry's, at most 5
	idempotent []string
}

// throttledError is a call the throttle rejected: Unavailable to gRPC,
// and matching middleware.ErrThrottled.
type throttledError struct{ err error }

func (e *throttledError) Error() string { return "rostergrpc: " + e.err.Error() }
func (e *throttledError) Unwrap() error { return e.err }
func (e *throttledError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

func (k *calls) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	service := serviceOf(cc)
	start := time.Now()
	if err := mwhook.Throttle(k.throttle, service, start); err != nil {
		return &throttledError{err}
	}
	tr := newTried()
	tctx := context.WithValue(ctx, triedCtx{}, tr)
	resend := k.attempts > 1 && k.isIdempotent(method)
	var header metadata.MD
	if resend {
		opts = append(opts[:len(opts):len(opts)], grpc.Header(&header))
	}
	err := invoker(tctx, method, req, reply, cc, opts...)
	// Headers came back: gRPC committed the RPC and did not retry it.
	for resend && err != nil && header != nil && ctx.Err() == nil {
		if n, _ := tr.last(); n >= k.attempts || k.set.classify(ctx, err) != middleware.Retryable {
			break
		}
		header = nil
		err = invoker(tctx, method, req, reply, cc, opts...)
	}
	if _, contained := tr.last(); !contained {
		mwhook.Throttled(k.throttle, service, start, int(k.set.classify(ctx, err)), errors.Is(ctx.Err(), context.DeadlineExceeded))
	}
	return err
}

// isIdempotent reports whether WithIdempotent names method.
func (k *calls) isIdempotent(method string) bool {
	for _, m := range k.idempotent {
		if m == method || (strings.HasSuffix(m, "/") && strings.HasPrefix(method, m)) {
			return true
		}
	}
	return false
}

// serviceOf is the service of a roster:///service channel.
func serviceOf(cc *grpc.ClientConn) string {
	t := cc.Target()
	if s, ok := strings.CutPrefix(t, scheme+":///"); ok {
		return s
	}
	return t
}

func streamTried(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(context.WithValue(ctx, triedCtx{}, newTried()), desc, cc, method, opts...)
}
