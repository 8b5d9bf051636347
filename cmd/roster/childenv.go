package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/spf13/pflag"

	"github.com/roster-go/roster/backends/etcd"
	"github.com/roster-go/roster/backends/nats"
	"github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/registry"
)

// credentialEnv names every variable roster reads registry credentials
// from. The sidecar's CMD and the agent's --exec get none of them, unless
// --pass-env names it: the application is not the registrant.
// TestCredentialEnvCoversTheBackends keeps this list complete.
var credentialEnv = []string{
	"ROSTER_REGISTRY", // the URL may hold a password or a token
	// backends/consul's token, and what Consul's api.DefaultConfig reads.
	api.HTTPTokenEnvName,
	api.HTTPTokenFileEnvName,
	api.HTTPAuthEnvName,
	etcd.EnvPassword,
	nats.EnvToken,
	redis.EnvPassword,
	redis.EnvSentinelPassword,
	zookeeper.EnvPassword,
}

// passEnvVar adds --pass-env to f.
func passEnvVar(f *pflag.FlagSet, dst *[]string, child string) {
	f.StringArrayVar(dst, "pass-env", nil,
		fmt.Sprintf("let this registry variable through to %s (repeatable): %s", child, strings.Join(credentialEnv, ", ")))
}

// checkPassEnv refuses a --pass-env that is not a variable name.
func checkPassEnv(pass []string) error {
	for _, name := range pass {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("%w: --pass-env %q is not a variable name", registry.ErrInvalid, name)
		}
	}
	return nil
}

// childEnviron returns environ without the credential variables, except
// those named in pass.
func childEnviron(environ, pass []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(credentialEnv, name) && !slices.Contains(pass, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}
