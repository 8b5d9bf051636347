package driver

import "testing"

func TestSnapshotFindAndClone(t *testing.T) {
	in := []Instance{{ID: "a", Metadata: map[string]string{"k": "v"}, Tags: []string{"t"}}, {ID: "b"}, {ID: "c"}}
	s := Snapshot{Instances: in}
	if got, ok := s.Find("b"); !ok || got.ID != "b" {
		t.Errorf("Find(b) = %v %v", got, ok)
	}
	if _, ok := s.Find("zz"); ok {
		t.Error("Find(zz) found something")
	}
	c := in[0].Clone()
	c.Metadata["k"] = "changed"
	c.Tags[0] = "changed"
	if in[0].Metadata["k"] != "v" || in[0].Tags[0] != "t" {
		t.Error("Clone shares maps or slices with the original")
	}
	if !in[0].Equal(in[0].Clone()) {
		t.Error("an instance is not Equal to its clone")
	}
}

// A one-port instance serves every name; an instance that named its
// primary serves only the names it announced.
func TestEndpointByName(t *testing.T) {
	legacy := Instance{Address: "10.0.0.1:80"}
	named := Instance{Address: "10.0.0.1:80", Endpoints: []Endpoint{
		{Name: "http", Address: "10.0.0.1:80", Protocol: "http"},
		{Name: "grpc", Address: "10.0.0.1:90", Protocol: "grpc"},
	}}
	extra := Instance{Address: "10.0.0.1:80", Endpoints: []Endpoint{{Name: "metrics", Address: "10.0.0.1:9100"}}}
	for _, c := range []struct {
		in   Instance
		name string
		want string // "" when no endpoint is served
	}{
		{legacy, "", "10.0.0.1:80"},
		{legacy, "grpc", "10.0.0.1:80"},
		{named, "", "10.0.0.1:80"},
		{named, "http", "10.0.0.1:80"},
		{named, "grpc", "10.0.0.1:90"},
		{named, "metrics", ""},
		{extra, "metrics", "10.0.0.1:9100"},
		{extra, "http", "10.0.0.1:80"},
	} {
		got, ok := c.in.Endpoint(c.name)
		if (c.want == "") == ok || got.Address != c.want {
			t.Errorf("%v.Endpoint(%q) = %+v, %v; want %q", c.in.Endpoints, c.name, got, ok, c.want)
		}
	}
	c := named.Clone()
	c.Endpoints[0].Address = "changed"
	if named.Endpoints[0].Address != "10.0.0.1:80" || named.Equal(c) {
		t.Error("Clone shares Endpoints with the original, or Equal ignores them")
	}
}

func BenchmarkEndpoint(b *testing.B) {
	in := Instance{Address: "10.0.0.1:80", Endpoints: []Endpoint{
		{Name: "http", Address: "10.0.0.1:80"}, {Name: "grpc", Address: "10.0.0.1:90"}, {Name: "metrics", Address: "10.0.0.1:9100"},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := in.Endpoint("grpc"); !ok {
			b.Fatal("no grpc")
		}
	}
}
