package consul_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/registry"
)

// A registration written behind Roster's back whose fields Roster cannot
// read (a corrupt roster_fields, a weight past MaxWeight) is skipped by
// Lookup and Watch and reported in the log, never served.
func TestReadBackSkipsCorruptRecords(t *testing.T) {
	t.Parallel()
	a := sharedAgent(t)
	c, tr, err := rawClient(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	svc := fmt.Sprintf("rb-%d", time.Now().UnixNano()%1e9)
	for id, meta := range map[string]map[string]string{
		"corrupt": {"roster_fields": "not ours"},
		"heavy":   {"weight": "70000"},
	} {
		err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: svc + "-" + id, Name: svc, Address: "127.0.0.1", Port: 9, Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Agent().ServiceDeregister(svc + "-" + id) })
	}
	var log logbuf.Buffer
	r, err := registry.Open(t.Context(), a.URL(""), registry.WithLogger(log.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	good, err := r.Register(t.Context(), registry.Instance{Service: svc, Address: "127.0.0.1:10"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(t.Context(), svc)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws, err := w.Next(t.Context())
	s, lerr := r.Lookup(t.Context(), svc)
	for _, got := range []struct {
		what string
		s    registry.Snapshot
		err  error
	}{{"Watch", ws, err}, {"Lookup", s, lerr}} {
		if got.err != nil || len(got.s.Instances) != 1 || got.s.Instances[0].ID != good.Instance().ID {
			t.Errorf("%s = %+v, %v; want only %s", got.what, got.s.Instances, got.err, good.Instance().ID)
		}
	}
	if !strings.Contains(log.String(), "skipped a record") {
		t.Fatalf("nothing reported in the log: %q", log.String())
	}
}
