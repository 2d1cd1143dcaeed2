package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
)

// listener names one of the server's listeners and the settings that move
// it, for errors a user can act on.
type listener struct {
	name    string // as a user would say it
	setting string // the variable and flag that move it
}

var (
	grpcListener  = listener{"gRPC listener", "GRPC_PORT or -grpc_port (GRPC_HOST or -grpc_host for the address)"}
	udsListener   = listener{"gRPC unix socket", "GRPC_UDS or -grpc_uds"}
	httpListener  = listener{"HTTP listener", "PORT or -port (HOST or -host for the address)"}
	debugListener = listener{"debug listener", "DEBUG_PORT or -debug_port (DEBUG_HOST or -debug_host for the address)"}
	promListener  = listener{"Prometheus listener (USE_PROMETHEUS)", "PROMETHEUS_ADDR or -prometheus_addr"}
)

// listenError says which listener could not bind addr and which setting
// moves it: "server: gRPC listener 0.0.0.0:8081: address already in use (is
// another ratelimit running? set GRPC_PORT or -grpc_port to move it)". It
// wraps err.
func listenError(l listener, addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return &bindError{fmt.Sprintf("server: %s %s: address already in use (is another ratelimit running? set %s to move it)", l.name, addr, l.setting), err}
	case errors.Is(err, syscall.EACCES):
		return &bindError{fmt.Sprintf("server: %s %s: permission denied (a port below 1024 needs privileges; set %s to move it)", l.name, addr, l.setting), err}
	}
	return &bindError{fmt.Sprintf("server: %s %s: %v (check %s)", l.name, addr, err, l.setting), err}
}

// bindError is a listener's bind failure, said in a user's terms; it
// wraps the system's error.
type bindError struct {
	msg string
	err error
}

func (e *bindError) Error() string { return e.msg }
func (e *bindError) Unwrap() error { return e.err }

// listenGRPC binds gRPC on the unix socket GRPCUDS when set, replacing a
// stale socket file left by a process that did not remove it, else on TCP
// GRPCAddr. A path holding anything but a socket is left alone and is an
// error.
func listenGRPC(o Options) (net.Listener, error) {
	if o.GRPCUDS == "" {
		l, err := net.Listen("tcp", o.GRPCAddr)
		if err != nil {
			return nil, listenError(grpcListener, o.GRPCAddr, err)
		}
		return l, nil
	}
	if fi, err := os.Lstat(o.GRPCUDS); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("server: listen grpc unix %s: exists and is not a socket", o.GRPCUDS)
		}
		if c, err := net.Dial("unix", o.GRPCUDS); err == nil {
			_ = c.Close()
			return nil, listenError(udsListener, o.GRPCUDS, syscall.EADDRINUSE)
		}
		if err := os.Remove(o.GRPCUDS); err != nil {
			return nil, fmt.Errorf("server: listen grpc unix %s: remove stale socket: %w", o.GRPCUDS, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("server: listen grpc unix %s: %w", o.GRPCUDS, err)
	}
	l, err := net.Listen("unix", o.GRPCUDS)
	if err != nil {
		return nil, listenError(udsListener, o.GRPCUDS, err)
	}
	return l, nil // the listener removes the socket file when closed
}
