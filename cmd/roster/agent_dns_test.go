package main

import (
	"testing"
	"time"

	"github.com/roster-go/roster/agent"
)

// The --dns flags reach agent.Config, with agent's defaults.
func TestAgentDNSFlags(t *testing.T) {
	cmd, fl := newAgentCmd()
	if err := cmd.ParseFlags([]string{"--dns", "127.0.0.1:8600", "--dns-domain", "svc.example.", "--dns-ttl", "2s",
		"--dns-allow-remote", "--dns-rate", "-1"}); err != nil {
		t.Fatal(err)
	}
	got := fl.config(nil)
	if got.DNS != "127.0.0.1:8600" || got.DNSDomain != "svc.example." || got.DNSTTL != 2*time.Second || !got.DNSAllowRemote || got.DNSRate != -1 {
		t.Errorf("config from the --dns flags = %+v", got)
	}
	cmd, fl = newAgentCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	def := fl.config(nil)
	if def.DNS != "" || def.DNSDomain != agent.DefaultDNSDomain || def.DNSTTL != agent.DefaultDNSTTL || def.DNSAllowRemote || def.DNSRate != agent.DefaultDNSRate {
		t.Errorf("default config %+v: want no DNS, and agent's DNS defaults", def)
	}
	cmd, _ = newAgentCmd()
	if err := cmd.ParseFlags([]string{"--dns-ttl", "10ms"}); err == nil {
		t.Error("--dns-ttl 10ms accepted")
	}
}
