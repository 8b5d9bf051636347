package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
	"github.com/roster-go/roster/registry"
)

const upstreamTmpl = `upstream api {
{{- range service "api"}}
    server {{.Address}} weight={{.Weight}};
{{- end}}
}
`

// TestTemplateMode: the output follows the registry, is written whole,
// and the command runs after each change of the output.
func TestTemplateMode(t *testing.T) {
	onBackends(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, agent.Config{})
		dir := t.TempDir()
		in, out, runs := filepath.Join(dir, "nginx.tmpl"), filepath.Join(dir, "nginx.conf"), filepath.Join(dir, "runs")
		if err := os.WriteFile(in, []byte(upstreamTmpl), 0o644); err != nil {
			t.Fatal(err)
		}
		f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80", Weight: 100})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- f.agent.RunTemplates(ctx, agent.TemplateConfig{Templates: []agent.Template{{In: in, Out: out}},
				Exec: "echo reload >> " + runs, Debounce: 50 * time.Millisecond})
		}()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		waitFile(t, out, "server 10.0.0.1:80 weight=100;")
		waitFile(t, runs, "reload\n")
		lease := f.register(registry.Instance{ID: "b", Service: "api", Address: "10.0.0.2:80", Weight: 50})
		waitFile(t, out, "server 10.0.0.1:80 weight=100;\n    server 10.0.0.2:80 weight=50;")
		waitFile(t, runs, "reload\nreload\n")
		if err := lease.Deregister(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := waitFile(t, out, "upstream api {\n    server 10.0.0.1:80 weight=100;\n}\n")
		if strings.Contains(got, "10.0.0.2") {
			t.Errorf("deregistered instance still rendered:\n%s", got)
		}
		waitFile(t, runs, "reload\nreload\nreload\n")
		if left, _ := filepath.Glob(filepath.Join(dir, ".nginx.conf.tmp-*")); len(left) > 0 {
			t.Errorf("temporary files left: %v", left)
		}
	})
}

// waitFile waits until path holds want (the whole file for a file of
// runs, a part of it otherwise) and returns its content.
func waitFile(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) && (!strings.HasSuffix(path, "runs") || string(b) == want) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %q, want %q", filepath.Base(path), b, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTemplateErrors: a template that does not parse, or reads a field
// that does not exist, is an error at once, and nothing is written.
func TestTemplateErrors(t *testing.T) {
	f := newMemFixture(t, agent.Config{})
	f.register(registry.Instance{ID: "a", Service: "api", Address: "10.0.0.1:80"})
	dir := t.TempDir()
	for name, text := range map[string]string{"parse": "{{range}", "field": `{{range service "api"}}{{.Nope}}{{end}}`} {
		in, out := filepath.Join(dir, name+".tmpl"), filepath.Join(dir, name+".conf")
		os.WriteFile(in, []byte(text), 0o644)
		err := f.agent.RunTemplates(context.Background(), agent.TemplateConfig{Templates: []agent.Template{{In: in, Out: out}}})
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if name == "parse" && !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", name, err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: output written", name)
		}
	}
	err := f.agent.RunTemplates(context.Background(), agent.TemplateConfig{Templates: []agent.Template{{In: filepath.Join(dir, "missing"), Out: filepath.Join(dir, "x")}}})
	if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing template: %v", err)
	}
}
