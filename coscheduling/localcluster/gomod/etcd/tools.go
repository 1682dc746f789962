//go:build tools

// Package tools names the etcd server program so `go mod tidy` records what it needs.
package tools

import _ "go.etcd.io/etcd/server/v3"
