// Package errtext_test checks the error texts of every backend together.
package errtext_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/roster-go/roster/backends/consul"
	_ "github.com/roster-go/roster/backends/etcd"
	_ "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/registry"
)

// sayOnce fails when an error's text repeats itself: "registry:" more
// than once, the URL twice, or one segment ("register s/ID") twice.
func sayOnce(t *testing.T, what string, err error, url string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	t.Logf("%s: %s", what, msg)
	if n := strings.Count(msg, "registry:"); n > 1 {
		t.Errorf("%s: %q says \"registry:\" %d times", what, msg, n)
	}
	if url != "" && strings.Count(msg, url) > 1 {
		t.Errorf("%s: %q names the URL twice", what, msg)
	}
	seen := map[string]bool{}
	for _, seg := range strings.Split(msg, ": ") {
		if seen[seg] && len(seg) > 3 {
			t.Errorf("%s: %q repeats %q", what, msg, seg)
		}
		seen[seg] = true
	}
}

// Every backend's errors carry one prefix per layer, for bad URLs and for
// each operation on an unreachable server.
func TestErrorTextSaysItOnce(t *testing.T) {
	for base, fast := range map[string]string{
		"redis://127.0.0.1:1":  "?dial_timeout=300ms",
		"etcd://127.0.0.1:1":   "?dial_timeout=300ms&request_timeout=300ms",
		"consul://127.0.0.1:1": "?timeout=300ms",
	} {
		t.Run(strings.SplitN(base, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			bad := base + "?no_such_option=1"
			_, err := registry.Open(t.Context(), bad)
			if !errors.Is(err, registry.ErrInvalid) {
				t.Fatalf("Open(%s) = %v, want ErrInvalid", bad, err)
			}
			sayOnce(t, "Open with an unknown option", err, bad)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			r, err := registry.Open(ctx, base+fast)
			if err != nil {
				if errors.Is(err, registry.ErrInvalid) {
					t.Fatal(err)
				}
				sayOnce(t, "Open of an unreachable server", err, base)
				return
			}
			defer r.Close()
			_, err = r.Register(ctx, registry.Instance{ID: "i-1", Service: "s", Address: "127.0.0.1:2"})
			sayOnce(t, "Register", err, base)
			_, err = r.Lookup(ctx, "s")
			sayOnce(t, "Lookup", err, base)
			_, err = r.Services(ctx)
			sayOnce(t, "Services", err, base)
		})
	}
}
