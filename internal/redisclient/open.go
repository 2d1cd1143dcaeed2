package redisclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/rueidis"
)

// Clients are the open clients: Main, and PerSecond when REDIS_PERSECOND
// is set (nil otherwise).
type Clients struct {
	Main      rueidis.Client
	PerSecond rueidis.Client

	mainConns, perSecondConns *connCount
}

// Close closes both clients, waiting for their calls in flight.
func (c *Clients) Close() {
	if c.PerSecond != nil {
		c.PerSecond.Close()
	}
	c.Main.Close()
}

// Connected reports whether each client holds at least one open
// connection to a Redis node (sentinels not counted), for
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: envoyproxy/ratelimit fails its
// health check while a pool has none.
func (c *Clients) Connected() bool {
	if c.mainConns.n.Load() <= 0 {
		return false
	}
	return c.PerSecond == nil || c.perSecondConns.n.Load() > 0
}

// OpenConnections returns the number of open connections of both clients
// to Redis nodes.
func (c *Clients) OpenConnections() int64 {
	n := c.mainConns.n.Load()
	if c.perSecondConns != nil {
		n += c.perSecondConns.n.Load()
	}
	return n
}

// Open builds both clients' options (a setting that is wrong, or a TLS
// file that does not load, is an error at once, naming the setting), then
// connects each, retrying as o.Startup says until it connects, ctx ends
// or MaxElapsed has passed. rueidis connects at once: a single Redis
// answers HELLO, a cluster's seed its slots, the sentinels the master's
// address.
func Open(ctx context.Context, o Options) (*Clients, error) {
	var cfg *tls.Config
	if o.Main.UsesTLS() || o.PerSecond != nil && o.PerSecond.UsesTLS() {
		c, err := o.TLS.Config()
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	cs := &Clients{mainConns: &connCount{}}
	mainOpt, err := o.Main.option(cfg, cs.mainConns)
	if err != nil {
		return nil, err
	}
	var psOpt rueidis.ClientOption
	if o.PerSecond != nil {
		cs.perSecondConns = &connCount{}
		if psOpt, err = o.PerSecond.option(cfg, cs.perSecondConns); err != nil {
			return nil, err
		}
	}
	if cs.Main, err = o.connect(ctx, o.Main, mainOpt); err != nil {
		return nil, err
	}
	if o.PerSecond != nil {
		if cs.PerSecond, err = o.connect(ctx, *o.PerSecond, psOpt); err != nil {
			cs.Main.Close()
			return nil, err
		}
	}
	return cs, nil
}

// connect opens one client, retrying with backoff.
func (o Options) connect(ctx context.Context, t Target, opt rueidis.ClientOption) (rueidis.Client, error) {
	newClient := o.newClient
	if newClient == nil {
		newClient = rueidis.NewClient
	}
	start := time.Now()
	wait := max(o.Startup.Initial, time.Millisecond)
	longest := o.Startup.Max
	if longest <= 0 {
		longest = DefaultStartupMaxInterval
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		c, err := newClient(opt)
		if err == nil {
			return c, nil
		}
		if c != nil {
			c.Close() // a forced single client is returned with its failed dial
		}
		elapsed := time.Since(start)
		if o.Startup.MaxElapsed > 0 && elapsed >= o.Startup.MaxElapsed {
			return nil, fmt.Errorf("%s: not reachable after %s: %w", t, elapsed.Round(time.Millisecond), err)
		}
		d := wait/2 + rand.N(wait/2+1) // jittered down by up to half
		if o.OnRetry != nil {
			o.OnRetry(t.String(), err, d)
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%s: %w (last error: %w)", t, ctx.Err(), err)
		case <-timer.C:
		}
		wait = min(2*wait, max(longest, wait))
	}
}
