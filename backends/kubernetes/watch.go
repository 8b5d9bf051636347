package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/roster-go/roster/registry/driver"
)

// generation is one generation of the driver's informer factory: the
// EndpointSlice and Lease informers of the namespace, indexed by service,
// and the streams they wake. The first watch error ends the generation
// (down closes); the next Watch starts a new one.
type generation struct {
	factory  informers.SharedInformerFactory
	slices   cache.SharedIndexInformer
	leases   cache.SharedIndexInformer
	pods     cache.SharedIndexInformer // nil when the driver may not list Pods
	platform platform
	probe    func(context.Context) error // a cheap call to the apiserver
	stopCh   chan struct{}
	down     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup // the watchdog
	rev      atomic.Uint64  // highest resourceVersion seen
	probeRV  atomic.Uint64  // highest resourceVersion a probe's list answered

	mu    sync.Mutex
	subs  map[string]map[chan struct{}]struct{}
	cause error // the first list or watch error, set before down closes
}

// The informers' indexes: objects by service label, slices by the Pods
// their endpoints name.
const (
	byService = "service"
	byPod     = "pod"
)

// The watchdog: client-go retries a failed request for a while and the
// reflector backs off in silence, so a generation checks the apiserver
// itself every probeInterval and ends at the first probe that fails or
// takes probeTimeout. A watcher cut off is thus stale within about
// probeInterval+probeTimeout.
const (
	probeInterval = time.Second
	probeTimeout  = 2 * time.Second
)

// watchdog runs until the generation stops or fails.
func (g *generation) watchdog() {
	defer g.wg.Done()
	every(probeInterval, g.stopCh, g.down, func() bool { return g.probe(context.Background()) == nil })
}

// every calls f each period until f returns false or stop or stop2 (nil:
// never) is closed.
func every(period time.Duration, stop, stop2 <-chan struct{}, f func() bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-stop2:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

func newGeneration(d *Driver) *generation {
	g := &generation{stopCh: make(chan struct{}), down: make(chan struct{}), subs: map[string]map[chan struct{}]struct{}{}}
	g.factory = informers.NewSharedInformerFactoryWithOptions(d.cs, 0, informers.WithNamespace(d.ns))
	slices, leases := d.cs.DiscoveryV1().EndpointSlices(d.ns), d.cs.CoordinationV1().Leases(d.ns)
	g.probe = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, min(d.reqT, probeTimeout))
		defer cancel()
		// No retries: client-go retries a GET that met EOF or a reset
		// until the deadline, which would hide a cut for probeTimeout.
		var l coordv1.LeaseList
		err := d.cs.CoordinationV1().RESTClient().Get().Namespace(d.ns).Resource("leases").
			Param("limit", "1").MaxRetries(0).Do(ctx).Into(&l)
		if err == nil {
			err = g.checkRV(parseRV(l.ResourceVersion))
		}
		return g.note(err)
	}
	g.slices = g.informer(&discoveryv1.EndpointSlice{}, discoveryv1.LabelServiceName, listWatch(g, slices.List, slices.Watch))
	g.leases = g.informer(&coordv1.Lease{}, labelLeaseService, listWatch(g, leases.List, leases.Watch))
	g.platform = platform{port: d.port}
	return g
}

// addPods adds the Pod informer, before the factory starts.
func (g *generation) addPods(d *Driver) {
	g.slices.AddIndexers(cache.Indexers{byPod: slicePods})
	g.pods = g.podInformer(d)
	g.platform.pod = func(name string) *corev1.Pod {
		o, ok, _ := g.pods.GetIndexer().GetByKey(d.ns + "/" + name)
		if !ok {
			return nil
		}
		return o.(*corev1.Pod)
	}
}

// podInformer follows the namespace's Pods, keeping only their names,
// UIDs, labels and annotations: a Pod's spec and status are most of its
// size, and the slices already carry what Roster reads of them. A Pod
// changing wakes the streams of the services whose slices name it.
func (g *generation) podInformer(d *Driver) cache.SharedIndexInformer {
	pods := d.cs.CoreV1().Pods(d.ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := pods.List(ctx, o)
			return l, g.notePods(d, err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := pods.Watch(ctx, o)
			return w, g.notePods(d, err)
		},
	}
	i := g.factory.InformerFor(&corev1.Pod{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	})
	i.SetTransform(func(o any) (any, error) {
		if p, ok := o.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
				ResourceVersion: p.ResourceVersion, Labels: p.Labels, Annotations: p.Annotations}}, nil
		}
		return o, nil
	})
	i.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { g.fail(err) })
	i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { g.podChanged(o) },
		UpdateFunc: func(_, o any) { g.podChanged(o) },
		DeleteFunc: func(o any) { g.podChanged(o) },
	})
	return i
}

// notePods is note for the Pod informer: the apiserver refusing Pods now
// (RBAC revoked) ends the generation as an outage, not as a refusal, so
// that the next one reads slices only instead of failing every watch.
func (g *generation) notePods(d *Driver, err error) error {
	if d.forbidPods(err) {
		g.fail(errPodsForbidden)
		return err
	}
	return g.note(err)
}

// slicePods indexes a slice by the Pods its endpoints name.
func slicePods(o any) ([]string, error) {
	s, ok := o.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelManagedBy] == managedBy {
		return nil, nil
	}
	var out []string
	for _, e := range s.Endpoints {
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" && e.TargetRef.Name != "" {
			out = append(out, e.TargetRef.Name)
		}
	}
	return out, nil
}

// podChanged wakes the streams of the services whose slices name the Pod.
func (g *generation) podChanged(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	// The snapshot changed at the Pod's version, not its slice's.
	g.seen(parseRV(p.ResourceVersion))
	objs, _ := g.slices.GetIndexer().ByIndex(byPod, p.Name)
	for _, s := range objs {
		g.changed(s, discoveryv1.LabelServiceName)
	}
}

// checkRV fails when the apiserver's resourceVersion rv is below what the
// generation saw: its storage lost its data. An apiserver restarted at
// once listens before it serves, so the watchdog's probe may never meet
// the outage; its watches then wait for a version that will not come
// while Leases lapse by our clock, and expiring them would empty a
// healthy service.
//
// The reference is the probes' own earlier answer, not the versions the
// informers saw: those come from events, and a list served by a watch
// cache that lags behind them under load is not a lost storage (it failed
// healthy watches as "informer lost the apiserver").
func (g *generation) checkRV(rv uint64) error {
	for {
		seen := g.probeRV.Load()
		if rv < seen {
			return fmt.Errorf("resourceVersion went back from %d to %d: the apiserver lost its data", seen, rv)
		}
		if rv == seen || g.probeRV.CompareAndSwap(seen, rv) {
			return nil
		}
	}
}

// listWatch is the ListWatch of one resource; its errors end g (note).
func listWatch[L runtime.Object](g *generation,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := list(ctx, o)
			return l, g.note(err)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			return w, g.note(err)
		},
	}
}

// note ends the generation on a list or watch error, and returns it. The reflector would retry a refused watch by itself, silently
// and with backoff, resuming where it was: that would hide an outage from
// the registry and, after the apiserver lost its data, wait for a
// resourceVersion that will not come.
func (g *generation) note(err error) error {
	if err != nil {
		g.fail(err)
	}
	return err
}

// fail records the generation's first error and ends it.
func (g *generation) fail(err error) {
	g.mu.Lock()
	if g.cause == nil {
		g.cause = err
	}
	g.mu.Unlock()
	g.markDown()
}

// downErr is the error of a stream on a generation that ended: ErrInvalid
// when the apiserver refused the list or watch (RBAC: forbidden), which
// no retry cures; ErrUnavailable otherwise.
func (g *generation) downErr(service string) error {
	g.mu.Lock()
	cause := g.cause
	g.mu.Unlock()
	if cause != nil && errorKind(cause) == driver.ErrInvalid {
		return wrap("watch "+service, cause)
	}
	return fmt.Errorf("k8s: watch %s: %w: informer lost the apiserver", service, driver.ErrUnavailable)
}

// informer registers, through the factory, the informer of obj's type
// on lw, indexed by the service label and waking the streams.
func (g *generation) informer(obj runtime.Object, label string, lw *cache.ListWatch) cache.SharedIndexInformer {
	i := g.factory.InformerFor(obj, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{byService: func(o any) ([]string, error) {
			if m, ok := o.(metav1.Object); ok && m.GetLabels()[label] != "" {
				return []string{m.GetLabels()[label]}, nil
			}
			return nil, nil
		}})
	})
	i.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { g.fail(err) })
	i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { g.changed(o, label) },
		UpdateFunc: func(_, o any) { g.changed(o, label) },
		DeleteFunc: func(o any) { g.changed(o, label) },
	})
	return i
}

func (inf *generation) markDown() { inf.once.Do(func() { close(inf.down) }) }

func (inf *generation) stop() {
	inf.markDown()
	close(inf.stopCh)
	inf.factory.Shutdown()
	inf.wg.Wait()
}

// changed wakes the streams of the object's service.
func (inf *generation) changed(o any, label string) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	m, ok := o.(metav1.Object)
	if !ok {
		return
	}
	inf.seen(parseRV(m.GetResourceVersion()))
	inf.mu.Lock()
	defer inf.mu.Unlock()
	for ch := range inf.subs[m.GetLabels()[label]] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// seen raises the highest resourceVersion seen to rv.
func (inf *generation) seen(rv uint64) {
	for {
		cur := inf.rev.Load()
		if rv <= cur || inf.rev.CompareAndSwap(cur, rv) {
			return
		}
	}
}

func (inf *generation) subscribe(service string, ch chan struct{}, on bool) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	if !on {
		delete(inf.subs[service], ch)
		return
	}
	if inf.subs[service] == nil {
		inf.subs[service] = map[chan struct{}]struct{}{}
	}
	inf.subs[service][ch] = struct{}{}
}

// snapshot builds the service's state from the informer caches.
func (inf *generation) snapshot(service string) (driver.Snapshot, time.Time) {
	objs, _ := inf.slices.GetIndexer().ByIndex(byService, service)
	sl := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		sl = append(sl, o.(*discoveryv1.EndpointSlice))
	}
	lobjs, _ := inf.leases.GetIndexer().ByIndex(byService, service)
	leases := make(map[string]*coordv1.Lease, len(lobjs))
	for _, o := range lobjs {
		l := o.(*coordv1.Lease)
		leases[l.Name] = l
	}
	now := time.Now()
	ins, next := instances(service, sl, leases, inf.platform, now)
	rev := max(inf.rev.Load(), parseRV(inf.slices.LastSyncResourceVersion()), parseRV(inf.leases.LastSyncResourceVersion()))
	return driver.Snapshot{Service: service, Instances: ins, Revision: rev, At: now}, next
}

// current returns a synced generation of informers, starting a new one
// when there is none or the last one failed and the apiserver answers.
func (d *Driver) current(ctx context.Context) (*generation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inf != nil {
		select {
		case <-d.inf.down:
			d.inf.stop()
			d.inf = nil
		default:
			return d.inf, nil
		}
	}
	inf := newGeneration(d)
	// One cheap call first: a new factory would otherwise retry behind
	// the reflector's backoff while the apiserver is away.
	if err := inf.probe(ctx); err != nil {
		return nil, wrap("watch", err)
	}
	withPods, err := d.podsReadable(ctx)
	if err != nil {
		return nil, err
	}
	if withPods {
		inf.addPods(d)
	}
	ctx, cancel := d.call(ctx)
	defer cancel()
	inf.factory.Start(inf.stopCh)
	for _, ok := range inf.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			inf.stop()
			if err := inf.downErr(""); !errors.Is(err, driver.ErrUnavailable) {
				return nil, err
			}
			return nil, fmt.Errorf("k8s: watch: %w: informer cache did not sync in %v", driver.ErrUnavailable, d.reqT)
		}
	}
	inf.wg.Add(1)
	go inf.watchdog()
	d.inf = inf
	return inf, nil
}

// podsReadable reports whether the driver may list the namespace's Pods:
// one cheap call per generation, until the apiserver first refuses.
func (d *Driver) podsReadable(ctx context.Context) (bool, error) {
	if d.podsForbidden.Load() {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(d.reqT, probeTimeout))
	defer cancel()
	_, err := d.cs.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{Limit: 1})
	if d.forbidPods(err) {
		return false, nil
	}
	if err != nil {
		return false, wrap("watch", err)
	}
	return true, nil
}

// Watch implements driver.Driver.
func (d *Driver) Watch(ctx context.Context, service string) (driver.Stream, error) {
	inf, err := d.current(ctx)
	if err != nil {
		return nil, err
	}
	s := &stream{inf: inf, service: service, wake: make(chan struct{}, 1), done: make(chan struct{})}
	inf.subscribe(service, s.wake, true)
	return s, nil
}

// stream follows one service on one generation of informers.
type stream struct {
	inf     *generation
	service string
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once
	started bool
	next    time.Time // when the first Lease of the last state lapses
}

// Next implements driver.Stream: the current state first, then each
// change, including a Lease lapsing.
func (s *stream) Next(ctx context.Context) (driver.Snapshot, error) {
	if s.started {
		// Registry drops a state repeated: every wake counts as a change.
		if err := s.wait(ctx, s.next); err != nil {
			return driver.Snapshot{}, err
		}
	}
	var snap driver.Snapshot
	snap, s.next = s.inf.snapshot(s.service)
	s.started = true
	return snap, nil
}

// wait blocks until the service may have changed: an event, or the first
// Lease lapsing at next (a timer, since no event marks it).
func (s *stream) wait(ctx context.Context, next time.Time) error {
	var expire <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next) + 10*time.Millisecond)
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return driver.ErrClosed
	case <-s.inf.down:
		return s.inf.downErr(s.service)
	case <-s.wake:
	case <-expire:
		// A Lease lapsed by our clock. If the informers are cut off, the
		// renewals may be what is missing: say so rather than drop it.
		if err := s.inf.probe(ctx); err != nil {
			return fmt.Errorf("k8s: watch %s: %w: %v", s.service, driver.ErrUnavailable, err)
		}
	}
	return nil
}

// Close implements driver.Stream.
func (s *stream) Close() error {
	s.once.Do(func() {
		close(s.done)
		s.inf.subscribe(s.service, s.wake, false)
	})
	return nil
}
