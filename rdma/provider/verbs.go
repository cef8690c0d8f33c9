//go:build verbs && cgo

package provider

import "github.com/octofs/octofs/rdma/verbs"

// The verbs provider (libibverbs, cgo) exists only in binaries built with
// the verbs tag: go build -tags verbs.
func init() {
	providers[verbs.ProviderName] = verbs.Open
}
