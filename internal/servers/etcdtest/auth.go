package etcdtest

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Auth turns on etcd authentication once a cluster is up (and again after
// a wipe): a root user, which Client logs in as, and users each with a
// role of its own.
type Auth struct {
	RootPassword string
	Users        []User
}

// User is an etcd user whose role of the same name may read, or read and
// write, the keys starting with Prefix — and nothing else.
type User struct {
	Name, Password string
	Prefix         string
	ReadOnly       bool
}

// enableAuth creates the users and roles of c.cfg.Auth and turns
// authentication on, once per data generation.
func (c *Cluster) enableAuth(ctx context.Context) error {
	a := c.cfg.Auth
	if a == nil || c.authGen == c.gen+1 {
		return nil
	}
	cli, err := c.client(false)
	if err != nil {
		return err
	}
	defer cli.Close()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", a.RootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
	}
	for _, u := range a.Users {
		perm := clientv3.PermissionType(clientv3.PermReadWrite)
		if u.ReadOnly {
			perm = clientv3.PermissionType(clientv3.PermRead)
		}
		steps = append(steps,
			func() error { _, err := cli.RoleAdd(ctx, u.Name); return err },
			func() error {
				_, err := cli.RoleGrantPermission(ctx, u.Name, u.Prefix, clientv3.GetPrefixRangeEnd(u.Prefix), perm)
				return err
			},
			func() error { _, err := cli.UserAdd(ctx, u.Name, u.Password); return err },
			func() error { _, err := cli.UserGrantRole(ctx, u.Name, u.Name); return err })
	}
	steps = append(steps, func() error { _, err := cli.AuthEnable(ctx); return err })
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("etcdtest: enable auth: %w", err)
		}
	}
	c.authGen = c.gen + 1
	return nil
}
