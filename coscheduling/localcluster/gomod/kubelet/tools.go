//go:build tools

// Package tools names the program this module builds (the kubelet of the local real
// nodes), so that `go mod tidy` records every module it needs in go.sum. It is one minor
// release behind the default control plane on purpose: the kubelet of 1.37 needs
// containerd 2.x, while this one runs over Debian's containerd 1.6 (the skew policy lets a
// kubelet be up to three minor releases older than its API server).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
