package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/internal/logbuf"
	"github.com/roster-go/roster/internal/servers/redistest"
	"github.com/roster-go/roster/registry"
)

// nginxBin returns Debian's nginx. Like chromium, it is never skipped:
// scripts/test.sh installs it.
func nginxBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	t.Fatal("nginx is not installed: apt-get install -y nginx (scripts/test.sh installs it)")
	return ""
}

// nginxCheck runs nginx -t on a minimal configuration that includes the
// rendered files, and fails the test with nginx's words if it refuses.
func nginxCheck(t *testing.T, bin, dir string, files ...string) {
	t.Helper()
	var inc strings.Builder
	for _, f := range files {
		fmt.Fprintf(&inc, "    include %s;\n", f)
	}
	conf := fmt.Sprintf(`pid %[1]s/nginx.pid;
error_log stderr;
events {}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s    server {
        listen unix:%[1]s/nginx.sock;
        location / { proxy_pass http://api; }
    }
}
`, dir, inc.String())
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-q", "-p", dir, "-e", "stderr", "-c", path).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t refuses the rendered files: %v\n%s", err, out)
	}
}

// hostile are values a registrant may choose, each of which, printed as
// it is, closes the upstream block and opens a server of its own.
var hostile = registry.Instance{
	ID: "evil-1", Service: "api", Address: "10.0.0.66:80", Weight: 1,
	Version: `1; } server { listen 127.0.0.1:8081; location / { return 200 "owned"; } } upstream x {`,
	Zone:    "z }",
	Tags:    []string{"a;b", "}", `"`},
	Metadata: map[string]string{
		"max_fails": "1; } server { listen 8082; } upstream y { server 10.9.9.9",
		"note":      `a" } server { \" \\`,
	},
}

// TestTemplatesRefuseHostileValues renders the project's nginx templates
// (agent/testdata/nginx) with a registrant's hostile version, zone, tags
// and metadata on a real Redis, and runs Debian's nginx -t on the result.
// The template that prints them bare refuses to render and keeps its
// file; the one that quotes them renders them as one string each. nginx
// accepts both files, and neither holds a server block of the
// registrant's.
func TestTemplatesRefuseHostileValues(t *testing.T) {
	bin := nginxBin(t)
	f := newFixture(t, startRedis(t), agent.Config{})
	dir := t.TempDir()
	var tpls []agent.Template
	var outs []string
	for _, name := range []string{"upstream", "versions"} {
		b, err := os.ReadFile(filepath.Join("testdata", "nginx", name+".tmpl"))
		if err != nil {
			t.Fatal(err)
		}
		in, out := filepath.Join(dir, name+".tmpl"), filepath.Join(dir, name+".conf")
		if err := os.WriteFile(in, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tpls = append(tpls, agent.Template{In: in, Out: out})
		outs = append(outs, out)
	}
	f.register(registry.Instance{ID: "good-1", Service: "api", Address: "10.0.0.1:80", Weight: 100,
		Version: "1.2.3+build.7", Zone: "eu-west-1a", Tags: []string{"primary"}, Metadata: map[string]string{"max_fails": "3", "note": "ok"}})
	var log logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.agent.RunTemplates(ctx, agent.TemplateConfig{Templates: tpls, Debounce: 20 * time.Millisecond, Log: &log})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	before := waitFile(t, outs[0], "server 10.0.0.1:80 weight=100 max_fails=3;")
	waitFile(t, outs[1], `"10.0.0.1:80" "1.2.3+build.7";`)
	nginxCheck(t, bin, dir, outs...)

	f.register(hostile)
	quoted := waitFile(t, outs[1], `"10.0.0.66:80/note" "a\" } server { \\\" \\\\";`)
	if !strings.Contains(quoted, `"10.0.0.66:80" "1; } server { listen 127.0.0.1:8081; location / { return 200 \"owned\"; } } upstream x {";`) {
		t.Errorf("versions.conf does not hold the hostile version as one quoted string:\n%s", quoted)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "could change the file's structure") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged for upstream.tmpl within 10s; log:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _ := os.ReadFile(outs[0]); string(got) != before {
		t.Errorf("upstream.conf changed although its render was refused:\n%s", got)
	}
	if !strings.Contains(log.String(), "upstream.conf is kept as it was") {
		t.Errorf("the refusal does not say the file is kept:\n%s", log.String())
	}
	nginxCheck(t, bin, dir, outs...)
}

// The same hostile registration present when the agent starts: the
// first render fails, naming the value, and writes nothing.
func TestTemplateFirstRenderRefusesHostileValues(t *testing.T) {
	srv := redistest.Start(t)
	f := newFixture(t, backend{url: "redis://" + srv.Addr() + "/0", kill: srv.Kill}, agent.Config{})
	f.register(hostile)
	dir := t.TempDir()
	in, out := filepath.Join("testdata", "nginx", "upstream.tmpl"), filepath.Join(dir, "upstream.conf")
	// Bounded: were the render to pass, RunTemplates would go on until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := f.agent.RunTemplates(ctx, agent.TemplateConfig{Templates: []agent.Template{{In: in, Out: out}}})
	if err == nil || !strings.Contains(err.Error(), "could change the file's structure") || !strings.Contains(err.Error(), "upstream.tmpl") {
		t.Fatalf("first render with a hostile version: %v, want a refusal naming the template", err)
	}
	t.Logf("refused: %v", err)
	if _, err := os.Stat(out); err == nil {
		t.Error("upstream.conf written by a refused first render")
	}
}

// An address written into Redis behind Roster's back, past
// registration's validation, never adds a block either: the agent drops
// the record or refuses the render, and nginx accepts what is written.
func TestTemplateForgedAddress(t *testing.T) {
	bin := nginxBin(t)
	srv := redistest.Start(t)
	f := newFixture(t, backend{url: "redis://" + srv.Addr() + "/0?prefix=tpl", kill: srv.Kill}, agent.Config{})
	f.register(registry.Instance{ID: "good-1", Service: "api", Address: "10.0.0.1:80", Weight: 100})
	f.register(registry.Instance{ID: "forged-1", Service: "api", Address: "10.0.0.5:80", Weight: 100})
	forged := `{"id":"forged-1","service":"api","address":"10.0.0.5:80 weight=1; } server { listen 8083; } upstream z { server 10.0.0.6:80","weight":100}`
	ctx := context.Background()
	if err := srv.Client().SetArgs(ctx, "tpl:{api}:i:forged-1", forged, goredis.SetArgs{KeepTTL: true, Mode: "XX"}).Err(); err != nil {
		t.Fatalf("rewrite the record: %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "upstream.conf")
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second) // a passing render runs until then
	defer cancel()
	err := f.agent.RunTemplates(rctx, agent.TemplateConfig{Templates: []agent.Template{{In: filepath.Join("testdata", "nginx", "upstream.tmpl"), Out: out}}})
	if err != nil {
		if !strings.Contains(err.Error(), "could change the file's structure") {
			t.Fatalf("render with a forged address: %v, want a refusal or a file without it", err)
		}
		t.Logf("refused: %v", err)
		return
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if strings.Contains(string(b), "8083") || !strings.Contains(string(b), "server 10.0.0.1:80 ") {
		t.Fatalf("rendered with the forged address, or without the good one:\n%s", b)
	}
	nginxCheck(t, bin, dir, out)
}
