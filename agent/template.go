package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"text/template"
	"time"

	"github.com/roster-go/roster/registry"
)

// Template is one file of template mode: In, a text/template, rendered
// to Out.
type Template struct {
	In, Out string
}

// TemplateConfig configures RunTemplates.
type TemplateConfig struct {
	Templates []Template
	// Exec is run with sh -c after a render changed an output file (as
	// consul-template's command: "nginx -s reload"). Default: nothing.
	Exec string
	// Env is Exec's environment, as in exec.Cmd (default: this
	// process's). roster agent passes its own without the registry's
	// credentials.
	Env []string
	// Debounce is the quiet time after a change before re-rendering, so
	// that a burst of changes costs one render (default 200ms).
	Debounce time.Duration
	// Log receives render and command errors after the first render
	// (default: discarded).
	Log io.Writer
	// Reload, if set, makes RunTemplates read the template files again
	// and re-render them on every receive (roster agent's SIGHUP). A
	// file that no longer reads or parses is logged, and the templates
	// in use are kept.
	Reload <-chan struct{}
}

// RunTemplates renders the templates, then re-renders them after every
// change the agent sees, until ctx ends or the agent closes. An output
// file is
// written only when its content changes, atomically (a temporary file in
// the same directory, then a rename), and Exec runs after each render
// that changed one. The templates see these functions:
//
//	service "name"   the instances of a service ([]registry.Instance; the
//	                 last good list while the registry fails)
//	stale "name"     whether that list is stale
//	quote VALUE      VALUE as one double-quoted string, \ and " escaped
//	endpoint I "n"   the address of instance I's endpoint n, as
//	                 registry.Instance.Endpoint resolves it; "" when I
//	                 serves no n (so {{with}} skips it)
//
// Registrants choose what a template prints, so every value printed must
// hold only letters, digits and . : - _ / + = , @ % [ ], or come from
// quote: a version such as "1; } server {" cannot add a block to the
// file. Any other value fails the render.
//
// A template that does not parse or whose first render fails is an error
// at once; a later render error is logged and leaves the file as it is.
// Each receive on Reload reads and parses the templates again, then
// renders them at once.
func (a *Agent) RunTemplates(ctx context.Context, cfg TemplateConfig) error {
	if cfg.Debounce <= 0 {
		cfg.Debounce = 200 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(a.ctx, cancel)()
	tpls, err := a.parseTemplates(ctx, cfg.Templates)
	if err != nil {
		return err
	}
	for first := true; ; first = false {
		changes := a.events.wait()
		changed, err := renderAll(cfg.Templates, tpls, first)
		if err != nil && first {
			return err
		}
		if err != nil {
			fmt.Fprintf(cfg.Log, "roster agent: template: %v\n", err)
		}
		if changed && cfg.Exec != "" {
			runExec(ctx, cfg.Exec, cfg.Env, cfg.Log)
		}
		switch debounce(ctx, changes, a.events, cfg.Debounce, cfg.Reload) {
		case wakeStop:
			return nil
		case wakeReload:
			tpls = a.reparse(ctx, cfg, tpls)
		}
	}
}

// reparse reads the templates again, keeping old if one fails.
func (a *Agent) reparse(ctx context.Context, cfg TemplateConfig, old []*template.Template) []*template.Template {
	tpls, err := a.parseTemplates(ctx, cfg.Templates)
	if err != nil {
		fmt.Fprintf(cfg.Log, "roster agent: reload: %v; the templates in use are kept\n", err)
		return old
	}
	return tpls
}

func (a *Agent) parseTemplates(ctx context.Context, ts []Template) ([]*template.Template, error) {
	funcs := template.FuncMap{
		"service": func(name string) ([]registry.Instance, error) {
			in, err := a.lookup(ctx, name)
			return in.Instances, err
		},
		"stale": func(name string) (bool, error) {
			in, err := a.lookup(ctx, name)
			return in.Stale, err
		},
		"endpoint": endpointAddress,
	}
	for k, f := range safeFuncs {
		funcs[k] = f
	}
	out := make([]*template.Template, 0, len(ts))
	for _, t := range ts {
		b, err := os.ReadFile(t.In)
		if err != nil {
			return nil, fmt.Errorf("%w: template %s: %v", registry.ErrInvalid, t.In, err)
		}
		tpl, err := template.New(filepath.Base(t.In)).Option("missingkey=error").Funcs(funcs).Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("%w: template: %v", registry.ErrInvalid, err)
		}
		guard(tpl)
		out = append(out, tpl)
	}
	return out, nil
}

// endpointAddress is the templates' endpoint function.
func endpointAddress(in registry.Instance, name string) string {
	e, _ := in.Endpoint(name) // the zero Endpoint when in serves no name
	return e.Address
}

// lookup returns a service's current list, waiting for the first one.
func (a *Agent) lookup(ctx context.Context, name string) (instanceList, error) {
	v, err := a.useView(name, false, true) // a template's services are never evicted
	if err != nil {
		return instanceList{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, firstAnswerMax)
	defer cancel()
	return v.wait(ctx, 0)
}

// renderAll renders every template and writes the outputs that changed.
// A template that fails leaves its output as it was, and the others are
// still written, so that one hostile value freezes one file, not all;
// but on the first render (all) a failure writes nothing.
func renderAll(ts []Template, tpls []*template.Template, all bool) (changed bool, err error) {
	var errs []error
	bufs := make([]*bytes.Buffer, len(ts))
	for i, t := range ts {
		bufs[i] = new(bytes.Buffer)
		if err := tpls[i].Execute(bufs[i], nil); err != nil {
			errs = append(errs, fmt.Errorf("render %s: %w; %s is kept as it was", t.In, err, t.Out))
			bufs[i] = nil
		}
	}
	if all && len(errs) > 0 {
		return false, errors.Join(errs...)
	}
	for i, t := range ts {
		if bufs[i] == nil {
			continue
		}
		if old, err := os.ReadFile(t.Out); err == nil && bytes.Equal(old, bufs[i].Bytes()) {
			continue
		}
		if err := writeAtomic(t.Out, bufs[i].Bytes()); err != nil {
			errs = append(errs, err)
			continue
		}
		changed = true
	}
	return changed, errors.Join(errs...)
}

// writeAtomic replaces path with b: readers see the old file or the new
// one, never a part. The file keeps its mode (a new one is 0644): a
// config its owner made 0640 stays unreadable to others.
func writeAtomic(path string, b []byte) error {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func runExec(ctx context.Context, command string, env []string, log io.Writer) {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(log, "roster agent: --exec %q: %v\n", command, err)
	}
}

// wake is why debounce returned.
type wake int

const (
	wakeChange wake = iota // a change, then a quiet Debounce
	wakeReload             // a receive on reload
	wakeStop               // ctx ended
)

// debounce waits for a change after changes was taken, then for a quiet
// Debounce; a reload ends the wait at once (a nil reload never does).
func debounce(ctx context.Context, changes <-chan struct{}, b *broadcast, quiet time.Duration, reload <-chan struct{}) wake {
	select {
	case <-changes:
	case <-reload:
		return wakeReload
	case <-ctx.Done():
		return wakeStop
	}
	for {
		next := b.wait()
		t := time.NewTimer(quiet)
		select {
		case <-next:
			t.Stop()
		case <-t.C:
			return wakeChange
		case <-reload:
			t.Stop()
			return wakeReload
		case <-ctx.Done():
			t.Stop()
			return wakeStop
		}
	}
}
