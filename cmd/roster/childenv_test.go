//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// credentials is an environment holding every credential variable, the
// registry URL with a password among them, and one ordinary variable.
func credentials(registryURL string) []string {
	env := []string{"ROSTER_TEST_ORDINARY=kept"}
	for _, name := range credentialEnv {
		if name == "ROSTER_REGISTRY" {
			env = append(env, name+"="+registryURL)
			continue
		}
		env = append(env, name+"=secret-of-"+name)
	}
	return env
}

// checkChildEnv checks that the child's environment (env's output) has
// the ordinary variable and those passed, and no other credential.
func checkChildEnv(t *testing.T, got string, passed ...string) {
	t.Helper()
	vars := map[string]string{}
	for line := range strings.Lines(got) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		vars[k] = v
	}
	if vars["ROSTER_TEST_ORDINARY"] != "kept" {
		t.Errorf("the child lost an ordinary variable: ROSTER_TEST_ORDINARY=%q", vars["ROSTER_TEST_ORDINARY"])
	}
	for _, name := range credentialEnv {
		_, has := vars[name]
		switch want := slices.Contains(passed, name); {
		case has && !want:
			t.Errorf("the child got %s", name)
		case !has && want:
			t.Errorf("the child did not get %s, passed with --pass-env", name)
		}
	}
	if strings.Contains(got, "hunter2") && !slices.Contains(passed, "ROSTER_REGISTRY") {
		t.Error("the registry's password reached the child")
	}
}

func TestSidecarChildGetsNoRegistryCredentials(t *testing.T) {
	// An unreachable registry: CMD starts anyway, and the URL may hold
	// a password.
	env := credentials("redis://:hunter2@127.0.0.1:1/0")
	for _, passed := range [][]string{nil, {"ROSTER_NATS_TOKEN", "CONSUL_HTTP_TOKEN"}} {
		args := []string{"register", "--service", "envsvc", "--addr", "127.0.0.1:9", "--drain", "0"}
		for _, name := range passed {
			args = append(args, "--pass-env", name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, binary, append(args, "--", "env")...)
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("roster register -- env: %v\n%s", err, stderr.String())
		}
		checkChildEnv(t, stdout.String(), passed...)
	}
}

func TestAgentExecGetsNoRegistryCredentials(t *testing.T) {
	_, url := openReg(t, "/agent-exec-env/")
	for i, passed := range [][]string{nil, {"ROSTER_REGISTRY", "ROSTER_REDIS_PASSWORD"}} {
		dir := t.TempDir()
		tmpl := filepath.Join(dir, "in.tmpl")
		if err := os.WriteFile(tmpl, []byte("static\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		envOut := filepath.Join(dir, "env")
		args := []string{"--template", tmpl + ":" + filepath.Join(dir, "out.conf"),
			"--exec", "env > " + envOut + ".tmp && mv " + envOut + ".tmp " + envOut}
		for _, name := range passed {
			args = append(args, "--pass-env", name)
		}
		p := startAgentEnv(t, credentials(url), args...)
		got := readWhenThere(t, envOut, 30*time.Second)
		checkChildEnv(t, got, passed...)
		if i == 1 && !strings.Contains(got, "ROSTER_REGISTRY="+url+"\n") {
			t.Errorf("--pass-env ROSTER_REGISTRY: the child did not get the URL %s", url)
		}
		p.stop(t)
	}
}

// readWhenThere waits for path to exist and returns its content.
func readWhenThere(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBadPassEnv(t *testing.T) {
	for _, cmd := range [][]string{
		{"register", "--service", "s", "--addr", "127.0.0.1:9", "--pass-env", "A=B", "--", "true"},
		{"agent", "--pass-env", ""},
	} {
		_, stderr, code := run(t, 30*time.Second, cmd...)
		if code == 0 || !strings.Contains(stderr, "is not a variable name") {
			t.Errorf("roster %q: exit %d, stderr %q", cmd, code, stderr)
		}
	}
}

// TestCredentialEnvCoversTheBackends reads the backends' sources: every
// variable named like a credential there must be in credentialEnv.
func TestCredentialEnvCoversTheBackends(t *testing.T) {
	re := regexp.MustCompile(`"((?:ROSTER|CONSUL)_[A-Z_]*(?:PASSWORD|TOKEN|SECRET|KEY)[A-Z_]*)"`)
	found := map[string]bool{}
	for _, glob := range []string{"../../backends/*/*.go", "../../internal/backend/*.go"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				name := string(m[1])
				found[name] = true
				if !slices.Contains(credentialEnv, name) {
					t.Errorf("%s reads %s, not in credentialEnv", f, name)
				}
			}
		}
	}
	if !found["ROSTER_REDIS_PASSWORD"] || !found["CONSUL_HTTP_TOKEN"] { // the scan itself works
		t.Errorf("the scan found %v, not ROSTER_REDIS_PASSWORD and CONSUL_HTTP_TOKEN", found)
	}
}
