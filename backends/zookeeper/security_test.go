package zookeeper_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roster-go/roster/backends/zookeeper"
	"github.com/roster-go/roster/internal/servers/zktest"
	"github.com/roster-go/roster/registry"
)

// freshRoot returns a root of one segment no other test or run uses.
func freshRoot(t *testing.T, name string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "/" + name + "-" + hex.EncodeToString(b)
}

// TestNestedRootRefused: a root whose segment below the first could be a
// service name would be a service of the outer root, sharing its
// namespace; Open refuses it, naming the root, and accepts the spellings
// no service can have.
func TestNestedRootRefused(t *testing.T) {
	outer := freshRoot(t, "nest")
	for _, root := range []string{outer + "/b", outer + "/_x/tenant-b", "/apps/roster"} {
		r, err := registry.Open(t.Context(), "zk://"+shared.Addr()+root)
		if err == nil {
			r.Close()
			t.Fatalf("%s: opened, want ErrInvalid", root)
		}
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), "root") {
			t.Fatalf("%s: %v, want ErrInvalid naming the root", root, err)
		}
	}
	for _, root := range []string{outer + "/_b", outer + "/Payments", outer + "/_x/Y"} {
		open(t, "zk://"+shared.Addr()+root)
	}
	// Roots that share a prefix of characters are siblings: znode paths
	// go by segments.
	a, ab := open(t, "zk://"+shared.Addr()+outer), open(t, "zk://"+shared.Addr()+outer+"-b")
	if _, err := a.Register(t.Context(), registry.Instance{Service: "svc", Address: "10.0.0.1:80"}); err != nil {
		t.Fatal(err)
	}
	svcs, err := ab.Services(t.Context())
	if snap, lerr := ab.Lookup(t.Context(), "svc"); err != nil || lerr != nil || len(svcs) != 0 || len(snap.Instances) != 0 {
		t.Fatalf("root %s-b sees %v, %v (%v, %v) of root %s", outer, svcs, snap.Instances, err, lerr, outer)
	}
	if snap, err := a.Lookup(t.Context(), "svc"); err != nil || len(snap.Instances) != 1 {
		t.Fatalf("root %s: %v, %v", outer, snap.Instances, err)
	}
}

// TestPasswordOutsideURL: the digest password comes from the URL, from
// password_file or from $ROSTER_ZOOKEEPER_PASSWORD, first found, and is
// never shown in an error.
func TestPasswordOutsideURL(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(zookeeper.EnvPassword, "from-env")
	for in, want := range map[string]string{
		"zk://alice:in-url@h/r":                    "in-url",
		"zk://alice@h/r?password_file=" + file:     "from-file",
		"zk://alice@h/r":                           "from-env",
		"zk://h/r":                                 "", // no user: the variable is not read
		"zk://alice:in-url@h/r?session_timeout=3s": "in-url",
	} {
		u, _ := url.Parse(in)
		o, err := zookeeper.ParseURL(u)
		if err != nil || o.Password != want {
			t.Errorf("%s: password %q, %v; want %q", in, o.Password, err, want)
		}
	}
	for in, field := range map[string]string{
		"zk://alice:in-url@h/r?password_file=" + file: "password given twice",
		"zk://alice@h/r?password=hunter2":             "option password",
		"zk://h/r?password_file=" + file:              "needs a user name",
		"zk://alice@h/r?password_file=/nonexistent":   "password_file",
	} {
		u, _ := url.Parse(in)
		_, err := zookeeper.ParseURL(u)
		if !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), field) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want ErrInvalid naming %q", in, err, field)
		}
	}
	t.Setenv(zookeeper.EnvPassword, "")
	u, _ := url.Parse("zk://alice@h/r")
	if _, err := zookeeper.ParseURL(u); !errors.Is(err, registry.ErrInvalid) || !strings.Contains(err.Error(), zookeeper.EnvPassword) {
		t.Errorf("user without a password: %v, want ErrInvalid naming %s", err, zookeeper.EnvPassword)
	}
}

// TestDigestACL: with credentials from a file, the driver's znodes carry
// the ACL auth:all + world:read. Another digest identity (its password
// from the environment) reads them but cannot delete, overwrite or add
// to them, with a raw client or through Roster; refusals are ErrInvalid.
func TestDigestACL(t *testing.T) {
	root := freshRoot(t, "acl")
	file := filepath.Join(t.TempDir(), "alice")
	if err := os.WriteFile(file, []byte("alice-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	alice := open(t, "zk://alice@"+shared.Addr()+root+"?password_file="+url.QueryEscape(file))
	l, err := alice.Register(t.Context(), registry.Instance{Service: "pay", Address: "10.0.0.1:80"})
	if err != nil {
		t.Fatal(err)
	}
	in := l.Instance()
	node := root + "/pay/" + in.ID
	raw := rawClient(t, "mallory:mallory-pw")
	acl, _, err := raw.GetACL(node)
	if err != nil {
		t.Fatal(err)
	}
	// The server shows another identity's digest hash as "x".
	if len(acl) != 2 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "alice:") || acl[0].Perms != zk.PermAll ||
		acl[1] != zk.WorldACL(zk.PermRead)[0] {
		t.Fatalf("ACL of %s = %v, want alice's digest with every permission, and world:read", node, acl)
	}
	if err := raw.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("delete by another identity: %v, want %v", err, zk.ErrNoAuth)
	}
	if _, err := raw.Set(node, []byte(`{}`), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("overwrite by another identity: %v, want %v", err, zk.ErrNoAuth)
	}
	if _, err := raw.Create(root+"/pay/fake", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("create beside it by another identity: %v, want %v", err, zk.ErrNoAuth)
	}
	t.Setenv(zookeeper.EnvPassword, "mallory-pw")
	mallory := open(t, "zk://mallory@"+shared.Addr()+root)
	fake := in
	fake.Address = "10.6.6.6:80"
	_, err = mallory.Register(t.Context(), fake) // same service and ID: a replace
	if !errors.Is(err, registry.ErrInvalid) || strings.Contains(err.Error(), "mallory-pw") {
		t.Fatalf("replace by another identity: %v, want ErrInvalid without the password", err)
	}
	eventually(t, 2*time.Second, "alice's instance intact, readable by mallory", func() (bool, string) {
		s, err := mallory.Lookup(t.Context(), "pay")
		return err == nil && len(s.Instances) == 1 && s.Instances[0].Address == in.Address, fmt.Sprint(s.Instances, err)
	})
}

// TestRootCreatedByOperator: an operator creates the root, with an ACL
// for the driver's identity only, under a parent the driver may not
// write; the driver works in it (it checks that a parent exists before
// creating it: the server refuses a create under a parent without CREATE
// permission even when the node exists).
func TestRootCreatedByOperator(t *testing.T) {
	parent := freshRoot(t, "ops")
	root := parent + "/_roster"
	op := rawClient(t, "operator:op-pw")
	opACL := append(zk.DigestACL(zk.PermAll, "operator", "op-pw"), zk.WorldACL(zk.PermRead)...)
	if _, err := op.Create(parent, nil, 0, opACL); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Create(root, nil, 0, append(zk.DigestACL(zk.PermAll, "alice", "alice-pw"), zk.WorldACL(zk.PermRead)...)); err != nil {
		t.Fatal(err)
	}
	alice := open(t, "zk://alice:alice-pw@"+shared.Addr()+root)
	if _, err := alice.Register(t.Context(), registry.Instance{Service: "pay", Address: "10.0.0.1:80"}); err != nil {
		t.Fatalf("register in the operator's root: %v", err)
	}
	bob := open(t, "zk://bob:bob-pw@"+shared.Addr()+root)
	if _, err := bob.Register(t.Context(), registry.Instance{Service: "other", Address: "10.0.0.1:80"}); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("register by an identity the root does not admit: %v, want ErrInvalid", err)
	}
}

// rawClient is a client with digest credentials cred ("user:password"),
// acting behind the driver's back.
func rawClient(t *testing.T, cred string) *zk.Conn {
	t.Helper()
	c, err := zktest.Connect(t.Context(), shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.AddAuth("digest", []byte(cred)); err != nil {
		t.Fatal(err)
	}
	return c
}
