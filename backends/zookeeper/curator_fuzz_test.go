package zookeeper

import (
	"os"
	"testing"

	"github.com/roster-go/roster/registry/driver"
)

// FuzzDecodeCurator: any bytes in a Curator znode decode to an instance
// or to nothing, never a panic; what encodeCurator writes reads back.
func FuzzDecodeCurator(f *testing.F) {
	spring, _ := os.ReadFile("testdata/curator/spring-instance.json")
	f.Add(spring)
	for _, payload := range []string{PayloadSpring, PayloadMap} {
		b, err := encodeCurator(driver.Instance{Service: "s", ID: "i", Address: "10.0.0.1:80", Weight: 7, Tags: []string{"t"}}, payload)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"i","address":"h","port":0}`))
	f.Add([]byte(`{"id":"i","address":"h","sslPort":443,"payload":{"metadata":{"roster.instance":"{\"weight\":5}"}}}`))
	f.Fuzz(func(t *testing.T, val []byte) {
		in, ok := decodeCurator("s", "i", val)
		if ok && (in.Service != "s" || in.ID != "i" || in.Address == "") {
			t.Fatalf("decoded %+v", in)
		}
	})
}

func TestCuratorRoundTrip(t *testing.T) {
	want := driver.Instance{Service: "s", ID: "i", Address: "[::1]:80", Version: "v", Zone: "z", Weight: 7,
		Tags: []string{"t"}, Metadata: map[string]string{"k": "v"}, Endpoints: []driver.Endpoint{{Name: "grpc", Address: "[::1]:80"}}}
	for _, payload := range []string{PayloadSpring, PayloadMap} {
		b, err := encodeCurator(want, payload)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeCurator("s", "i", b)
		if !ok || !got.Equal(want) {
			t.Fatalf("%s: round trip = %+v, %v; want %+v\n%s", payload, got, ok, want, b)
		}
	}
}
