package redis_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	rredis "github.com/roster-go/roster/backends/redis"
	"github.com/roster-go/roster/registry"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url     string
		addrs   string
		db      int
		cluster bool
		master  string
		tls     bool
		layout  rredis.Layout
		prefix  string
	}{
		{url: "redis://127.0.0.1:6379", addrs: "127.0.0.1:6379", layout: "hash", prefix: "roster"},
		{url: "redis://[::1]", addrs: "[::1]:6379", layout: "hash", prefix: "roster"},
		{url: "redis://[::1]:7000/1", addrs: "[::1]:7000", db: 1, layout: "hash", prefix: "roster"},
		{url: "redis://:pw@h/3?layout=keys", addrs: "h:6379", db: 3, layout: "keys", prefix: "service"},
		{url: "redis://u:pw@h:1/0?layout=keys&prefix=svc&poll=250ms&notify=off", addrs: "h:1", layout: "keys", prefix: "svc"},
		{url: "rediss://h:6380?skip_verify=true", addrs: "h:6380", tls: true, layout: "hash", prefix: "roster"},
		{url: "redis://a:7000,b:7001,c:7002", addrs: "a:7000,b:7001,c:7002", cluster: true, layout: "hash", prefix: "roster"},
		{url: "redis+cluster://a:7000?addr=b:7001", addrs: "a:7000,b:7001", cluster: true, layout: "hash", prefix: "roster"},
		{url: "redis+sentinel://:pw@s1,s2:26380/2?master=mymaster&sentinel_password=x", addrs: "s1:26379,s2:26380", db: 2, master: "mymaster", layout: "hash", prefix: "roster"},
		{url: "redis://h?sweep=100ms&quiet=5s&maxlen=50&linger=2m&pool_size=4&dial_timeout=1s&read_timeout=2s&write_timeout=2s&client_name=x", addrs: "h:6379", layout: "hash", prefix: "roster"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		co, o, err := rredis.ParseURL(u)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if got := strings.Join(co.Addrs, ","); got != c.addrs || co.DB != c.db || co.IsClusterMode != c.cluster ||
			co.MasterName != c.master || (co.TLSConfig != nil) != c.tls || o.Layout != c.layout || o.Prefix != c.prefix {
			t.Errorf("%s: got addrs %s db %d cluster %v master %q tls %v layout %s prefix %s", c.url, got, co.DB,
				co.IsClusterMode, co.MasterName, co.TLSConfig != nil, o.Layout, o.Prefix)
		}
	}
}

func TestParseURLInvalid(t *testing.T) {
	for _, raw := range []string{
		"redis://:s3cret@h?layout=zset",
		"redis://:s3cret@h?bogus=1",
		"redis://:s3cret@h/x",
		"redis://:s3cret@h:99999",
		"redis+sentinel://:s3cret@h",
		"redis://:s3cret@h?master=m",
		"redis://:s3cret@a:1,b:2/1",
		"redis://:s3cret@h?poll=-1s",
		"redis://:s3cret@h?sweep=soon",
		"redis://:s3cret@h?linger=0s",
		"redis://:s3cret@h?linger=500us",
		"redis://:s3cret@h?linger=169h",
		"redis://:s3cret@h?skip_verify=true",
		"redis://:s3cret@h?prefix=a{b}",
		"redis://:s3cret@h?notify=maybe&layout=keys",
		"redis+raft://:s3cret@h",
	} {
		_, err := registry.Open(context.Background(), raw)
		if !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("Open(%s) = %v, want ErrInvalid", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s): error shows the password: %v", raw, err)
		}
	}
}

// An unreachable server is an ErrUnavailable, and its error does not show
// the password either.
func TestUnreachableIsUnavailable(t *testing.T) {
	r, err := registry.Open(context.Background(), "redis://:s3cret@127.0.0.1:1/0?dial_timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = r.Register(ctx, registry.Instance{Service: "svc", Address: "127.0.0.1:80"})
	if !errors.Is(err, registry.ErrUnavailable) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Register on a closed port = %v, want ErrUnavailable without the password", err)
	}
	_, err = r.Lookup(ctx, "svc")
	if !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("Lookup on a closed port = %v, want ErrUnavailable", err)
	}
}

// linger defaults to 5m and is taken from the URL.
func TestParseURLLinger(t *testing.T) {
	for raw, want := range map[string]time.Duration{"redis://h": 5 * time.Minute, "redis://h?linger=2m": 2 * time.Minute} {
		u, _ := url.Parse(raw)
		if _, o, err := rredis.ParseURL(u); err != nil || o.Linger != want {
			t.Errorf("%s: linger %v, %v; want %v", raw, o.Linger, err, want)
		}
	}
}
