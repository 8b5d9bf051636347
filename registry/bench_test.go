package registry_test

import (
	"fmt"
	"testing"

	"github.com/roster-go/roster/backends/memory"
	"github.com/roster-go/roster/registry"
)

// BenchmarkLookup is an uncached Lookup (no Watcher open) of a service of
// 10 instances on the memory driver: the cost Registry adds around one
// driver call (guard, sorting, read-back checks).
func BenchmarkLookup(b *testing.B) {
	r := registry.New(memory.NewDriver(memory.NewServer()))
	defer r.Close()
	for i := range 10 {
		if _, err := r.Register(b.Context(), registry.Instance{Service: "svc", Address: fmt.Sprintf("10.0.0.%d:80", i+1)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Lookup(b.Context(), "svc"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegisterDeregister is one registration's whole life on the
// memory driver.
func BenchmarkRegisterDeregister(b *testing.B) {
	r := registry.New(memory.NewDriver(memory.NewServer()))
	defer r.Close()
	b.ReportAllocs()
	for b.Loop() {
		l, err := r.Register(b.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Deregister(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
