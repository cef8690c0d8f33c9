// Package provider opens RDMA devices by provider name. It is the one place
// that knows which providers this binary was built with: the pure-Go soft
// provider always, the cgo verbs provider with the verbs build tag.
package provider

import (
	"fmt"
	"sort"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// Default is the provider used when none is named.
const Default = "soft"

type openFunc func(cfg rdma.DeviceConfig) (rdma.Device, error)

// providers is fixed at build time: soft here, verbs in verbs.go when built.
var providers = map[string]openFunc{
	"soft": func(cfg rdma.DeviceConfig) (rdma.Device, error) {
		d, err := soft.Open(cfg)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return d, nil
	},
}

// Open opens a device of the named provider ("" means Default).
func Open(name string, cfg rdma.DeviceConfig) (rdma.Device, error) {
	if name == "" {
		name = Default
	}
	open, ok := providers[name]
	if !ok {
		return nil, fmt.Errorf("%w: provider %q is not built into this binary (have %v)", rdma.ErrNoDevice, name, Names())
	}
	return open(cfg)
}

// Names lists the providers built into this binary.
func Names() []string {
	var names []string
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
