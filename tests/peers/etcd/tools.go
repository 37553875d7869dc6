//go:build tools

// The etcd server's main package, required so that `go build go.etcd.io/etcd/server/v3` builds it.
package tools

import _ "go.etcd.io/etcd/server/v3"
