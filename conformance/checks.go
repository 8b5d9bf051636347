package conformance

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry"
)

func has1[T any](h Harness) bool { _, ok := h.(T); return ok }

// checks is the suite, in run order.
var checks = []check{
	{name: "RoundTripEveryField", run: roundTrip},
	{name: "OpenedByURL", run: openedByURL, needs: "URLOpener", needsOK: has1[URLOpener]},
	{name: "DefaultIDAndWeight", run: defaultIDAndWeight},
	{name: "SameAddressNeverOverwrites", run: sameAddress},
	{name: "RegisterIsUpsert", run: registerUpsert},
	{name: "PrefixIsolation", run: prefixIsolation},
	{name: "Deregister", run: deregister},
	{name: "DeregisterTwiceIsClosed", run: deregisterTwice},
	{name: "UnknownServiceIsEmpty", run: unknownServiceEmpty},
	{name: "ServicesListed", run: servicesListed},
	{name: "InvalidInputRejected", run: invalidInput},
	{name: "TTLValidation", run: ttlValidation},
	{name: "LimitsAtAndPast", run: limitsAtAndPast},
	{name: "Endpoints", run: endpointsRoundTrip},
	{name: "TTLEdges", run: ttlEdges},
	{name: "HeartbeatKeepsAlive", run: heartbeatKeepsAlive},
	{name: "CrashExpiresWithinTTL", run: crashExpires},
	{name: "DrainSetsWeightZero", run: drain},
	{name: "HealthCheckWithdrawsAndRestores", run: healthCheck},
	{name: "WatchInitialSnapshot", run: watchInitial},
	{name: "WatchInitialEmpty", run: watchInitialEmpty},
	{name: "WatchAddUpdateRemove", run: watchAddUpdateRemove},
	{name: "WatchLastInstanceRemoval", run: watchLastRemoval},
	{name: "WatchCrashRemoval", run: watchCrash},
	{name: "WatchSharedByWatchers", run: watchShared},
	{name: "WatchSlowConsumerGetsLatest", run: watchSlowConsumer},
	{name: "WatchIgnoresOtherServices", run: watchOtherServices},
	{name: "WatchCloseUnblocksNext", run: watchCloseUnblocks},
	{name: "RegistryCloseUnblocksAndDeregisters", run: registryClose},
	{name: "ContextCancellation", run: contextCancel},
	{name: "ConcurrentRegistrations", run: concurrentRegistrations},
	{name: "LookupFromWatchCache", run: lookupFromCache},
	{name: "ForeignDuplicateNeverWins", run: foreignDuplicate, needs: "ForeignWriter", needsOK: has1[ForeignWriter]},
	{name: "UndialableAddressRefused", run: undialableRefused},
	{name: "UndialableRecordNotServed", run: undialableNotServed},
	// Load the backend: run alone, with the fault checks, so that the
	// timing bounds of the others are not measured beside them.
	{name: "ManyLeasesThenClose", fault: true, run: manyLeases},
	{name: "WatchSeveralChangesAtOnce", fault: true, run: watchSeveral},
	{name: "ExternalDeleteReregisters", fault: true, run: externalDelete,
		needs: "ExternalDeleter", needsOK: has1[ExternalDeleter]},
	{name: "PartitionShorterThanTTL", fault: true, run: partitionShort,
		needs: "Partitioner", needsOK: has1[Partitioner]},
	{name: "PartitionLongerThanTTLReregisters", fault: true, run: partitionLong,
		needs: "Partitioner", needsOK: has1[Partitioner]},
	{name: "WatcherStaleWhileCutOff", fault: true, run: watcherStale,
		needs: "Partitioner", needsOK: has1[Partitioner]},
	{name: "RestartKeepingData", fault: true, run: func(t TB, s *suite) { restart(t, s, true) },
		needs: "Restarter", needsOK: has1[Restarter]},
	{name: "RestartLosingData", fault: true, run: func(t TB, s *suite) { restart(t, s, false) },
		needs: "Restarter", needsOK: has1[Restarter]},
	{name: "WipeReregistersAndResyncs", fault: true, run: wipe,
		needs: "Wiper", needsOK: has1[Wiper]},
}

func roundTrip(t TB, s *suite) {
	r := s.open(t)
	obs := s.observer(t)
	svc := service("rt")
	in := registry.Instance{
		ID: "rt-1", Service: svc, Address: addr(), Version: "1.2.0-rc.1+build.5", Zone: "hz-1",
		Region: "eu-west — 1", Weight: 37, Tags: []string{"canary", "grpc"},
		Metadata: map[string]string{
			"owner": "team-a", "unicode": "数据中心 — ünïcødé ✓", "empty": "",
			"json": `{"a":[1,2]}`, "spaces": "  a b  ", "x-long": strings.Repeat("v", backend.MaxMetadataValLen),
		},
	}
	l := s.register(t, r, in)
	if got := l.Instance(); !got.Equal(in) {
		t.Fatalf("Lease.Instance() = %+v, want the registered %+v", got, in)
	}
	eventually(t, s.cfg.Propagation, "registered instance visible to another client", func() (bool, string) {
		snap, err := obs.Lookup(t.Context(), svc)
		if err != nil {
			return false, err.Error()
		}
		if len(snap.Instances) != 1 {
			return false, fmt.Sprintf("got %v", ids(snap))
		}
		if got := snap.Instances[0]; !got.Equal(in) {
			return false, fmt.Sprintf("fields differ after round trip:\n got  %+v\n want %+v", got, in)
		}
		return snap.Service == svc, "snapshot service " + snap.Service
	})
}

// openedByURL: a registry opened by the harness's URL and one wrapped
// around its driver see each other's instances, every field intact.
func openedByURL(t TB, s *suite) {
	byDriver, byURL := s.open(t), s.observer(t)
	svc := service("url")
	var want []registry.Instance
	for _, r := range []*registry.Registry{byDriver, byURL} {
		in := registry.Instance{Service: svc, Address: addr(), Version: "1.0.0", Zone: "z", Tags: []string{"t"},
			Metadata: map[string]string{"via": fmt.Sprint(r == byURL)}}
		want = append(want, s.register(t, r, in).Instance())
	}
	for name, r := range map[string]*registry.Registry{"made by driver": byDriver, "opened by URL": byURL} {
		eventually(t, s.cfg.Propagation, "both instances seen by the registry "+name, func() (bool, string) {
			snap, err := r.Lookup(t.Context(), svc)
			if err != nil {
				return false, err.Error()
			}
			for _, w := range want {
				if got, ok := snap.Find(w.ID); !ok || !got.Equal(w) {
					return false, fmt.Sprintf("got %+v, want %+v among them", snap.Instances, w)
				}
			}
			return true, ""
		})
	}
}

var idPattern = regexp.MustCompile(`^([a-z0-9._-]+)-127\.0\.0\.1-(\d+)-[0-9a-f]{16}$`)

func defaultIDAndWeight(t TB, s *suite) {
	r := s.open(t)
	svc := service("defid")
	in := s.inst(svc)
	l := s.register(t, r, in)
	got := l.Instance()
	m := idPattern.FindStringSubmatch(got.ID)
	if m == nil || m[1] != svc || m[2] != fmt.Sprint(in.Port()) {
		t.Errorf("default ID %q does not have the form <service>-<host>-<port>-<random>", got.ID)
	}
	if got.Weight != registry.DefaultWeight {
		t.Errorf("weight 0 registered as %d, want DefaultWeight %d", got.Weight, registry.DefaultWeight)
	}
	eventually(t, s.cfg.Propagation, "default weight stored", func() (bool, string) {
		snap, err := r.Lookup(t.Context(), svc)
		if err != nil || len(snap.Instances) != 1 {
			return false, fmt.Sprint(err, ids(snap))
		}
		return snap.Instances[0].Weight == registry.DefaultWeight, fmt.Sprint("weight ", snap.Instances[0].Weight)
	})
}

func sameAddress(t TB, s *suite) {
	r1, r2 := s.open(t), s.open(t)
	svc := service("same")
	in := s.inst(svc)
	l1 := s.register(t, r1, in)
	l2 := s.register(t, r2, in)
	id1, id2 := l1.Instance().ID, l2.Instance().ID
	if id1 == id2 {
		t.Fatalf("two registrations of %s got the same ID %q", in.Address, id1)
	}
	eventually(t, s.cfg.Propagation, "both registrations of one address listed", func() (bool, string) {
		got, err := lookupIDs(t, r1, svc)
		return err == nil && sortedEqual(got, []string{id1, id2}), fmt.Sprint(got, err)
	})
}

func registerUpsert(t TB, s *suite) {
	r := s.open(t)
	svc := service("upsert")
	w := s.watch(t, r, svc)
	in := s.inst(svc)
	in.ID, in.Version = "up-1", "1.0"
	s.register(t, r, in)
	waitWatch(t, w, s.cfg.Propagation, "first version", func(sn registry.Snapshot) bool {
		i, ok := sn.Find("up-1")
		return ok && i.Version == "1.0"
	})
	in.Version = "2.0"
	s.register(t, r, in)
	sn := waitWatch(t, w, s.cfg.Propagation, "updated version", func(sn registry.Snapshot) bool {
		i, ok := sn.Find("up-1")
		return ok && i.Version == "2.0"
	})
	if len(sn.Instances) != 1 {
		t.Fatalf("registering the same ID twice left %d instances %v, want 1", len(sn.Instances), ids(sn))
	}
}

func prefixIsolation(t TB, s *suite) {
	r := s.open(t)
	base := service("iso")
	names := []string{base, base + "-a", base + ".a", base + "a", base + "_a"}
	want := map[string]string{}
	for _, n := range names {
		l := s.register(t, r, s.inst(n))
		want[n] = l.Instance().ID
	}
	for _, n := range names {
		eventually(t, s.cfg.Propagation, "service "+n+" holds only its own instance", func() (bool, string) {
			got, err := lookupIDs(t, r, n)
			return err == nil && sortedEqual(got, []string{want[n]}), fmt.Sprint(got, err)
		})
	}
}

func deregister(t TB, s *suite) {
	r, obs, svc := s.pair(t, "dereg")
	l := s.register(t, r, s.inst(svc))
	id := l.Instance().ID
	s.waitCount(t, obs, svc, 1, "registered")
	if err := l.Deregister(t.Context()); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if st := l.State(); st != registry.LeaseClosed {
		t.Errorf("state after Deregister = %v, want closed", st)
	}
	s.waitCount(t, obs, svc, 0, "deregistered instance "+id+" gone")
}

func deregisterTwice(t TB, s *suite) {
	r := s.open(t)
	l := s.register(t, r, s.inst(service("twice")))
	if err := l.Deregister(t.Context()); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if err := l.Deregister(t.Context()); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("second Deregister = %v, want ErrClosed", err)
	}
}

func unknownServiceEmpty(t TB, s *suite) {
	r := s.open(t)
	snap, err := r.Lookup(t.Context(), service("nobody"))
	if err != nil {
		t.Fatalf("Lookup of a service nobody registered: %v, want an empty snapshot", err)
	}
	if len(snap.Instances) != 0 || snap.Instances == nil {
		t.Fatalf("Lookup of an unknown service = %#v, want a non-nil empty list", snap.Instances)
	}
}

func servicesListed(t TB, s *suite) {
	r := s.open(t)
	svc := service("listed")
	l := s.register(t, r, s.inst(svc))
	eventually(t, s.cfg.Propagation, "Services lists "+svc, func() (bool, string) {
		all, err := r.Services(t.Context())
		for _, n := range all {
			if n == svc {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(all), " services, err ", err)
	})
	_ = l.Deregister(t.Context())
	eventually(t, s.cfg.Propagation, "Services drops "+svc+" after its last instance left", func() (bool, string) {
		all, err := r.Services(t.Context())
		for _, n := range all {
			if n == svc {
				return false, "still listed"
			}
		}
		return err == nil, fmt.Sprint(err)
	})
}

func invalidInput(t TB, s *suite) {
	r := s.open(t)
	svc := service("bad")
	many := map[string]string{}
	for i := 0; i <= backend.MaxMetadataPairs; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	big := map[string]string{}
	for i := 0; i < 40; i++ {
		big[fmt.Sprintf("k%d", i)] = strings.Repeat("x", 500)
	}
	cases := []struct {
		name  string
		field string
		in    registry.Instance
	}{
		{"empty service", "service", registry.Instance{Address: "127.0.0.1:1"}},
		{"upper case", "service", registry.Instance{Service: "Svc", Address: "127.0.0.1:1"}},
		{"glob", "service", registry.Instance{Service: "svc*", Address: "127.0.0.1:1"}},
		{"slash", "service", registry.Instance{Service: "a/b", Address: "127.0.0.1:1"}},
		{"colon", "service", registry.Instance{Service: "a:b", Address: "127.0.0.1:1"}},
		{"brace", "service", registry.Instance{Service: "a{b}", Address: "127.0.0.1:1"}},
		{"leading dash", "service", registry.Instance{Service: "-a", Address: "127.0.0.1:1"}},
		{"too long", "service", registry.Instance{Service: strings.Repeat("a", backend.MaxServiceLen+1), Address: "127.0.0.1:1"}},
		{"trailing dash", "service", registry.Instance{Service: "a-", Address: "127.0.0.1:1"}},
		{"no port", "address", registry.Instance{Service: svc, Address: "127.0.0.1"}},
		{"port 0", "address", registry.Instance{Service: svc, Address: "127.0.0.1:0"}},
		{"port 65536", "address", registry.Instance{Service: svc, Address: "127.0.0.1:65536"}},
		{"no host", "address", registry.Instance{Service: svc, Address: ":80"}},
		{"bad id", "id", registry.Instance{Service: svc, Address: "127.0.0.1:1", ID: "a/b"}},
		{"65 pairs", "metadata", registry.Instance{Service: svc, Address: "127.0.0.1:1", Metadata: many}},
		{"bad key", "metadata", registry.Instance{Service: svc, Address: "127.0.0.1:1", Metadata: map[string]string{"a.b": "x"}}},
		{"reserved key", "metadata[consul-x]", registry.Instance{Service: svc, Address: "127.0.0.1:1", Metadata: map[string]string{"consul-x": "x"}}},
		{"513-byte value", "metadata[k]", registry.Instance{Service: svc, Address: "127.0.0.1:1", Metadata: map[string]string{"k": strings.Repeat("x", 513)}}},
		{"over 16KiB", "instance", registry.Instance{Service: svc, Address: "127.0.0.1:1", Metadata: big}},
		{"control char in version", "version", registry.Instance{Service: svc, Address: "127.0.0.1:1", Version: "1\n2"}},
	}
	for _, c := range cases {
		_, err := r.Register(t.Context(), c.in)
		var fe *registry.FieldError
		switch {
		case !errors.Is(err, registry.ErrInvalid):
			t.Errorf("%s: Register = %v, want ErrInvalid", c.name, err)
		case !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field):
			t.Errorf("%s: error %q does not name field %q", c.name, err, c.field)
		}
	}
	for _, name := range []string{"", "A", "a*", "a?", "a[", "a:b", "a/b", "a{", "a}", "a-", strings.Repeat("a", backend.MaxServiceLen+1)} {
		if _, err := r.Lookup(t.Context(), name); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Lookup(%q) = %v, want ErrInvalid", name, err)
		}
		if _, err := r.Watch(t.Context(), name); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Watch(%q) = %v, want ErrInvalid", name, err)
		}
	}
	// Nothing invalid may have reached the backend.
	if got, err := lookupIDs(t, r, svc); err != nil || len(got) != 0 {
		t.Errorf("after rejected registrations, %s holds %v (err %v), want nothing", svc, got, err)
	}
}

func ttlValidation(t TB, s *suite) {
	r := s.open(t)
	lim := r.Limits()
	svc := service("ttl")
	if lim.MinTTL > 0 {
		_, err := r.Register(t.Context(), s.inst(svc), registry.WithTTL(lim.MinTTL-time.Millisecond))
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), lim.MinTTL.String()) {
			t.Errorf("TTL below the minimum: %v, want ErrInvalid naming the minimum %v", err, lim.MinTTL)
		}
	}
	_, err := r.Register(t.Context(), s.inst(svc), registry.WithTTL(s.cfg.TTL), registry.WithHeartbeatInterval(s.cfg.TTL/2))
	if !errors.Is(err, registry.ErrInvalid) {
		t.Errorf("heartbeat interval of TTL/2: %v, want ErrInvalid (TTL must be ≥ 3 intervals)", err)
	}
	req := s.cfg.TTL + lim.TTLGranularity/2
	if lim.TTLGranularity <= time.Millisecond {
		req = s.cfg.TTL + 300*time.Microsecond
	}
	l := s.register(t, r, s.inst(svc), registry.WithTTL(req))
	eff := l.TTL()
	if eff < req || (lim.TTLGranularity > 0 && eff-req >= lim.TTLGranularity) {
		t.Errorf("effective TTL %v for requested %v: want ≥ requested and < requested + granularity %v", eff, req, lim.TTLGranularity)
	}
	if l.HeartbeatInterval()*3 > eff {
		t.Errorf("default heartbeat interval %v is more than TTL/3 of %v", l.HeartbeatInterval(), eff)
	}
}

func heartbeatKeepsAlive(t TB, s *suite) {
	r, obs, svc := s.pair(t, "alive")
	l := s.register(t, r, s.inst(svc))
	id := l.Instance().ID
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "registration", func(sn registry.Snapshot) bool { return has(sn, id) })
	// For 4 TTLs the instance must never leave: any delivery without it fails.
	ctx, cancel := context.WithTimeout(t.Context(), 4*s.cfg.TTL)
	defer cancel()
	for {
		sn, err := w.Next(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			t.Fatalf("watcher error while heartbeating: %v", err)
		}
		if !has(sn, id) {
			t.Fatalf("instance left while its lease was heartbeating (state %v, err %v)", l.State(), l.Err())
		}
	}
	if st := l.State(); st != registry.LeaseHealthy {
		t.Fatalf("lease state %v after 4 TTLs of heartbeats (err %v), want healthy", st, l.Err())
	}
}

func crashExpires(t TB, s *suite) {
	r, obs, svc := s.pair(t, "crash")
	l := s.register(t, r, s.inst(svc))
	id := l.Instance().ID
	s.waitCount(t, obs, svc, 1, "registered")
	l.Abandon()
	crashed := time.Now()
	gran := r.Limits().TTLGranularity
	// The last heartbeat may have been up to one interval before the crash.
	early := l.TTL() - l.HeartbeatInterval() - gran - 50*time.Millisecond
	eventually(t, l.TTL()+s.cfg.ExpirySlack, "crashed instance "+id+" expires", func() (bool, string) {
		got, err := lookupIDs(t, obs, svc)
		if err == nil && len(got) == 0 {
			return true, ""
		}
		return false, fmt.Sprint(got, err)
	})
	if el := time.Since(crashed); el < early {
		t.Fatalf("crashed instance expired after %v, before its TTL %v allows (earliest %v)", el, l.TTL(), early)
	}
}

func drain(t TB, s *suite) {
	r, obs, svc := s.pair(t, "drain")
	in := s.inst(svc)
	in.Weight = 50
	l := s.register(t, r, in)
	w := s.watch(t, obs, svc)
	id := l.Instance().ID
	waitWatch(t, w, s.cfg.Propagation, "weight 50", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(id)
		return ok && i.Weight == 50
	})
	if err := l.Drain(t.Context()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	waitWatch(t, w, s.cfg.Propagation, "weight 0 after Drain", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(id)
		return ok && i.Weight == 0
	})
	// The drained instance stays registered across heartbeats.
	time.Sleep(l.HeartbeatInterval() * 2)
	if sn, err := obs.Lookup(t.Context(), svc); err != nil || len(sn.Instances) != 1 || sn.Instances[0].Weight != 0 {
		t.Fatalf("after heartbeats a drained instance reads %v (err %v), want it present with weight 0", sn.Instances, err)
	}
}

func healthCheck(t TB, s *suite) {
	r, obs, svc := s.pair(t, "health")
	var failing atomic.Bool
	check := func(context.Context) error {
		if failing.Load() {
			return errors.New("thread pool exhausted")
		}
		return nil
	}
	l := s.register(t, r, s.inst(svc), registry.WithHealthCheck(check, 50*time.Millisecond))
	id := l.Instance().ID
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "healthy instance", func(sn registry.Snapshot) bool { return has(sn, id) })
	failing.Store(true)
	waitWatch(t, w, s.cfg.Propagation+time.Second, "withdrawal while the health check fails", func(sn registry.Snapshot) bool { return !has(sn, id) })
	if st := l.State(); st != registry.LeaseWithdrawn {
		t.Errorf("lease state while the check fails = %v, want withdrawn", st)
	}
	failing.Store(false)
	waitWatch(t, w, s.cfg.Propagation+time.Second, "return once the check passes", func(sn registry.Snapshot) bool { return has(sn, id) })
	eventually(t, s.cfg.Propagation, "lease healthy again", func() (bool, string) {
		return l.State() == registry.LeaseHealthy, l.State().String()
	})
}

func watchInitial(t TB, s *suite) {
	r, obs, svc := s.pair(t, "winit")
	var want []string
	for i := 0; i < 3; i++ {
		want = append(want, s.register(t, r, s.inst(svc)).Instance().ID)
	}
	s.waitCount(t, obs, svc, 3, "registered")
	w := s.watch(t, obs, svc)
	sn, err := next(t, w, s.cfg.Propagation)
	if err != nil {
		t.Fatalf("first Next: %v", err)
	}
	if !sortedEqual(ids(sn), want) {
		t.Fatalf("first Next = %v, want the full current set %v", ids(sn), want)
	}
	for i := 1; i < len(sn.Instances); i++ {
		if sn.Instances[i-1].ID >= sn.Instances[i].ID {
			t.Fatalf("snapshot not sorted by ID: %v", ids(sn))
		}
	}
	if sn.Service != svc || sn.Stale || sn.At.IsZero() {
		t.Fatalf("snapshot header = {Service %q Stale %v At %v}, want {%q false non-zero}", sn.Service, sn.Stale, sn.At, svc)
	}
}

func watchInitialEmpty(t TB, s *suite) {
	r := s.open(t)
	svc := service("wempty")
	w := s.watch(t, r, svc)
	sn, err := next(t, w, s.cfg.Propagation)
	if err != nil {
		t.Fatalf("first Next on a service with no instances: %v, want an empty snapshot", err)
	}
	if len(sn.Instances) != 0 {
		t.Fatalf("first Next = %v, want empty", ids(sn))
	}
	// And the first registration then arrives.
	l := s.register(t, r, s.inst(svc))
	waitWatch(t, w, s.cfg.Propagation, "first registration", func(sn registry.Snapshot) bool { return has(sn, l.Instance().ID) })
}

func watchAddUpdateRemove(t TB, s *suite) {
	r, obs, svc := s.pair(t, "waur")
	w := s.watch(t, obs, svc)
	first, err := next(t, w, s.cfg.Propagation)
	if err != nil {
		t.Fatal(err)
	}
	a := s.register(t, r, s.inst(svc))
	b := s.register(t, r, s.inst(svc))
	ida, idb := a.Instance().ID, b.Instance().ID
	sn := waitWatch(t, w, s.cfg.Propagation, "two additions", func(sn registry.Snapshot) bool { return has(sn, ida) && has(sn, idb) })
	if sn.Revision <= first.Revision {
		t.Errorf("revision did not grow: %d then %d", first.Revision, sn.Revision)
	}
	if err := a.SetMetadata(t.Context(), map[string]string{"color": "blue"}); err != nil {
		t.Fatalf("SetMetadata: %v", err)
	}
	waitWatch(t, w, s.cfg.Propagation, "metadata update", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(ida)
		return ok && i.Metadata["color"] == "blue"
	})
	if err := b.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitWatch(t, w, s.cfg.Propagation, "removal", func(sn registry.Snapshot) bool { return has(sn, ida) && !has(sn, idb) })
}

func watchLastRemoval(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wlast")
	l := s.register(t, r, s.inst(svc))
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "the only instance", func(sn registry.Snapshot) bool { return len(sn.Instances) == 1 })
	if err := l.Deregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	sn := waitWatch(t, w, s.cfg.Propagation, "removal of the last instance (an empty snapshot)", func(sn registry.Snapshot) bool { return len(sn.Instances) == 0 })
	if sn.Instances == nil {
		t.Errorf("empty snapshot has a nil list; want an explicit empty one")
	}
}

func watchCrash(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wcrash")
	keep := s.register(t, r, s.inst(svc))
	l := s.register(t, r, s.inst(svc))
	w := s.watch(t, obs, svc)
	id := l.Instance().ID
	waitWatch(t, w, s.cfg.Propagation, "both", func(sn registry.Snapshot) bool { return len(sn.Instances) == 2 })
	l.Abandon()
	waitWatch(t, w, l.TTL()+s.cfg.ExpirySlack, "expiry of the crashed instance", func(sn registry.Snapshot) bool {
		return !has(sn, id) && has(sn, keep.Instance().ID)
	})
}

// watchSeveral: changes to several instances that a backend may apply
// together (registrations of one process at once, the leases of a
// crashed process expiring together, deregistrations at once) reach the
// watcher as the exact state within the backend's bound. One of these,
// a lease expiring with all its keys at one revision, left etcd watchers
// holding 9 of 10 dead instances until the next resync.
func watchSeveral(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wmany")
	keep := s.register(t, s.open(t), s.inst(svc))
	w := s.watch(t, obs, svc)
	const n = 10
	only := []string{keep.Instance().ID}
	exactly := func(want []string) func(registry.Snapshot) bool {
		return func(sn registry.Snapshot) bool { return sortedEqual(ids(sn), want) }
	}
	leases := s.registerAtOnce(t, r, svc, n)
	waitWatch(t, w, 2*s.cfg.Propagation, fmt.Sprintf("%d registered at once", n), exactly(append(leaseIDs(leases), only...)))
	for _, l := range leases {
		l.Abandon() // the process crashes: every lease stops at once
	}
	waitWatch(t, w, s.cfg.TTL+s.cfg.ExpirySlack, fmt.Sprintf("%d expired together", n), exactly(only))

	leases = s.registerAtOnce(t, r, svc, n)
	waitWatch(t, w, 2*s.cfg.Propagation, fmt.Sprintf("%d registered again", n), exactly(append(leaseIDs(leases), only...)))
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Go(func() {
			if err := l.Deregister(t.Context()); err != nil {
				t.Errorf("Deregister %s: %v", l.Instance().ID, err)
			}
		})
	}
	wg.Wait()
	waitWatch(t, w, s.cfg.Propagation, fmt.Sprintf("%d deregistered at once", n), exactly(only))
}

// registerAtOnce registers n instances of svc on r concurrently.
func (s *suite) registerAtOnce(t TB, r *registry.Registry, svc string, n int) []*registry.Lease {
	t.Helper()
	leases := make([]*registry.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range leases {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			leases[i], errs[i] = r.Register(ctx, s.inst(svc), registry.WithTTL(s.cfg.TTL))
		})
	}
	wg.Wait()
	for _, l := range leases {
		if l != nil {
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = l.Deregister(ctx)
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%d registrations at once: %v", n, err)
	}
	return leases
}

func leaseIDs(ls []*registry.Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Instance().ID
	}
	return out
}

func watchShared(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wshare")
	ws := []*registry.Watcher{s.watch(t, obs, svc), s.watch(t, obs, svc), s.watch(t, obs, svc)}
	l := s.register(t, r, s.inst(svc))
	for i, w := range ws {
		waitWatch(t, w, s.cfg.Propagation, fmt.Sprintf("registration at watcher %d", i), func(sn registry.Snapshot) bool { return has(sn, l.Instance().ID) })
	}
	// Closing one watcher leaves the others working.
	_ = ws[0].Close()
	_ = l.Deregister(t.Context())
	for i, w := range ws[1:] {
		waitWatch(t, w, s.cfg.Propagation, fmt.Sprintf("removal at watcher %d", i+1), func(sn registry.Snapshot) bool { return len(sn.Instances) == 0 })
	}
}

func watchSlowConsumer(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wslow")
	w := s.watch(t, obs, svc)
	if _, err := next(t, w, s.cfg.Propagation); err != nil {
		t.Fatal(err)
	}
	// 30 changes while the reader is away.
	var last *registry.Lease
	for i := 0; i < 30; i++ {
		l := s.register(t, r, s.inst(svc))
		if last != nil {
			_ = last.Deregister(t.Context())
		}
		last = l
	}
	want := last.Instance().ID
	eventually(t, s.cfg.Propagation, "backend settled", func() (bool, string) {
		got, err := lookupIDs(t, r, svc)
		return err == nil && sortedEqual(got, []string{want}), fmt.Sprint(got, err)
	})
	// Give the watch time to absorb every change, then read: the reader
	// must get the latest state, in few deliveries, not a backlog.
	deadline := time.Now().Add(s.cfg.Propagation)
	deliveries := 0
	for {
		sn, err := next(t, w, time.Until(deadline)+time.Millisecond)
		if err != nil {
			t.Fatalf("Next after the burst: %v (after %d deliveries)", err, deliveries)
		}
		deliveries++
		if sortedEqual(ids(sn), []string{want}) {
			break
		}
	}
	if deliveries > 5 {
		t.Errorf("slow reader needed %d deliveries to reach the latest state; updates must be coalesced", deliveries)
	}
}

func watchOtherServices(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wquiet")
	other := service("wnoisy")
	l := s.register(t, r, s.inst(svc))
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, l.Instance().ID) })
	for i := 0; i < 20; i++ {
		s.register(t, r, s.inst(other))
	}
	ctx, cancel := context.WithTimeout(t.Context(), s.cfg.Propagation)
	defer cancel()
	if sn, err := w.Next(ctx); err == nil {
		t.Fatalf("churn on another service delivered %s to a watcher of %s", describe(&sn), svc)
	}
}

func watchCloseUnblocks(t TB, s *suite) {
	r := s.open(t)
	w, err := r.Watch(t.Context(), service("wclose"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next(t, w, s.cfg.Propagation); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := w.Next(context.Background()); errc <- err }()
	time.Sleep(20 * time.Millisecond) // let Next block; the result is checked either way
	_ = w.Close()
	wantReleased(t, errc, registry.ErrClosed, "Close")
	if _, err := w.Next(t.Context()); !errors.Is(err, registry.ErrClosed) {
		t.Fatalf("Next on a closed watcher = %v, want ErrClosed", err)
	}
}

func registryClose(t TB, s *suite) {
	obs := s.open(t)
	ctx := t.Context()
	r, err := s.newRegistry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	svc := service("rclose")
	l, err := r.Register(ctx, s.inst(svc), registry.WithTTL(s.cfg.TTL))
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next(t, w, s.cfg.Propagation); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		// Close deregisters first, so a removal may arrive before ErrClosed.
		for {
			if _, err := w.Next(context.Background()); err != nil {
				errc <- err
				return
			}
		}
	}()
	if err := r.Close(); err != nil {
		t.Fatalf("Registry.Close: %v", err)
	}
	wantReleased(t, errc, registry.ErrClosed, "Registry.Close")
	if l.State() != registry.LeaseClosed {
		t.Errorf("lease state after Registry.Close = %v, want closed", l.State())
	}
	// Close deregisters: the instance is gone long before its TTL.
	s.waitCount(t, obs, svc, 0, "Close deregistered the registry's instances")
	if _, err := r.Register(ctx, s.inst(svc)); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Register after Close = %v, want ErrClosed", err)
	}
	if _, err := r.Lookup(ctx, svc); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Lookup after Close = %v, want ErrClosed", err)
	}
	if _, err := r.Watch(ctx, svc); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Watch after Close = %v, want ErrClosed", err)
	}
}

func contextCancel(t TB, s *suite) {
	r := s.open(t)
	svc := service("ctx")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Register(cancelled, s.inst(svc)); !errors.Is(err, context.Canceled) {
		t.Errorf("Register with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := r.Lookup(cancelled, svc); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup with a cancelled context = %v, want context.Canceled", err)
	}
	w := s.watch(t, r, svc)
	if _, err := next(t, w, s.cfg.Propagation); err != nil {
		t.Fatal(err)
	}
	ctx, cancel2 := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := w.Next(ctx); errc <- err }()
	cancel2()
	wantReleased(t, errc, context.Canceled, "cancelling the context")
	// The watcher is still usable after a cancelled Next.
	l := s.register(t, r, s.inst(svc))
	waitWatch(t, w, s.cfg.Propagation, "registration after a cancelled Next", func(sn registry.Snapshot) bool { return has(sn, l.Instance().ID) })
}

func concurrentRegistrations(t TB, s *suite) {
	r, obs, svc := s.pair(t, "conc")
	w := s.watch(t, obs, svc)
	const n = 100
	var wg sync.WaitGroup
	leases := make([]*registry.Lease, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := r.Register(t.Context(), s.inst(svc), registry.WithTTL(max(s.cfg.TTL, 3*time.Second)))
			if err != nil {
				errs <- err
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Register: %v", err)
	}
	waitWatch(t, w, s.cfg.Propagation*5, "all 100 instances", func(sn registry.Snapshot) bool { return len(sn.Instances) == n })
	// Deregister half concurrently; the watcher converges on the other half.
	for i := 0; i < n; i += 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = leases[i].Deregister(t.Context())
		}()
	}
	wg.Wait()
	waitWatch(t, w, s.cfg.Propagation*5, "50 left", func(sn registry.Snapshot) bool { return len(sn.Instances) == n/2 })
	for i := 1; i < n; i += 2 {
		_ = leases[i].Deregister(t.Context())
	}
}

// manyLeases: one process holds Config.ManyLeases leases (default 1,000).
// Every registration succeeds, heartbeats keep them all listed for a full
// TTL, and Registry.Close leaves none behind.
func manyLeases(t TB, s *suite) {
	n := s.cfg.ManyLeases
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := s.newRegistry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = r.Close()
		}
	})
	obs := s.open(t)
	svc := service("many")
	ttl := max(s.cfg.TTL, registry.DefaultTTL) // what most users run
	start := time.Now()
	if err := registerMany(t.Context(), r, svc, ttl, n); err != nil {
		t.Fatalf("%d concurrent registrations from one process: %v", n, err)
	}
	t.Logf("%d registrations in %v", n, time.Since(start))
	count := func() (bool, string) {
		sn, err := obs.Lookup(t.Context(), svc)
		return err == nil && len(sn.Instances) == n, fmt.Sprintf("%d listed, %v", len(sn.Instances), err)
	}
	eventually(t, s.cfg.Propagation*5, fmt.Sprintf("all %d listed", n), count)
	time.Sleep(ttl + s.cfg.ExpirySlack) // the span the leases must cover: their whole TTL
	if ok, msg := count(); !ok {
		t.Fatalf("after a TTL held by heartbeats: %s, want all %d", msg, n)
	}
	start = time.Now()
	if err := r.Close(); err != nil {
		t.Errorf("Registry.Close with %d leases: %v", n, err)
	}
	closed = true
	t.Logf("Close deregistered %d in %v", n, time.Since(start))
	eventually(t, 5*time.Second, "none left 5s after Close", func() (bool, string) {
		sn, err := obs.Lookup(t.Context(), svc)
		return err == nil && len(sn.Instances) == 0, fmt.Sprintf("%d left, %v", len(sn.Instances), err)
	})
}

// registerMany registers n instances of svc on r at once; the first
// error wins.
func registerMany(ctx context.Context, r *registry.Registry, svc string, ttl time.Duration, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Register(ctx, registry.Instance{Service: svc, Address: addr()}, registry.WithTTL(ttl)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := len(errs)
	if failed > 0 {
		return fmt.Errorf("%d of %d failed, first: %w", failed, n, <-errs)
	}
	return nil
}

func lookupFromCache(t TB, s *suite) {
	r := s.open(t)
	svc := service("cache")
	l := s.register(t, r, s.inst(svc))
	w := s.watch(t, r, svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, l.Instance().ID) })
	a, err := r.Lookup(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Lookup(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	// Served from the shared cache: the very same snapshot, not a re-read.
	if len(a.Instances) != 1 || len(b.Instances) != 1 || &a.Instances[0] != &b.Instances[0] {
		t.Fatalf("Lookup with a live watch did not answer from the cache")
	}
}

// ---- fault checks ----

func externalDelete(t TB, s *suite) {
	r, obs, svc := s.pair(t, "extdel")
	l, w, prev := s.registerWatched(t, r, obs, svc)
	in := l.Instance()
	if err := s.h.(ExternalDeleter).DeleteExternally(t.Context(), in); err != nil {
		t.Fatalf("DeleteExternally: %v", err)
	}
	// The owner notices at its next heartbeat and puts it back.
	converge(t, w, prev, lookupFn(t, r, svc), l.HeartbeatInterval()+l.TTL()+s.cfg.Propagation, "re-registration after an external delete", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(in.ID)
		return ok && i.Equal(in)
	})
	eventually(t, s.cfg.Propagation, "lease healthy", func() (bool, string) { return l.State() == registry.LeaseHealthy, l.State().String() })
}

// openLinked opens a registry whose link to the backend the check can
// cut; the link is healed and the registry closed at cleanup.
func (s *suite) openLinked(t TB) (*registry.Registry, Link) {
	d, link, err := s.h.(Partitioner).MakeLinkedDriver(t.Context())
	if err != nil {
		t.Fatalf("Partitioner.MakeLinkedDriver: %v", err)
	}
	r := registry.New(d, s.options()...)
	t.Cleanup(func() { _ = link.SetConnected(context.Background(), true); _ = r.Close() })
	return r, link
}

func partitionShort(t TB, s *suite) {
	obs := s.open(t)
	r, link := s.openLinked(t)
	svc := service("pshort")
	l := s.register(t, r, s.inst(svc))
	id := l.Instance().ID
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, id) })
	if err := link.SetConnected(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	// Cut for less than the TTL minus a heartbeat: the instance must stay.
	cut := l.TTL() - l.HeartbeatInterval() - s.cfg.Propagation
	if cut < l.HeartbeatInterval() {
		cut = l.HeartbeatInterval()
	}
	time.Sleep(cut)
	if err := link.SetConnected(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), l.TTL())
	defer cancel()
	for {
		sn, err := w.Next(ctx)
		if ctx.Err() != nil {
			break
		}
		if err == nil && !has(sn, id) {
			t.Fatalf("instance disappeared during a %v partition shorter than its TTL %v", cut, l.TTL())
		}
	}
	eventually(t, l.TTL(), "lease healthy after a short partition", func() (bool, string) {
		return l.State() == registry.LeaseHealthy && l.Err() == nil, fmt.Sprint(l.State(), l.Err())
	})
}

func partitionLong(t TB, s *suite) {
	obs := s.open(t)
	r, link := s.openLinked(t)
	svc := service("plong")
	var states sync.Map
	l := s.register(t, r, s.inst(svc), registry.WithStateHook(func(st registry.LeaseState, _ error) { states.Store(st, true) }))
	in := l.Instance()
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, in.ID) })
	if err := link.SetConnected(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	waitWatch(t, w, l.TTL()+s.cfg.ExpirySlack+s.cfg.Propagation, "expiry while the registrant is cut off", func(sn registry.Snapshot) bool { return !has(sn, in.ID) })
	if err := link.SetConnected(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	waitWatch(t, w, 2*l.TTL()+s.cfg.Propagation+10*time.Second, "automatic re-registration after the partition heals", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(in.ID)
		return ok && i.Equal(in)
	})
	eventually(t, s.cfg.Propagation, "lease healthy", func() (bool, string) { return l.State() == registry.LeaseHealthy, l.State().String() })
	if _, ok := states.Load(registry.LeaseReregistering); !ok {
		t.Errorf("the lease never reported re-registering")
	}
}

func watcherStale(t TB, s *suite) {
	r := s.open(t)
	obs, link := s.openLinked(t)
	svc := service("wstale")
	a := s.register(t, r, s.inst(svc))
	w := s.watch(t, obs, svc)
	waitWatch(t, w, s.cfg.Propagation, "instance", func(sn registry.Snapshot) bool { return has(sn, a.Instance().ID) })
	if err := link.SetConnected(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sn, err := next(t, w, s.cfg.StaleDetect+s.cfg.Propagation)
	switch {
	case !sn.Stale:
		t.Fatalf("cut-off watcher: Next = %s, %v; want the last state marked Stale within %v", describe(&sn), err, s.cfg.StaleDetect)
	case !errors.Is(err, registry.ErrUnavailable):
		t.Fatalf("stale delivery error = %v, want ErrUnavailable", err)
	case !has(sn, a.Instance().ID):
		t.Fatalf("stale delivery %s lost the last good instances", describe(&sn))
	}
	t.Logf("stale reported after %v", time.Since(start))
	// Lookup keeps answering from the stale cache, within the time a
	// watcher takes to notice: a client's retries nested in its dialer's
	// (go-redis on Sentinel: 12s) would stall every caller as long.
	start = time.Now()
	ls, err := obs.Lookup(t.Context(), svc)
	if took := time.Since(start); took > s.cfg.StaleDetect+s.cfg.Propagation {
		t.Errorf("Lookup while cut off took %v, want at most %v", took, s.cfg.StaleDetect+s.cfg.Propagation)
	}
	if !ls.Stale || !has(ls, a.Instance().ID) || !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("Lookup while cut off = %s, %v; want the cached state marked Stale and ErrUnavailable", describe(&ls), err)
	}
	// A change happens while the watcher is cut off.
	b := s.register(t, r, s.inst(svc))
	if err := link.SetConnected(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	waitWatch(t, w, s.cfg.StaleDetect+s.cfg.Propagation+10*time.Second, "fresh state with the change made while cut off", func(sn registry.Snapshot) bool {
		return has(sn, a.Instance().ID) && has(sn, b.Instance().ID)
	})
}

func restart(t TB, s *suite, keep bool) {
	r, obs, svc := s.pair(t, "restart")
	l, w, prev := s.registerWatched(t, r, obs, svc)
	in := l.Instance()
	if err := s.h.(Restarter).Restart(t.Context(), keep); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// Whatever the backend lost, the lease puts it back and the watcher
	// converges on it, with a fresh (non-stale) snapshot.
	converge(t, w, prev, lookupFn(t, r, svc), 2*l.TTL()+s.cfg.ExpirySlack+s.cfg.StaleDetect+10*time.Second, "instance present after the restart", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(in.ID)
		return ok && i.Equal(in)
	})
	// And new changes flow again.
	l2 := s.register(t, r, s.inst(svc))
	waitWatch(t, w, s.cfg.Propagation+5*time.Second, "a registration made after the restart", func(sn registry.Snapshot) bool { return has(sn, l2.Instance().ID) })
}

func wipe(t TB, s *suite) {
	r, obs, svc := s.pair(t, "wipe")
	l, w, before := s.registerWatched(t, r, obs, svc)
	in := l.Instance()
	if err := s.h.(Wiper).Wipe(t.Context()); err != nil {
		t.Fatalf("Wipe: %v", err)
	}
	after := converge(t, w, before, lookupFn(t, r, svc), l.HeartbeatInterval()+l.TTL()+s.cfg.Propagation+5*time.Second, "instance re-registered after the wipe", func(sn registry.Snapshot) bool {
		i, ok := sn.Find(in.ID)
		return ok && i.Equal(in)
	})
	if after.Revision < before.Revision {
		t.Fatalf("revision went back after the wipe: %d then %d", before.Revision, after.Revision)
	}
	l2 := s.register(t, r, s.inst(svc))
	waitWatch(t, w, s.cfg.Propagation+5*time.Second, "a registration made after the wipe", func(sn registry.Snapshot) bool { return has(sn, l2.Instance().ID) })
}
