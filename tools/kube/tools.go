//go:build tools

// Package kube pins the kube-apiserver and kube-controller-manager
// (v1.34.2, Apache-2.0) that the Kubernetes backend's tests run against.
// It is its own module so that Kubernetes' dependencies never enter the
// library's go.mod; scripts/test.sh builds both once into a cache outside
// the repository, the controller manager second so that it reuses the
// apiserver's build cache (gen-gomod.sh explains the replace block).
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
