package backend_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/roster-go/roster/internal/backend"

	"github.com/roster-go/roster/registry/driver"
)

func TestParseSchemeQuery(t *testing.T) {
	for raw, wantErr := range map[string]string{
		"zk://h/x?a=1":   "",
		"ZKS://h/x":      "",
		"etcd://h":       `scheme "etcd": want zk or zks`,
		"zk://h?a=1&a=2": "given 2 times",
		"zk:h":           `"//" is missing`,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = backend.ParseSchemeQuery("zookeeper", u, "zk", "zks")
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case wantErr != "" && (!errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: error %v, want ErrInvalid with %q", raw, err, wantErr)
		}
	}
}

type fakeDriver struct{ driver.Driver }

func TestOpenWith(t *testing.T) {
	parse := func(u *url.URL) (string, error) {
		if u.Host == "" {
			return "", backend.InvalidURL("test", "no host")
		}
		return u.Host, nil
	}
	errNew := errors.New("cannot construct")
	open := backend.OpenWith(parse, func(host string) (*fakeDriver, error) {
		if host == "bad" {
			return nil, errNew
		}
		return &fakeDriver{}, nil
	})
	for raw, want := range map[string]error{"t://ok": nil, "t:///": driver.ErrInvalid, "t://bad": errNew} {
		u, _ := url.Parse(raw)
		d, err := open(context.Background(), u)
		if !errors.Is(err, want) || (err == nil) != (want == nil) {
			t.Errorf("%s: error %v, want %v", raw, err, want)
		}
		// A failed open must return a nil interface, not a typed nil.
		if (d == nil) != (want != nil) {
			t.Errorf("%s: driver %#v with error %v", raw, d, err)
		}
	}
}
