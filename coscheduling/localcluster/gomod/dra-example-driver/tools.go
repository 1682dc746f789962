//go:build tools

// Package tools names the program this module builds: the kubelet plugin of Kubernetes'
// DRA example driver, run by the local real nodes as a host process so that pods on them
// can claim its (simulated) GPUs. `go mod tidy` records every module it needs in go.sum.
package tools

import (
	_ "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"
)
