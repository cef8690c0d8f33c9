package rdma

import "log/slog"

// DeviceConfig selects and configures a device when it is opened. Each
// provider reads the fields that concern it and ignores the rest.
type DeviceConfig struct {
	// Device names the device to open ("rxe0", "mlx5_0"); empty picks
	// the first one with an active port.
	Device string
	// Port is the port number (verbs; 0 means 1).
	Port uint8
	// GIDIndex selects the port's GID for RoCE and rxe; AutoGID (any
	// negative value) chooses a RoCE v2 GID of an IPv4 address, else
	// IPv6, automatically. The zero value is index 0, which on RoCE ports
	// is usually a RoCE v1 or link-local GID: pass AutoGID unless an
	// operator named an index.
	GIDIndex int
	// Addr is where the soft provider's NIC listens, host:port
	// (default 127.0.0.1:0).
	Addr string
	// Logger receives the provider's diagnostics (default: discard).
	Logger *slog.Logger
}

// AutoGID asks the provider to choose the GID (DeviceConfig.GIDIndex).
const AutoGID = -1
