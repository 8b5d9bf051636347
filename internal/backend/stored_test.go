package backend_test

import (
	"testing"

	"github.com/roster-go/roster/internal/backend"
)

func TestDecodeStored(t *testing.T) {
	in, ok := backend.DecodeStored("api", "i-1", []byte(`{"id":"other","service":"other","address":"10.0.0.1:80","weight":5}`))
	if !ok || in.ID != "i-1" || in.Service != "api" || in.Address != "10.0.0.1:80" || in.Weight != 5 {
		t.Errorf("DecodeStored = %+v, %v; want the key's service and ID over the stored ones", in, ok)
	}
	for _, bad := range []string{``, `{`, `null`, `{"weight":5}`, `[1]`} {
		if in, ok := backend.DecodeStored("api", "i-1", []byte(bad)); ok {
			t.Errorf("DecodeStored(%q) = %+v, true; want false", bad, in)
		}
	}
}
