//go:build tools

// Package tools names the program this module builds: containerd 1.7 for the real nodes
// that run DRA pods. Debian 12's containerd 1.6 cannot inject CDI devices (its CRI plugin
// has no enable_cdi), so the devices a DRA driver prepares would never reach a container.
// `go mod tidy` records every module it needs in go.sum.
package tools

import (
	_ "github.com/containerd/containerd/cmd/containerd"
)
