package redisclient

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync"
	"sync/atomic"
)

// connCount counts the open connections of one client to its nodes (the
// sentinels' are left out).
type connCount struct{ n atomic.Int64 }

// dialFunc returns the rueidis DialCtxFn: it dials network socket (tcp or
// unix) with the dialer rueidis passes (the nodes' or the sentinels'),
// within ctx and the dialer's timeout, then TLS when rueidis passes a
// configuration, named after the address dialled unless it names a
// server itself; count, when not nil, counts the connections to any
// address but the sentinels.
func dialFunc(socket string, count *connCount, sentinels []string) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		conn, err := d.DialContext(ctx, socket, dst)
		if err != nil {
			return nil, err
		}
		if count != nil && !slices.Contains(sentinels, dst) {
			count.n.Add(1)
			conn = &countedConn{Conn: conn, count: count}
		}
		if cfg == nil {
			return conn, nil
		}
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			if host, _, err := net.SplitHostPort(dst); err == nil {
				cfg.ServerName = host
			}
		}
		if d.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d.Timeout)
			defer cancel()
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return tc, nil
	}
}

// countedConn takes itself off its count when first closed.
type countedConn struct {
	net.Conn
	count *connCount
	once  sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.count.n.Add(-1) })
	return c.Conn.Close()
}
