package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/redisstore"
	"github.com/dynalimit/dynalimit/internal/redistest"
)

// redisServerAddr starts a redis-server for t and returns its address
// once it accepts connections.
func redisServerAddr(t *testing.T) string {
	t.Helper()
	return redistest.Start(t, redistest.Options{}).Addr()
}

// TestAdminAPIRedis runs the binary on a redis-server with ADMIN_API=true
// and the operator's commands through its debug listener (the CLI with
// -admin_url):
//   - bucket show before and after 5 decisions differs by 5 tokens (less
//     the refill between, at 50 a day), and the shows consumed nothing;
//   - bucket reset of a bucket the service refuses refills it: the next 3
//     decisions are admitted, the 4th refused; the reset is logged with
//     its principal;
//   - bucket topup of 2 on the drained bucket: 2 admitted, the 3rd
//     refused;
//   - usage list shows what the decisions consumed (3 + 3 + 2 of drain),
//     counted by the decisions themselves;
//   - audit list shows the reset by alice and the top-up;
//   - namespace list answers, with none registered.
func TestAdminAPIRedis(t *testing.T) {
	addr := redisServerAddr(t)
	dir := t.TempDir()
	writeConfig(t, dir, "ops.yaml", opsConfig)
	p := startBinary(t, dir, "BACKEND_TYPE=redis", "REDIS_URL="+addr, "NAMESPACE=redis-ops", "ADMIN_API=true", "USER=ops-bot")
	ask, cli, show := opsRig(t, p)
	drain := func(n int) {
		t.Helper()
		for i := range n + 1 {
			if ok, _ := ask("drain"); ok != (i < n) {
				t.Fatalf("drain decision %d admitted = %t, want %d admitted, then refused", i, ok, n)
			}
		}
	}

	if before := show("show"); before != 50 {
		t.Errorf("bucket show of a new bucket = %v tokens, want 50 (full)", before)
	}
	for i := range 5 {
		if ok, left := ask("show"); !ok || left != uint32(49-i) {
			t.Fatalf("decision %d = %t, %d left; want admitted, %d left", i, ok, left, 49-i)
		}
	}
	after, again := show("show"), show("show")
	if after < 45 || after > 45.01 || again < after || again > after+0.01 {
		t.Errorf("bucket show after 5 decisions = %v then %v, want 45 both (and the refill of the seconds between)", after, again)
	}
	if ok, left := ask("show"); !ok || left != 44 {
		t.Errorf("decision after the shows = %t, %d left; want admitted, 44 left: a show consumes nothing", ok, left)
	}

	drain(3)
	out := cli("bucket", "reset", "-domain", "ops", "-descriptor", "generic_key=drain", "-principal", "alice")
	if !strings.Contains(out, `bucket "generic_key=drain" resource "ops": reset to full on 1 shard (was default 0 of 3), by alice`) {
		t.Errorf("bucket reset = %q", out)
	}
	if got := show("drain"); got != 3 {
		t.Errorf("bucket show after the reset = %v tokens, want the capacity, 3", got)
	}
	drain(3)
	if o := p.Output(); !strings.Contains(o, `"action":"bucket.reset"`) || !strings.Contains(o, `"principal":"alice"`) {
		t.Errorf("the service's log lacks the reset by alice:\n%s", lastLines(o, 5))
	}

	out = cli("bucket", "topup", "-domain", "ops", "-descriptor", "generic_key=drain", "-limit", "default", "-amount", "2")
	if !strings.Contains(out, "default topped up by 2 (was default 0 of 3), by ops-bot") {
		t.Errorf("bucket topup = %q", out)
	}
	drain(2)
	if o := p.Output(); !strings.Contains(o, `"action":"bucket.topup"`) {
		t.Errorf("the service's log lacks the top-up:\n%s", lastLines(o, 5))
	}

	out = cli("usage", "list", "-entity", "generic_key=drain", "-resource", "ops", "-window", "hourly", "-since", time.Now().UTC().Add(-time.Hour).Format(time.RFC3339), "-o", "json")
	var rows []struct {
		Limit       string  `json:"limit"`
		Millitokens float64 `json:"millitokens"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("usage list = %q: %v", out, err)
	}
	total := 0.0
	for _, r := range rows {
		if r.Limit == "default" {
			total += r.Millitokens
		}
	}
	if total != 8000 {
		t.Errorf("usage list of drain = %q: %v millitokens of default, want 8000 (3 + 3 + 2 admitted)", out, total)
	}

	out = cli("audit", "list", "-entity", "generic_key=drain", "-o", "table")
	if !strings.Contains(out, "alice") || !strings.Contains(out, "bucket.reset") || !strings.Contains(out, "bucket.topup") {
		t.Errorf("audit list of drain = %q, want the reset by alice and the top-up", out)
	}

	code, body := httpGet(t, "http://"+p.DebugAddr()+"/admin/namespace/list")
	if code != http.StatusOK || !strings.Contains(body, "no namespaces registered") {
		t.Errorf("GET /admin/namespace/list = %d %q, want 200 and the note that none is registered", code, body)
	}
}

// TestOperatorCommandsRedis runs the operator's scenario of DynamoDB
// (operatorCommands) on a redis-server and on a cluster of three
// masters: two replicas, the commands through the first one's admin API
// (the command line opens no Redis client of its own), a namespace
// deleted refused by both within CONFIG_CACHE_TTL, recovered serving its
// old buckets again, and purged leaving team-b's keys as they were and
// only its audit record.
func TestOperatorCommandsRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		redisOperatorCommands(t, []string{"REDIS_URL=" + srv.Addr()}, srv)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0, redistest.Options{})
		redisOperatorCommands(t, []string{"REDIS_TYPE=cluster", "REDIS_URL=" + strings.Join(cl.Seeds(), ",")}, cl.Masters()...)
	})
}

// redisOperatorCommands runs operatorCommands on the Redis that env
// names, whose masters are masters.
func redisOperatorCommands(t *testing.T, env []string, masters ...*redistest.Server) {
	operatorCommands(t, opsStore{
		env: append(env, "BACKEND_TYPE=redis", "ADMIN_API=true", "BACKEND_TIMEOUT=2s", "ON_UNAVAILABLE=block", "LOG_LEVEL=warn", "NAMESPACE=team-a", "USER=ops-bot", "CONFIG_CACHE_TTL=500ms"),
		run: func(t *testing.T, replicas []*proc, ns string, args ...string) (string, bool) {
			return adminRun(t, []string{"USER=ops-bot"}, withURL("http://"+replicas[0].DebugAddr(), append(args, "-namespace", ns))...)
		},
		items: func(t *testing.T, ns string) []string {
			var out []string
			for _, m := range masters {
				out = append(out, redisItems(t, m, ns)...)
			}
			return out
		},
		auditMark: "}a",
		noCounter: true,
	})
}

// redisItems lists the keys of namespace ns (a name without glob
// characters) on srv, each with its value printed whole.
func redisItems(t *testing.T, srv *redistest.Server, ns string) []string {
	t.Helper()
	keys, _ := srv.MustDo("KEYS", redisstore.NamespacePrefix(ns)+"*").([]any)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		key := fmt.Sprint(k)
		var v any
		switch typ := fmt.Sprint(srv.MustDo("TYPE", key)); typ {
		case "hash":
			v = srv.MustDo("HGETALL", key)
		case "list":
			v = srv.MustDo("LRANGE", key, "0", "-1")
		case "set":
			v = srv.MustDo("SMEMBERS", key)
		case "zset":
			v = srv.MustDo("ZRANGE", key, "0", "-1", "WITHSCORES")
		default:
			v = srv.MustDo("GET", key)
		}
		out = append(out, fmt.Sprintf("%s %v", key, v))
	}
	return out
}
