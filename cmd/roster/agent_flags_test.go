package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
)

// The agent's bounds reach agent.Config from their flags, and their
// defaults are agent.Config's, shown in --help.
func TestAgentBoundFlags(t *testing.T) {
	cmd, fl := newAgentCmd()
	if err := cmd.ParseFlags([]string{"--read-timeout", "5s", "--write-timeout", "7s", "--idle-timeout", "1m",
		"--max-conns", "16", "--max-services", "32", "--max-tokens", "64", "--service-idle", "90s"}); err != nil {
		t.Fatal(err)
	}
	got := fl.config(nil)
	want := agent.Config{ReadTimeout: 5 * time.Second, WriteTimeout: 7 * time.Second, IdleTimeout: time.Minute,
		MaxConns: 16, MaxServices: 32, MaxTokens: 64, ServiceIdle: 90 * time.Second}
	if got.ReadTimeout != want.ReadTimeout || got.WriteTimeout != want.WriteTimeout || got.IdleTimeout != want.IdleTimeout ||
		got.MaxConns != want.MaxConns || got.MaxServices != want.MaxServices || got.MaxTokens != want.MaxTokens ||
		got.ServiceIdle != want.ServiceIdle {
		t.Errorf("config from the flags = %+v, want the bounds of %+v", got, want)
	}

	cmd, fl = newAgentCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	def := fl.config(nil)
	if def.ReadTimeout != 30*time.Second || def.WriteTimeout != 30*time.Second || def.IdleTimeout != 2*time.Minute ||
		def.MaxConns != 1024 || def.MaxServices != 1024 || def.MaxTokens != 65536 || def.ServiceIdle != 5*time.Minute {
		t.Errorf("default config %+v, want agent.Config's defaults", def)
	}
	help := cmd.Flags().FlagUsages()
	for _, want := range []string{
		"--read-timeout duration", "(default 30s)", "--idle-timeout duration", "(default 2m)",
		"--max-conns int", "(default 1024)", "--max-tokens int", "(default 65536)", "--service-idle duration", "(default 5m)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}

// A bad bound is refused before the agent starts, naming the flag.
func TestAgentBoundFlagsRefused(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--read-timeout", "-1s", "from 100ms to 1h"},
		{"--write-timeout", "0s", "from 100ms to 1h"},
		{"--idle-timeout", "-2m", "from 100ms to 1h"},
		{"--idle-timeout", "soon", "not a duration"},
		{"--service-idle", "-5m", "from 1s to 24h"},
		{"--max-conns", "-1", "from 1 to 1048576"},
		{"--max-conns", "0", "from 1 to 1048576"},
		{"--max-services", "-3", "from 1 to 1048576"},
		{"--max-tokens", "-1", "from 1 to 16777216"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := execute(ctx, "agent", "--registry", "mem://bad-bounds", "--listen", "127.0.0.1:0", tc.flag, tc.value)
		cancel()
		if err == nil || !strings.Contains(err.Error(), `"`+tc.flag+`"`) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("agent %s %s: %v, want an error naming %s and %q", tc.flag, tc.value, err, tc.flag, tc.want)
		}
	}
}

// The flags reach the running agent: with --max-services 1, a second
// service asked for over HTTP is 429 too_many.
func TestAgentMaxServicesFlagApplies(t *testing.T) {
	_, url := openReg(t, "/cli-agent-bounds")
	p := startAgent(t, "--registry", url, "--max-services", "1", "--read-timeout", "2s")
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp, err := http.Get(fmt.Sprintf("%s/v1/services/svc-%d", p.url, i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want == http.StatusTooManyRequests && !strings.Contains(string(body), "too_many") {
			t.Fatalf("service %d: %d %s, want %d", i, resp.StatusCode, body, want)
		}
	}
}

// TestAgentLocalityFlags: --zone and --region reach agent.Config.
func TestAgentLocalityFlags(t *testing.T) {
	cmd, fl := newAgentCmd()
	if err := cmd.ParseFlags([]string{"--zone", "a", "--region", "r1"}); err != nil {
		t.Fatal(err)
	}
	if got := fl.config(nil); got.Zone != "a" || got.Region != "r1" {
		t.Errorf("config from --zone a --region r1: zone %q region %q", got.Zone, got.Region)
	}
}
