package admin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/dynalimit/dynalimit/internal/admin"
	"github.com/dynalimit/dynalimit/internal/admintest"
	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// redisServer starts a redis-server for t and returns a client of it.
func redisServer(t *testing.T) rueidis.Client {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// settable is a test's clock.
type settable struct {
	mu  sync.Mutex
	now time.Time
}

func (c *settable) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *settable) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// redisCluster starts a cluster of three masters for t and returns a
// client of it.
func redisCluster(t *testing.T) rueidis.Client {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 0, redistest.Options{})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Seeds(), DisableCache: true})
	if err != nil {
		t.Fatalf("cluster client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestRedis runs the operator's suite on a redis-server and on a cluster
// of three masters: every job (buckets, entities and stored limits, audit
// records, the namespace registry and lifecycle, usage). Usage is learnt
// as the service's decisions count it: an admitted decision at the time
// the suite names.
func TestRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) { runRedisSuite(t, redisServer(t)) })
	t.Run("cluster", func(t *testing.T) { runRedisSuite(t, redisCluster(t)) })
}

// runRedisSuite runs the operator's suite on stores on c, one per
// scenario.
func runRedisSuite(t *testing.T, c rueidis.Client) {
	admintest.Run(t, func(t *testing.T, ns string) admintest.Store {
		clock := &settable{now: time.Now()}
		st := redisstore.New(c, redisstore.Config{Namespace: ns, Timeout: time.Second, Now: clock.Now, UsageRetention: 2 * 365 * 24 * time.Hour})
		t.Cleanup(func() { _ = st.Close() })
		log, _ := test.NewNullLogger()
		var latest time.Time
		return admintest.Store{
			Stores:     admin.Redis(st, ns, logrus.NewEntry(log)),
			Implements: admin.Jobs,
			Acquire:    st.Acquire,
			AddUsage: func(ctx context.Context, ns, entity, resource, limit string, at time.Time, mt int64) error {
				clock.set(at)
				l, err := tokenbucket.Rate(1_000_000, time.Hour, 0)
				if err != nil {
					return err
				}
				d := cascade.Debit{Key: cascade.Key{Namespace: ns, Entity: entity, Resource: resource}, Limit: limit, Bucket: l, Amount: tokenbucket.Millitokens(mt), Op: cascade.Consume}
				dec, err := st.Acquire(ctx, &cascade.Plan{Debits: []cascade.Debit{d}})
				if err == nil && !dec.Admitted {
					err = fmt.Errorf("%d millitokens of %s refused", mt, limit)
				}
				if at.After(latest) {
					latest = at
				}
				clock.set(latest) // the suite's reads see every window it wrote
				return err
			},
		}
	})
}
