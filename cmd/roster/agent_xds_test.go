package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// --xds refuses an address other hosts reach, naming the flag, before
// the agent starts; --xds-allow-remote is the way to serve them.
func TestAgentXDSFlagLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:18000", "nonsense"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := execute(ctx, "agent", "--registry", "mem://xds-flag", "--listen", "127.0.0.1:0", "--xds", addr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), `--xds "`+addr+`"`) || !strings.Contains(err.Error(), "--xds-allow-remote") {
			t.Errorf("agent --xds %s: %v, want an error naming --xds and --xds-allow-remote", addr, err)
		}
	}
}

// --xds and --xds-allow-remote reach agent.Config.
func TestAgentXDSFlagConfig(t *testing.T) {
	cmd, fl := newAgentCmd()
	if err := cmd.ParseFlags([]string{"--xds", "10.0.0.1:18000", "--xds-allow-remote"}); err != nil {
		t.Fatal(err)
	}
	if c := fl.config(nil); c.XDS != "10.0.0.1:18000" || !c.XDSAllowRemote {
		t.Fatalf("config: XDS %q, XDSAllowRemote %v", c.XDS, c.XDSAllowRemote)
	}
	if _, err := fl.validate(); err != nil {
		t.Fatalf("--xds-allow-remote: %v", err)
	}
}
