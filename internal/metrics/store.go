package metrics

import "github.com/prometheus/client_golang/prometheus"

// StoreStats is what the embedded store reports at each scrape.
type StoreStats struct {
	// Buckets is the number of bucket limits held.
	Buckets int
	// Bytes is their approximate memory.
	Bytes int64
	// EvictedFull counts buckets dropped because they were full again.
	EvictedFull uint64
	// EvictedNotFull counts buckets evicted at the memory bound while they
	// held less than full.
	EvictedNotFull uint64
	// ForgivenMillitokens adds up what those buckets lacked of full: the
	// most their evictions can have admitted beyond the limits.
	ForgivenMillitokens uint64
}

// Label values of ratelimit_store_evictions_total's state label.
const (
	evictedFull    = "full"
	evictedNotFull = "not_full"
)

var (
	storeBucketsDesc = prometheus.NewDesc("ratelimit_store_buckets",
		"Bucket items held by the store.", nil, nil)
	storeBytesDesc = prometheus.NewDesc("ratelimit_store_memory_bytes",
		"Approximate memory held by the store's bucket items.", nil, nil)
	storeEvictionsDesc = prometheus.NewDesc("ratelimit_store_evictions_total",
		"Buckets the embedded store dropped, by state: full (nothing lost) or not_full (evicted at MEMORY_MAX_BYTES or MEMORY_MAX_BUCKETS, its deficit forgiven).", []string{"state"}, nil)
	storeForgivenDesc = prometheus.NewDesc("ratelimit_store_evicted_deficit_millitokens_total",
		"Millitokens the buckets evicted while not full lacked of full: the most those evictions can have admitted beyond the limits.", nil, nil)
)

// RegisterStoreStats makes f the source of ratelimit_store_buckets,
// ratelimit_store_memory_bytes, ratelimit_store_evictions_total and
// ratelimit_store_evicted_deficit_millitokens_total, called once per
// scrape. f must be safe for concurrent use and fast. A later call
// replaces f; a nil f reports zeros.
func (m *Metrics) RegisterStoreStats(f func() StoreStats) {
	if m == nil {
		return
	}
	m.storeStats.Store(&f)
	m.storeStatsReg.Do(func() {
		register(m.reg, storeCollector{m})
	})
}

func (m *Metrics) readStoreStats() StoreStats {
	f := m.storeStats.Load()
	if f == nil || *f == nil {
		return StoreStats{}
	}
	return (*f)()
}

// storeCollector reads the store's stats once per scrape.
type storeCollector struct{ m *Metrics }

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeBucketsDesc
	ch <- storeBytesDesc
	ch <- storeEvictionsDesc
	ch <- storeForgivenDesc
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.readStoreStats()
	ch <- prometheus.MustNewConstMetric(storeBucketsDesc, prometheus.GaugeValue, float64(st.Buckets))
	ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(storeEvictionsDesc, prometheus.CounterValue, float64(st.EvictedFull), evictedFull)
	ch <- prometheus.MustNewConstMetric(storeEvictionsDesc, prometheus.CounterValue, float64(st.EvictedNotFull), evictedNotFull)
	ch <- prometheus.MustNewConstMetric(storeForgivenDesc, prometheus.CounterValue, float64(st.ForgivenMillitokens))
}
