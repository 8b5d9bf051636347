package consultest_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/roster-go/roster/conformance"
	"github.com/roster-go/roster/internal/servers/consultest"
	"github.com/roster-go/roster/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFindBinaryNamesTheFix(t *testing.T) {
	t.Setenv(consultest.EnvBin, filepath.Join(t.TempDir(), "nope"))
	_, err := consultest.FindBinary()
	if err == nil || !strings.Contains(err.Error(), "scripts/test.sh") {
		t.Fatalf("FindBinary with a missing %s: %v, want an error naming scripts/test.sh", consultest.EnvBin, err)
	}
}

// put registers a service with the agent, as a client would.
func put(t *testing.T, a *consultest.Agent, path, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+a.Addr()+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT %s: %s %s", path, resp.Status, b)
	}
}

func hasService(t *testing.T, a *consultest.Agent, id string) bool {
	t.Helper()
	resp, err := http.Get("http://" + a.Addr() + "/v1/agent/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `"`+id+`"`)
}

func TestRestartKeepsOrLosesAgentRegistrations(t *testing.T) {
	defer http.DefaultClient.CloseIdleConnections()
	a := consultest.Start(t)
	if u := a.URL("wait=5s"); u != "consul://"+a.Addr()+"?wait=5s" {
		t.Errorf("URL = %q", u)
	}
	put(t, a, "/v1/agent/service/register", `{"ID":"web-1","Name":"web","Port":80}`)
	if !hasService(t, a, "web-1") {
		t.Fatal("registration not listed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !hasService(t, a, "web-1") {
		t.Error("registration lost by Restart(keepData=true)")
	}
	if err := a.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if hasService(t, a, "web-1") {
		t.Error("registration kept by Restart(keepData=false)")
	}
	a.Stop()
	a.Stop() // twice is fine
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dir()); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", a.Dir(), err)
	}
}

// The harness opens working registries and offers every fault hook but
// Wipe, which it declares skipped; its external delete reaches the agent.
func TestHarness(t *testing.T) {
	defer http.DefaultClient.CloseIdleConnections()
	a := consultest.Start(t)
	h := consultest.NewHarness(t, a)
	_, p := h.(conformance.Partitioner)
	_, r := h.(conformance.Restarter)
	_, d := h.(conformance.ExternalDeleter)
	_, w := h.(conformance.Wiper)
	if !p || !r || !d || w || h.Config().Skip["WipeReregistersAndResyncs"] == "" {
		t.Errorf("hooks: Partitioner %v, Restarter %v, ExternalDeleter %v, Wiper %v (want all but Wiper, "+
			"and its check declared skipped); Skip %v", p, r, d, w, h.Config().Skip)
	}
	drv, link, err := h.(conformance.Partitioner).MakeLinkedDriver(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(drv)
	defer reg.Close()
	if err := link.SetConnected(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	l, err := reg.Register(t.Context(), registry.Instance{Service: "harness", Address: "127.0.0.1:80"})
	if err != nil {
		t.Fatal(err)
	}
	id := l.Instance().ID
	if !hasService(t, a, id) {
		t.Fatalf("%s registered through the harness's registry is not on the agent", id)
	}
	l.Abandon() // as a crash: no heartbeat re-registers it behind the check below
	if err := h.(conformance.ExternalDeleter).DeleteExternally(t.Context(), l.Instance()); err != nil {
		t.Fatal(err)
	}
	if hasService(t, a, id) {
		t.Errorf("%s still on the agent after DeleteExternally", id)
	}
}
