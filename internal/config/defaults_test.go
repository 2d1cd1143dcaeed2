package config

import (
	"reflect"
	"testing"

	"github.com/dynalimit/dynalimit/internal/lease"
	"github.com/dynalimit/dynalimit/internal/memstore"
	"github.com/dynalimit/dynalimit/internal/server"
	"github.com/dynalimit/dynalimit/internal/service"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// TestDynamoDefaultsAgree wants the DynamoDB store the binary configures
// with no variable set to be, field by field, the store a library user
// gets from a zero Config naming the binary's table: a default changed on
// one side only fails here, and so does a Config field added without a
// setting behind it.
func TestDynamoDefaultsAgree(t *testing.T) {
	bin := Defaults().DynamoConfig()
	lib := dynamo.Config{Table: dynamo.DefaultTable}.WithDefaults()
	bv, lv := reflect.ValueOf(bin), reflect.ValueOf(lib)
	for i := range bv.NumField() {
		name := bv.Type().Field(i).Name
		if b, l := bv.Field(i).Interface(), lv.Field(i).Interface(); b != l {
			t.Errorf("Defaults().DynamoConfig().%s = %v, want the library's default %v", name, b, l)
		}
	}
	if got, want := Defaults().DynamoDBTable, dynamo.DefaultTable; got != want {
		t.Errorf("Defaults().DynamoDBTable = %q, want dynamo.DefaultTable %q", got, want)
	}
	if got, want := Defaults().AWSRegion, dynamo.DefaultRegion; got != want {
		t.Errorf("Defaults().AWSRegion = %q, want dynamo.DefaultRegion %q", got, want)
	}
}

// TestLibraryDefaultsAgree wants every other default the binary shares with
// a library (the embedded store's bounds, the service's request bounds,
// headers and near-limit ratio, the HTTP servers' timeouts) to be the
// library's.
func TestLibraryDefaultsAgree(t *testing.T) {
	d := Defaults()
	cases := []struct {
		setting  string
		got, lib any
	}{
		{"MEMORY_MAX_BUCKETS", d.MemoryMaxBuckets, memstore.DefaultMaxBuckets},
		{"MEMORY_MAX_BYTES", d.MemoryMaxBytes, memstore.DefaultMaxBytes},
		{"MEMORY_SWEEP_INTERVAL", d.MemorySweepInterval, memstore.DefaultSweepInterval},
		{"REQUEST_MAX_DESCRIPTORS", d.RequestMaxDescriptors, service.DefaultMaxDescriptors},
		{"REQUEST_MAX_ENTRIES", d.RequestMaxEntries, service.DefaultMaxEntries},
		{"REQUEST_MAX_ENTRY_BYTES", d.RequestMaxEntryBytes, service.DefaultMaxEntryBytes},
		{"LIMIT_LIMIT_HEADER", d.LimitLimitHeader, service.DefaultLimitHeader},
		{"LIMIT_REMAINING_HEADER", d.LimitRemainingHeader, service.DefaultRemainingHeader},
		{"LIMIT_RESET_HEADER", d.LimitResetHeader, service.DefaultResetHeader},
		{"NEAR_LIMIT_RATIO", d.NearLimitRatio, service.DefaultNearLimitRatio},
		{"HTTP_READ_HEADER_TIMEOUT", d.HTTPReadHeaderTimeout, server.DefaultReadHeaderTimeout},
		{"HTTP_READ_TIMEOUT", d.HTTPReadTimeout, server.DefaultReadTimeout},
		{"HTTP_IDLE_TIMEOUT", d.HTTPIdleTimeout, server.DefaultIdleTimeout},
		{"LEASE_TTL", d.LeaseTTL, lease.DefaultTTL},
	}
	for _, c := range cases {
		if c.got != c.lib {
			t.Errorf("Defaults() %s = %v, want the library's default %v", c.setting, c.got, c.lib)
		}
	}
}

// TestDynamoConfig wants the settings mapped onto the store's
// configuration, REJECTION_CACHE_SIZE=0 (disabled in the binary) onto
// dynamo.RejectionCacheOff (the library's zero is its default size).
func TestDynamoConfig(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want dynamo.Config
	}{
		{"defaults", nil, dynamo.Config{
			Table: dynamo.DefaultTable, Namespace: dynamo.DefaultNamespace, Timeout: dynamo.DefaultTimeout,
			ConfigCacheTTL: dynamo.DefaultConfigCacheTTL, RejectionCacheSize: dynamo.DefaultRejectionCacheSize,
			UsageRetention: dynamo.DefaultUsageRetention, ShardWriteRate: dynamo.DefaultShardWriteRate,
			ShardMergeRate: dynamo.DefaultShardMergeRate, ShardMergeAfter: dynamo.DefaultShardMergeAfter,
		}},
		{"set", map[string]string{"DYNAMODB_TABLE": "t", "NAMESPACE": "team-a", "BACKEND_TIMEOUT": "40ms", "CONFIG_CACHE_TTL": "5s", "REJECTION_CACHE_SIZE": "7", "USAGE_RETENTION": "720h",
			"SHARD_WRITE_RATE": "300", "SHARD_MERGE_RATE": "20", "SHARD_MERGE_AFTER": "1m"}, dynamo.Config{
			Table: "t", Namespace: "team-a", Timeout: 40e6, ConfigCacheTTL: 5e9, RejectionCacheSize: 7, UsageRetention: 720 * 3600e9,
			ShardWriteRate: 300, ShardMergeRate: 20, ShardMergeAfter: 60e9,
		}},
		{"rejection cache disabled", map[string]string{"REJECTION_CACHE_SIZE": "0"}, dynamo.Config{
			Table: dynamo.DefaultTable, Namespace: dynamo.DefaultNamespace, Timeout: dynamo.DefaultTimeout,
			ConfigCacheTTL: dynamo.DefaultConfigCacheTTL, RejectionCacheSize: dynamo.RejectionCacheOff,
			UsageRetention: dynamo.DefaultUsageRetention, ShardWriteRate: dynamo.DefaultShardWriteRate,
			ShardMergeRate: dynamo.DefaultShardMergeRate, ShardMergeAfter: dynamo.DefaultShardMergeAfter,
		}},
		{"sharding by rate disabled", map[string]string{"SHARD_WRITE_RATE": "0", "SHARD_MERGE_RATE": "0"}, dynamo.Config{
			Table: dynamo.DefaultTable, Namespace: dynamo.DefaultNamespace, Timeout: dynamo.DefaultTimeout,
			ConfigCacheTTL: dynamo.DefaultConfigCacheTTL, RejectionCacheSize: dynamo.DefaultRejectionCacheSize,
			UsageRetention: dynamo.DefaultUsageRetention, ShardWriteRate: -1, ShardMergeRate: -1,
			ShardMergeAfter: dynamo.DefaultShardMergeAfter,
		}},
	}
	for _, c := range cases {
		s, err := FromEnv(env(c.env))
		if err != nil {
			t.Fatalf("%s: FromEnv(%v) = %v", c.name, c.env, err)
		}
		if got := s.DynamoConfig(); got != c.want {
			t.Errorf("%s: FromEnv(%v).DynamoConfig() = %+v, want %+v", c.name, c.env, got, c.want)
		}
		if got := s.DynamoConfig().WithDefaults(); got != c.want {
			t.Errorf("%s: DynamoConfig().WithDefaults() = %+v, want %+v unchanged (the store applies nothing more)", c.name, got, c.want)
		}
	}
}
