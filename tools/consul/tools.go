//go:build tools

// Package consul pins the Consul agent (v1.13.9, MPL-2.0) that the Consul
// backend's tests run against. It is its own module so that the agent's
// dependencies never enter the library's go.mod; scripts/test.sh builds it
// once into a cache outside the repository.
package consul

import _ "github.com/hashicorp/consul"
