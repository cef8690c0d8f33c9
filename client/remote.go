package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/rdma/provider"
)

// connect follows the cluster map, opens the RDMA device and builds the
// namespace and data backends on them.
func (c *Client) connect(ctx context.Context) error {
	admin := cluster.NewAdminClient(c.cfg.Admin, c.cfg.Token, c.cfg.AdminTLS)
	maps, err := cluster.WatchRemote(ctx, admin, c.cfg.WatchWait, c.log)
	if err != nil {
		return fmt.Errorf("%w: no admin API of %v answered: %v (check the addresses and that the nodes run)", ErrUnavailable, c.cfg.Admin, err)
	}
	if !maps.Current().Initialized() {
		maps.Close()
		return fmt.Errorf("%w: the cluster has no map yet (wait for its first node to finish starting)", ErrUnavailable)
	}
	dev, err := provider.Open(c.cfg.Provider, c.cfg.Device)
	if err != nil {
		maps.Close()
		return fmt.Errorf("client: open the RDMA device: %w", err)
	}
	c.maps = maps
	// The namespace and data backends come with metadata/mdclient and the
	// dataplane client engine.
	dev.Close()
	maps.Close()
	return errors.Join(ErrUnavailable, errors.New("client: this build has no namespace client yet"))
}
