package backend

import (
	"slices"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

func TestEndpointsText(t *testing.T) {
	eps := []driver.Endpoint{
		{Name: "http", Address: "10.0.0.1:8080", Protocol: "http"},
		{Name: "grpc", Address: "[fd00::1]:9090", Protocol: "h2c+tls"},
		{Name: "metrics", Address: "metrics.local:9100"},
	}
	s := FormatEndpoints(eps)
	if want := "http=10.0.0.1:8080/http,grpc=[fd00::1]:9090/h2c+tls,metrics=metrics.local:9100"; s != want {
		t.Fatalf("FormatEndpoints = %q, want %q", s, want)
	}
	got, ok := ParseEndpoints(s)
	if !ok || !slices.Equal(got, eps) {
		t.Fatalf("ParseEndpoints(%q) = %v, %v; want %v", s, got, ok, eps)
	}
	if got, ok := ParseEndpoints(""); !ok || got != nil {
		t.Fatalf(`ParseEndpoints("") = %v, %v; want nil, true`, got, ok)
	}
	for _, bad := range []string{"grpc", "=10.0.0.1:1", "grpc=", "a=1.2.3.4:5,,b=1.2.3.4:6"} {
		if got, ok := ParseEndpoints(bad); ok {
			t.Errorf("ParseEndpoints(%q) = %v, true; want false", bad, got)
		}
	}
}

// FuzzParseEndpoints: text anyone with write access stored never panics
// the reader, and what it reads formats to text that reads the same.
func FuzzParseEndpoints(f *testing.F) {
	f.Add("grpc=10.0.0.1:9090/grpc,metrics=10.0.0.1:9100")
	f.Add("a=b/c/d,=,")
	f.Fuzz(func(t *testing.T, s string) {
		eps, ok := ParseEndpoints(s)
		if !ok {
			return
		}
		again, ok := ParseEndpoints(FormatEndpoints(eps))
		if !ok || !slices.Equal(again, eps) {
			t.Fatalf("ParseEndpoints(%q) = %v, which formats to %q, read as %v", s, eps, FormatEndpoints(eps), again)
		}
	})
}
