//go:build tools

// Package tools names the helm command so `go mod tidy` records what it needs.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
