package redisclient

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"
)

// Check reports what is wrong with the target's settings without touching
// the network or the file system (config.Settings.Validate calls it): the
// socket type, the type, the URL, the credentials, the sizes and
// durations. Its errors name the setting at fault.
func (t Target) Check() error {
	ep, err := t.parse()
	if err != nil {
		return err
	}
	if _, _, err := t.credentials(ep); err != nil {
		return err
	}
	if ep.socket == SocketUnix && t.TLS {
		return fmt.Errorf("%s_TLS=true: TLS is not spoken over a unix socket", t.prefix())
	}
	if t.PoolSize <= 0 {
		return fmt.Errorf("%s_POOL_SIZE=%d: want > 0", t.prefix(), t.PoolSize)
	}
	if t.PipelineWindow < 0 {
		return fmt.Errorf("%s_PIPELINE_WINDOW=%s: want a duration ≥ 0", t.prefix(), t.PipelineWindow)
	}
	if t.Timeout <= 0 {
		return fmt.Errorf("%s_TIMEOUT=%s: want a duration > 0", t.prefix(), t.Timeout)
	}
	return nil
}

// UsesTLS reports whether the target connects over TLS: _TLS, or a
// rediss:// URL.
func (t Target) UsesTLS() bool {
	ep, err := t.parse()
	return t.TLS || err == nil && ep.tls
}

// ClientOption builds the rueidis options of the target; it reads the TLS
// files when the target uses TLS. The package doc lists what each setting
// becomes.
func (t Target) ClientOption(files TLSFiles) (rueidis.ClientOption, error) {
	var cfg *tls.Config
	if t.UsesTLS() {
		c, err := files.Config()
		if err != nil {
			return rueidis.ClientOption{}, err
		}
		cfg = c
	}
	return t.option(cfg, nil)
}

// option builds the rueidis options with cfg as the TLS configuration (nil:
// none); count, when not nil, counts the connections to the nodes.
func (t Target) option(cfg *tls.Config, count *connCount) (rueidis.ClientOption, error) {
	if err := t.Check(); err != nil {
		return rueidis.ClientOption{}, err
	}
	ep, _ := t.parse()
	user, password, _ := t.credentials(ep)
	dialer := net.Dialer{Timeout: t.Timeout}
	opt := rueidis.ClientOption{
		InitAddress:       append([]string(nil), ep.addrs...),
		Username:          user,
		Password:          password,
		SelectDB:          ep.db,
		Dialer:            dialer,
		ConnWriteTimeout:  t.Timeout,
		BlockingPoolSize:  t.PoolSize,
		MaxFlushDelay:     t.PipelineWindow,
		DisableCache:      true,
		ForceSingleClient: ep.kind == TypeSingle,
	}
	if t.TLS || ep.tls {
		opt.TLSConfig = cfg
		if cfg == nil {
			opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	var sentinels []string
	if ep.kind == TypeSentinel {
		su, sp := splitAuth(t.SentinelAuth)
		opt.Sentinel = rueidis.SentinelOption{
			Dialer:    dialer,
			TLSConfig: opt.TLSConfig,
			MasterSet: ep.masterSet,
			Username:  su,
			Password:  sp,
			// Follow a failover even when the +switch-master message is
			// missed.
			TopologyRefreshInterval: sentinelRefresh,
		}
		sentinels = ep.addrs
	}
	opt.DialCtxFn = dialFunc(ep.socket, count, sentinels)
	return opt, nil
}

// sentinelRefresh is how often a sentinel client asks the sentinels for
// the master, besides following their announcements.
const sentinelRefresh = 5 * time.Second
