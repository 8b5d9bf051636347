package registry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roster-go/roster/registry"
)

func TestHTTPHealthCheck(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusNoContent)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	check := registry.HTTPHealthCheck(srv.URL + "/healthz")
	if err := check(context.Background()); err != nil {
		t.Fatalf("204: %v", err)
	}
	status.Store(http.StatusServiceUnavailable)
	if err := check(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: error %v, want one naming the status", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	status.Store(http.StatusOK)
	if err := check(ctx); err == nil {
		t.Fatal("a cancelled check passed")
	}
	if err := registry.HTTPHealthCheck("http://127.0.0.1:1/")(context.Background()); err == nil {
		t.Fatal("a check of a closed port passed")
	}
}
