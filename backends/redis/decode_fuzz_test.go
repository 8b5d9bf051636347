package redis

import (
	"net/url"
	"testing"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/internal/urlfuzz"
)

// FuzzDecodeArticle: a value of the keys layout, written by anyone who can
// write the database (the article's scripts, a foreign tool, an attacker
// with write access), never panics the reader; what it decodes is of the
// service listed, within the weight limit, and named by an ID. Whether it
// is served is the registry's read-back check.
func FuzzDecodeArticle(f *testing.F) {
	f.Add("api", "10.0.0.1:80", `{"addr":"10.0.0.1:80","weight":"100","version":"1.2","metadata":"roster_id=a,roster_tags=x|y,k=v"}`)
	f.Add("api", "10.0.0.1:80", `{"weight":1e300}`)
	f.Add("api", "10.0.0.1:80", `{"weight":100000}`) // past MaxWeight: read as MaxWeight
	f.Add("api", "h:1", `{"addr":12,"weight":-5,"metadata":",,=,roster_zone="}`)
	f.Add("api", "10.0.0.1:80", `{"addr":"10.0.0.1:80","endpoints":"grpc=10.0.0.1:90/grpc,=,x"}`)
	f.Fuzz(func(t *testing.T, service, addrFromKey, val string) {
		in, ok := decodeArticle(service, addrFromKey, val)
		if !ok {
			return
		}
		if in.Service != service || in.ID == "" || in.Address == "" || in.Weight > backend.MaxWeight {
			t.Fatalf("decodeArticle(%q, %q, %q) = %+v", service, addrFromKey, val, in)
		}
	})
}

// FuzzParseURL: any redis URL either gives options or is ErrInvalid;
// none panics.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, []string{"redis://:pw@127.0.0.1:6379/0?layout=keys&prefix=svc", "rediss://h?ca_file=/nonexistent",
		"redis+sentinel://:pw@h1,h2:26379/mymaster/0?sentinel_password=x", "redis+cluster://h1:7000,h2:7001", "redis://[::1]:0/99999"},
		func(u *url.URL) error { _, _, err := ParseURL(u); return err })
}
