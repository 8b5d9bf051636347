package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// A record written behind Roster's back — another service's record under
// this one's key, an address that does not parse — is skipped by Lookup
// and Watch and reported in the log, never served. Both layouts.
func TestReadBackSkipsForeignRecords(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	for layout, corrupt := range map[string]func(ctx context.Context, victim registry.Instance) error{
		"hash": func(ctx context.Context, v registry.Instance) error {
			// Another service's record in the victim's place.
			return rdb.Do(ctx, "SET", "roster:{"+v.Service+"}:i:"+v.ID,
				`{"id":"`+v.ID+`","service":"other","address":"10.9.9.9:80","weight":1}`, "KEEPTTL").Err()
		},
		"keys": func(ctx context.Context, v registry.Instance) error {
			return rdb.Set(ctx, "service:"+v.Service+":h:+80", `{"addr":"h:+80"}`, time.Minute).Err()
		},
	} {
		t.Run(layout, func(t *testing.T) {
			var log logbuf.Buffer
			ctx := t.Context()
			r, err := registry.Open(ctx, "redis://"+srv.Addr()+"?layout="+layout,
				registry.WithLogger(log.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			svc := "rb-" + layout
			good, err := r.Register(ctx, registry.Instance{Service: svc, Address: "10.0.0.1:80"})
			if err != nil {
				t.Fatal(err)
			}
			victim, err := r.Register(ctx, registry.Instance{Service: svc, Address: "10.0.0.2:80"})
			if err != nil {
				t.Fatal(err)
			}
			victim.Abandon()
			if err := corrupt(ctx, victim.Instance()); err != nil {
				t.Fatal(err)
			}
			wantOnly(t, r, svc, good.Instance().ID, layout)
			if !strings.Contains(log.String(), "skipped a record") {
				t.Fatalf("nothing reported in the log: %q", log.String())
			}
		})
	}
}

// wantOnly checks that Lookup and a Watcher's first snapshot of svc
// serve exactly id (the victim, when not corrupted, may still be listed).
func wantOnly(t *testing.T, r *registry.Registry, svc, id, layout string) {
	t.Helper()
	s, err := r.Lookup(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range s.Instances {
		if in.Service != svc || in.Address == "h:+80" || in.Address == "10.9.9.9:80" {
			t.Fatalf("%s: Lookup served a foreign or corrupt record: %+v", layout, in)
		}
	}
	if _, ok := s.Find(id); !ok {
		t.Fatalf("%s: Lookup = %+v, lost the good record %s", layout, s.Instances, id)
	}
	w, err := r.Watch(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws, err := w.Next(t.Context())
	if err != nil || len(ws.Instances) != len(s.Instances) {
		t.Fatalf("%s: Watch = %+v, %v; want what Lookup served, %+v", layout, ws.Instances, err, s.Instances)
	}
}
