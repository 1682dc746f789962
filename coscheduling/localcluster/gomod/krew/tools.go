//go:build tools

// Package tools names the krew command so `go mod tidy` records what it needs.
package tools

import _ "sigs.k8s.io/krew/cmd/krew"
