//go:build tools

// Package tools names the program this module builds (kube-scheduler with the
// scheduler-plugins plugins compiled in), so `go mod tidy` records every module it needs.
package tools

import (
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
