package main

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// redisEntitiesConfig is the README's example rule of users: 10 a minute
// each, charged at every stored parent that cascades.
const redisEntitiesConfig = `domain: example
descriptors:
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: user
    entity: true
    cascade: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// TestRedisStoredLimits is the README's walkthrough of stored limits and
// entities on a redis-server, through the CLI and the binary's admin API
// (ADMIN_API=true, -admin_url): limits set, get and delete at each scope;
// a stored limit of an entity overrides the YAML rule's and the answer
// names it; entity create -cascade and a key under it; entity show prints
// the chain; the key's third request is refused by its tenant's stored
// 2 a minute; and every write is in the audit records.
func TestRedisStoredLimits(t *testing.T) {
	addr := redisServerAddr(t)
	dir := t.TempDir()
	writeConfig(t, dir, "example.yaml", redisEntitiesConfig)
	p := startBinary(t, dir, "BACKEND_TYPE=redis", "REDIS_URL="+addr, "NAMESPACE=redis-entities", "ADMIN_API=true", "USER=ops-bot")
	url := "http://" + p.DebugAddr()
	cli := func(args ...string) string {
		t.Helper()
		out, ok := adminRun(t, []string{"USER=ops-bot"}, withURL(url, args)...)
		if !ok {
			t.Fatalf("ratelimit %s: %s", strings.Join(args, " "), out)
		}
		return out
	}
	expect := func(want string, args ...string) {
		t.Helper()
		if out := cli(args...); !strings.Contains(out, want) {
			t.Errorf("ratelimit %s = %q, want %q", strings.Join(args, " "), out, want)
		}
	}
	client := rlsClient(t, p)
	// burst asks key=value n+1 times: n admitted, then refused, each
	// answer naming the limit of perUnit a unit.
	burst := func(key, value string, n int, perUnit uint32) {
		t.Helper()
		for i := range n + 1 {
			resp, err := client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{
				Domain: "example", Descriptors: []*rlv3.RateLimitDescriptor{descriptor(key, value)},
			})
			if err != nil {
				t.Fatalf("ShouldRateLimit(%s=%s) = %v", key, value, err)
			}
			if ok := resp.GetOverallCode() == pb.RateLimitResponse_OK; ok != (i < n) {
				t.Fatalf("%s request %d: %v, want %d admitted, then refused", value, i, resp.GetOverallCode(), n)
			}
			if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != perUnit {
				t.Errorf("%s request %d: current_limit %d a unit, want the stored %d", value, i, got, perUnit)
			}
		}
	}

	expect(`entity "generic_key=demo" resource "example": set default:5/min`, "limits", "set", "-entity", "generic_key=demo", "-resource", "example", "default:5/min")
	expect(`entity "generic_key=demo" resource "example": default:5/min`, "limits", "get", "-entity", "generic_key=demo", "-resource", "example")
	expect(`resource "example": set default:100/min`, "limits", "set", "-resource", "example", "default:100/min")
	expect(`resource "example": deleted all limits (default:100/min)`, "limits", "delete", "-resource", "example")
	expect(`system: set rpm:1000/min:1500`, "limits", "set", "-system", "rpm:1000/min:1500")
	burst("generic_key", "demo", 5, 5) // the entity's stored 5/min, not the rule's 10

	expect(`entity "acme" parent "" cascade true`, "entity", "create", "acme", "-cascade")
	expect(`entity "key-1" parent "acme" cascade false`, "entity", "create", "key-1", "-parent", "acme")
	expect(`entity "acme": set rpm:2/min`, "limits", "set", "-entity", "acme", "rpm:2/min")
	expect("child \"key-1\"\nchain \"acme\"\nlevel \"acme\" cascade true default: rpm:2/min", "entity", "show", "acme")
	expect("chain \"key-1\" -> \"acme\"\nlevel \"key-1\" cascade false: no limits stored\nlevel \"acme\" cascade true default: rpm:2/min\nbucket \"acme\" resource \"example\": rpm 2 of 2 left",
		"entity", "show", "key-1", "-resource", "example")
	if out, ok := adminRun(t, []string{"USER=ops-bot"}, withURL(url, []string{"entity", "create", "acme", "-parent", "key-1"})...); ok || !strings.Contains(out, "cycle") {
		t.Errorf("entity create acme -parent key-1 = %q (ok %t), want refused: a cycle", out, ok)
	}

	burst("user", "key-1", 2, 2) // refused by acme's stored 2/min
	expect(`limits.set`, "audit", "list", "-entity", "acme")
	expect(`entity.put`, "audit", "list", "-entity", "acme")
}

// withURL is a command line (group, verb, then the rest) with -admin_url
// url among its flags, before its arguments.
func withURL(url string, args []string) []string {
	return append(append(append([]string{}, args[:2]...), "-admin_url", url), args[2:]...)
}
