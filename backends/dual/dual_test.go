package dual_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/urls"

	"github.com/roster-go/roster/backends/dual"
	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
	"github.com/roster-go/roster/registry/driver"
)

// Unit tests of the merging and the one-side faults, on in-process
// memory servers; the real-server tests are conformance_test.go and
// migration_test.go.

func TestOpenRejectsBadURLs(t *testing.T) {
	const a, b = "mem%3A%2F%2Fdual-a", "mem%3A%2F%2Fdual-b"
	secretOld := "redis%3A%2F%2F%3As3cret%40127.0.0.1%3A1%2F0"
	for _, c := range []struct{ url, want string }{
		{"dual://", "old and new are both required"},
		{"dual://?old=" + a, "old and new are both required"},
		{"dual://?old=" + a + "&new=" + a, "same registry"},
		{"dual://?old=dual%3A%2F%2F%3Fold%3D" + a + "&new=" + b, "option old is itself a dual URL"},
		{"dual://?old=nosuch%3A%2F%2Fh&new=" + b, `option old: no backend registered for scheme "nosuch"`},
		{"dual://?old=" + a + "&new=%zz", "query does not parse"},
		{"dual://?old=" + a + "&new=" + b + "&prefer=both", `option prefer="both": want one of old, new`},
		{"dual://?old=" + a + "&new=" + b + "&hold=soon", "hold"},
		{"dual://?old=" + a + "&new=" + b + "&read=new", `unknown option "read"`},
		{"dual://host?old=" + a + "&new=" + b, "takes only options"},
		{"dual://?old=" + secretOld + "&new=" + b + "&prefer=sideways", "prefer"},
		{"dual://?old=" + secretOld + "&new=" + secretOld, "same registry"},
	} {
		r, err := registry.Open(context.Background(), c.url)
		if err == nil {
			r.Close()
			t.Errorf("Open(%s) succeeded", c.url)
			continue
		}
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s) = %v, want ErrInvalid saying %q", c.url, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s) prints the nested password: %v", c.url, err)
		}
	}
}

// The nested URLs carry credentials: Redact redacts each as a URL of its
// own (urls.Nested), so an error still says which registries
// a dual URL names, and shows the public options.
func TestRedactMasksNestedURLs(t *testing.T) {
	raw := dualURL("consul://10.0.0.1:8500?token=s3cret", "etcd://root:s3cret@10.0.0.2:2379/roster", "new") + "&hold=30s"
	got := urls.Redact(raw)
	if strings.Contains(got, "s3cret") {
		t.Fatalf("Redact(%q) = %q shows a nested credential", raw, got)
	}
	if want := "dual://?hold=30s&new=etcd://root:xxxxx@10.0.0.2:2379/roster&old=consul://10.0.0.1:8500?token=xxxxx&prefer=new"; got != want {
		t.Fatalf("Redact = %q, want %q", got, want)
	}
	// A value that is not a URL of a registered scheme is masked whole.
	if got := urls.Redact("dual://?old=s3cret&new=nope://s3cret@h"); got != "dual://?new=xxxxx&old=xxxxx" {
		t.Fatalf("Redact of values that are no registry URLs = %q", got)
	}
}

// side is one side of a pair: a client whose link can be cut, and its
// server.
type side struct {
	*memory.Driver
	srv *memory.Server
}

func newSide() side {
	srv := memory.NewServer()
	return side{memory.NewDriver(srv), srv}
}

// pairOf returns a driver over two memory servers, and each side.
func pairOf(t *testing.T, o dual.Options) (driver.Driver, [2]side) {
	sides := [2]side{newSide(), newSide()}
	d := dual.New(sides[0], sides[1], o)
	t.Cleanup(func() { d.Close() })
	return d, sides
}

func holds(t *testing.T, s *memory.Server, service, id string) bool {
	t.Helper()
	snap, err := memory.NewDriver(s).List(context.Background(), service)
	if err != nil {
		t.Fatal(err)
	}
	// A driver's List is in any order: Find, a binary search, needs
	// Registry's sorted output.
	return slices.ContainsFunc(snap.Instances, func(in driver.Instance) bool { return in.ID == id })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A side that is down when the instance registers fails nothing; the
// instance is written there once it is back, and the lease stays healthy
// throughout. A side that loses the record gets it back alone.
func TestOneSideDownOrLosingTheRecord(t *testing.T) {
	d, sides := pairOf(t, dual.Options{})
	r := registry.New(d)
	defer r.Close()
	sides[0].SetReachable(false)
	var mu sync.Mutex
	var states []registry.LeaseState
	l, err := r.Register(context.Background(), registry.Instance{Service: "api", Address: "127.0.0.1:1"},
		registry.WithTTL(300*time.Millisecond),
		registry.WithStateHook(func(s registry.LeaseState, _ error) { mu.Lock(); states = append(states, s); mu.Unlock() }))
	if err != nil {
		t.Fatalf("register with the old side down: %v", err)
	}
	defer l.Deregister(context.Background())
	id := l.Instance().ID
	old, cur := sides[0].srv, sides[1].srv
	if holds(t, old, "api", id) || !holds(t, cur, "api", id) {
		t.Fatal("want the instance on the new side only while the old one is down")
	}
	snap, err := r.Lookup(context.Background(), "api")
	if _, ok := snap.Find(id); err != nil || !ok {
		t.Fatalf("lookup with one side down: %v, %+v", err, snap)
	}
	sides[0].SetReachable(true)
	eventually(t, "the instance written to the old side once it is back", func() bool { return holds(t, old, "api", id) })

	old.Delete("api", id) // one side loses the record: only that side is written again
	eventually(t, "the instance written back to the old side", func() bool { return holds(t, old, "api", id) })
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 0 || l.State() != registry.LeaseHealthy {
		t.Fatalf("lease states %v, now %v: want healthy throughout", states, l.State())
	}
}

// Both sides fail: the registration fails, with both errors.
func TestBothSidesDownFailsRegister(t *testing.T) {
	d, sides := pairOf(t, dual.Options{})
	sides[0].SetReachable(false)
	sides[1].SetReachable(false)
	_, err := d.Register(context.Background(), driver.Instance{ID: "x", Service: "api", Address: "127.0.0.1:1"}, time.Second)
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "both sides failed") {
		t.Fatalf("Register = %v, want ErrUnavailable from both sides", err)
	}
}

// put writes an instance straight onto one side, as a process that
// registered there alone would.
func put(t *testing.T, side side, id, addr string) {
	t.Helper()
	if _, err := side.Register(context.Background(), driver.Instance{ID: id, Service: "api", Address: addr, Weight: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// addresses lists s's instances as id=address, sorted by ID as Registry
// would: the driver returns them in any order.
func addresses(s driver.Snapshot) string {
	var out []string
	for _, in := range s.Instances {
		out = append(out, in.ID+"="+in.Address)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// The union is deduplicated by ID, the preferred side's record winning.
func TestUnionPrefersTheChosenSide(t *testing.T) {
	for _, c := range []struct {
		preferNew bool
		want      string
	}{
		{false, "both=10.0.0.1:1 new=10.0.0.2:3 old=10.0.0.1:2"},
		{true, "both=10.0.0.2:1 new=10.0.0.2:3 old=10.0.0.1:2"},
	} {
		d, sides := pairOf(t, dual.Options{PreferNew: c.preferNew})
		put(t, sides[0], "both", "10.0.0.1:1")
		put(t, sides[1], "both", "10.0.0.2:1")
		put(t, sides[0], "old", "10.0.0.1:2")
		put(t, sides[1], "new", "10.0.0.2:3")
		snap, err := d.List(context.Background(), "api")
		if err != nil || addresses(snap) != c.want {
			t.Errorf("prefer new=%v: List = %q, %v; want %q", c.preferNew, addresses(snap), err, c.want)
		}
	}
}

// A watch keeps an unreachable side's last state for the hold, then drops
// it; it fails with ErrUnavailable only when both sides are unreachable.
// Of the held state, only what the other side did not hold stays: an
// instance written to both follows the answering side. Revisions grow
// throughout.
func TestWatchHoldsAnUnreachableSide(t *testing.T) {
	const hold = time.Second
	d, sides := pairOf(t, dual.Options{Hold: hold})
	put(t, sides[0], "old", "10.0.0.1:2")
	put(t, sides[1], "new", "10.0.0.2:3")
	put(t, sides[0], "both", "10.0.0.1:1")
	put(t, sides[1], "both", "10.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.Watch(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var last uint64
	var prev string
	// next skips repeated states, as Registry does: a stream may return
	// one again. Revisions never go back, and grow with each change.
	next := func(want string) {
		t.Helper()
		for {
			s, err := st.Next(ctx)
			got := addresses(s)
			if err == nil && got == prev && s.Revision >= last {
				continue
			}
			if err != nil || got != want || s.Revision <= last {
				t.Fatalf("Next = %q rev %d, %v; want %q after rev %d", got, s.Revision, err, want, last)
			}
			last, prev = s.Revision, got
			return
		}
	}
	next("both=10.0.0.1:1 new=10.0.0.2:3 old=10.0.0.1:2")
	start := time.Now()
	sides[0].SetReachable(false)
	if _, err := d.List(ctx, "api"); err != nil { // the old side is now known down
		t.Fatal(err)
	}
	sides[1].srv.Delete("api", "both")
	next("new=10.0.0.2:3 old=10.0.0.1:2") // removed on the answering side: gone at once
	if held := time.Since(start); held >= hold {
		t.Fatalf("the removal took %v, the whole hold", held)
	}
	next("new=10.0.0.2:3") // the old side's own instance left after the hold
	if held := time.Since(start); held < hold {
		t.Fatalf("the unreachable side's state was dropped after %v, before the %v hold", held, hold)
	}
	sides[1].SetReachable(false)
	if _, err := st.Next(ctx); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("Next with both sides down = %v, want ErrUnavailable", err)
	}
}

// limited is a driver with declared limits, to test their merge.
type limited struct {
	driver.Driver
	l driver.Limits
}

func (l limited) Limits() driver.Limits { return l.l }

func TestLimitsAreTheStricter(t *testing.T) {
	etcdLike := limited{l: driver.Limits{MinTTL: 2 * time.Second, TTLGranularity: time.Second, MaxTTL: 9e9 * time.Second}}
	kubeLike := limited{l: driver.Limits{MinTTL: time.Second, TTLGranularity: time.Second, MaxTTL: math.MaxInt32 * time.Second}}
	redisLike := limited{l: driver.Limits{MinTTL: 10 * time.Millisecond, TTLGranularity: time.Millisecond}} // no maximum
	for _, c := range []struct {
		a, b limited
		want driver.Limits
	}{
		{redisLike, etcdLike, etcdLike.l},
		{etcdLike, redisLike, etcdLike.l},
		{etcdLike, kubeLike, driver.Limits{MinTTL: 2 * time.Second, TTLGranularity: time.Second, MaxTTL: kubeLike.l.MaxTTL}},
		{redisLike, redisLike, redisLike.l},
	} {
		if got := dual.New(c.a, c.b, dual.Options{}).Limits(); got != c.want {
			t.Errorf("Limits of %+v and %+v = %+v, want %+v", c.a.l, c.b.l, got, c.want)
		}
	}
}
