package dnssrv_test

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roster-go/roster/backends/dnssrv"
	"github.com/roster-go/roster/registry/driver"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want dnssrv.Options
	}{
		{"dns+srv://127.0.0.1:8600/{service}.service.consul", dnssrv.Options{Resolver: "127.0.0.1:8600", Name: "{service}.service.consul"}},
		{"dns+srv://127.0.0.1:8600/service.consul", dnssrv.Options{Resolver: "127.0.0.1:8600", Name: "{service}.service.consul"}},
		{"dns+srv://10.96.0.10/_http._tcp.{service}.prod.svc.cluster.local?min_poll=2s&max_poll=1m&timeout=1s&udp=true",
			dnssrv.Options{Resolver: "10.96.0.10:53", Name: "_http._tcp.{service}.prod.svc.cluster.local",
				MinPoll: 2 * time.Second, MaxPoll: time.Minute, Timeout: time.Second, UDP: true}},
		{"dns+srv://[::1]/_{service}._tcp.service.consul/", dnssrv.Options{Resolver: "[::1]:53", Name: "_{service}._tcp.service.consul"}},
		{"dns+srv://127.0.0.1/{service}.example?endpoints=http,grpc&endpoint_name=_{endpoint}._tcp.{service}.example",
			dnssrv.Options{Resolver: "127.0.0.1:53", Name: "{service}.example", Endpoints: []string{"http", "grpc"},
				EndpointName: "_{endpoint}._tcp.{service}.example"}},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dnssrv.ParseURL(u)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got  %+v, %v\n want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseURLRejects(t *testing.T) {
	for in, says := range map[string]string{
		"dns+srv://127.0.0.1":                       "no SRV name",
		"dns+srv://127.0.0.1/{service}.{service}.x": "one {service}",
		"dns+srv://127.0.0.1/a/{service}":           "one {service}, no /",
		"dns+srv://127.0.0.1/{service}..x":          "not a domain name",
		"dns+srv://a:53,b:53/x":                     "one resolver",
		"dns+srv://u:pw@127.0.0.1/x":                "credentials",
		"dns+srv://127.0.0.1/x?min_poll=often":      "min_poll",
		"dns+srv://127.0.0.1/x?ttl=1s":              "ttl",
		"dns+srv://127.0.0.1/x?tcp=maybe":           "tcp",
		"dns+srv:127.0.0.1/x":                       "//",
		"srv://127.0.0.1/x":                         "scheme",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		_, err = dnssrv.ParseURL(u)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", in, err, says)
		}
	}
	if _, err := dnssrv.New(dnssrv.Options{Resolver: "127.0.0.1:53", Name: "{service}.x", MinPoll: time.Minute, MaxPoll: time.Second}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("max_poll below min_poll: %v", err)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"dns+srv://127.0.0.1:8600/{service}.service.consul", "dns+srv:///x?udp=1", "dns+srv://h/_{service}._tcp.x/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		o, err := dnssrv.ParseURL(u)
		if err != nil {
			if !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("%q: %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if _, err := dnssrv.New(o); err != nil && !errors.Is(err, driver.ErrInvalid) {
			t.Fatalf("%q: New: %v", s, err)
		}
	})
}
