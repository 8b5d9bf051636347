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

	"github.com/roster-go/roster/backends/consul/consultest"
)

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
