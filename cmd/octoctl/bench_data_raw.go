package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
	"github.com/octofs/octofs/rdma/rpc"
)

// rawData is the baseline's own way to the cluster, apart from the
// client's: a device of the same provider, an RPC pool and a data engine
// used only for dpclient.Baseline, which reads and writes a file's blocks
// with bare one-sided operations.
type rawData struct {
	maps *cluster.RemoteMap
	dev  rdma.Device
	pd   rdma.PD
	pool *rpc.Pool
	e    *dpclient.Engine
}

// openRawData connects the baseline to the cluster.
func openRawData(ctx context.Context, admin []string, token, providerName string) (r *rawData, err error) {
	r = &rawData{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.maps, err = cluster.WatchRemote(ctx, cluster.NewAdminClient(admin, token, nil), 0, nil); err != nil {
		return nil, fmt.Errorf("baseline: follow the cluster map: %w", err)
	}
	cfg := rdma.DeviceConfig{}
	if providerName == "" || providerName == "soft" {
		cfg.Addr = localAddrFor(admin[0])
	}
	if r.dev, err = provider.Open(providerName, cfg); err != nil {
		return nil, fmt.Errorf("baseline: open the RDMA device: %w", err)
	}
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return nil, err
	}
	id, inc := dataplane.RandomID(), dataplane.RandomID()
	hello, err := dataplane.EncodeHello(dataplane.Hello{Purpose: dataplane.PurposeRPC, Token: token, ClientID: id, Incarnation: inc,
		Client: "octoctl bench data (raw baseline)"})
	if err != nil {
		return nil, err
	}
	if r.pool, err = rpc.NewPool(rpc.PoolConfig{PD: r.pd, Client: rpc.ClientConfig{Device: r.dev, PrivateData: hello}}); err != nil {
		return nil, err
	}
	r.e, err = dpclient.New(dpclient.Config{Device: r.dev, Map: r.maps, RPC: rawCaller{r.pool}, Token: func() string { return token },
		ClientID: id, Incarnation: inc, Name: "octoctl bench data (raw baseline)"})
	if err != nil {
		return nil, err
	}
	return r, nil
}

type rawCaller struct{ pool *rpc.Pool }

func (c rawCaller) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	if node.RDMAAddr == "" {
		return nil, fmt.Errorf("node %s has no RDMA address in the map", node.ID)
	}
	return c.pool.Call(ctx, node.RDMAAddr, op, dataplane.RandomID(), req)
}

func (r *rawData) close() error {
	var errs []error
	if r.e != nil {
		errs = append(errs, r.e.Close())
	}
	if r.pool != nil {
		errs = append(errs, r.pool.Close())
	}
	if r.pd != nil {
		errs = append(errs, r.pd.Close())
	}
	if r.dev != nil {
		errs = append(errs, r.dev.Close())
	}
	if r.maps != nil {
		r.maps.Close()
	}
	return errors.Join(errs...)
}

// localAddrFor picks the soft NIC's address: the local address that
// routes to the admin host (nodes must reach it), any port.
func localAddrFor(admin string) string {
	hostport := strings.TrimPrefix(strings.TrimPrefix(admin, "https://"), "http://")
	if i := strings.IndexByte(hostport, '/'); i >= 0 {
		hostport = hostport[:i]
	}
	conn, err := net.Dial("udp", hostport) // sends nothing: asks the kernel for a route
	if err != nil {
		return ""
	}
	defer conn.Close()
	return net.JoinHostPort(conn.LocalAddr().(*net.UDPAddr).IP.String(), "0")
}
