package main

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/adjust"
	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/metrics"
)

// leaseKeys returns the keyring that signs and verifies leases as s
// configures it, and, for a key file, the task that rereads it. Without a
// key it generates one, and warns when a domain uses adjustments (adjusted):
// leases then settle only on this replica, until it restarts. A service
// whose domains issue no leases has nothing to warn about.
func leaseKeys(s config.Settings, adjusted bool, log *logrus.Entry) (keys func() *lease.Keyring, reread func(context.Context) error, err error) {
	if s.LeaseSigningKeyFile != "" {
		ring, err := lease.OpenRing(s.LeaseSigningKeyFile)
		if err != nil {
			return nil, nil, err
		}
		reread = func(ctx context.Context) error {
			ring.Run(ctx, 0, func(k *lease.Keyring, err error) {
				if err != nil {
					log.WithError(err).Warn("lease key file not reloaded")
					return
				}
				log.WithField("key_id", k.KeyID()).Info("lease keys reloaded")
			})
			return nil
		}
		return ring.Load, reread, nil
	}
	k, generated, err := lease.FromSettings(s.LeaseSigningKey, s.LeasePreviousKeys(), "")
	if err != nil {
		return nil, nil, err
	}
	if generated && adjusted {
		log.Warn("no LEASE_SIGNING_KEY or LEASE_SIGNING_KEY_FILE: leases are signed with a key generated at start, " +
			"so they will not verify on another replica or after a restart; set one key on every replica (docs/leases.md)")
	}
	return func() *lease.Keyring { return k }, nil, nil
}

// newAdjuster is what issues and settles leases, on settler (the
// backend's).
func newAdjuster(s config.Settings, settler adjust.Settler, keys func() *lease.Keyring, m *metrics.Metrics, log *logrus.Entry) *adjust.Adjuster {
	return adjust.New(adjust.Options{
		Settler: settler,
		Keys:    keys,
		TTL:     s.LeaseTTL,
		Metrics: m,
		Log:     log,
	})
}
