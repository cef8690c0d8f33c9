package soft

import (
	"fmt"

	"github.com/octofs/octofs/rdma"
)

// Open opens a soft device. (Being written.)
func Open(cfg rdma.DeviceConfig) (rdma.Device, error) {
	return nil, fmt.Errorf("%w: soft provider under construction", rdma.ErrUnsupported)
}
