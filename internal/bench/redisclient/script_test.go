//go:build redisbench

package redisclient

import (
	"fmt"
	"strconv"
)

// decideScript stands in for the store's decision script: it costs what the
// real one costs (TIME once; per level an HMGET of 3 fields, integer GCRA
// arithmetic and a decimal price; when every level admits, an HSET of 3
// fields, a PEXPIRE and an HINCRBY of the level's hourly usage hash) and
// answers 5 integers per level. KEYS holds, per level, the bucket hash and the
// usage hash; ARGV holds argsPerLevel strings per level.
const decideScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local levels = #KEYS / 2
local out, tats, ok = {}, {}, true
for i = 1, levels do
  local a = (i - 1) * 15
  local limit, period = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local burst, cost = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local h = redis.call('HMGET', KEYS[2 * i - 1], 'tat', 'lim', 'per')
  local tat = tonumber(h[1]) or now
  if tonumber(h[2]) ~= limit or tonumber(h[3]) ~= period then tat = now end
  if tat < now then tat = now end
  local inc = math.floor(cost * period / limit)
  local tol = math.floor(burst * period / limit)
  local newtat = tat + inc
  local admitted = 1
  if ARGV[a + 5] ~= 'check' and newtat - now > tol then admitted = 0; ok = false end
  if ARGV[a + 6] == '1' then admitted = 1 end
  local remaining = math.floor((tol - (newtat - now)) * limit / period)
  if remaining < 0 then remaining = 0 end
  tats[i] = newtat
  local o = (i - 1) * 5
  out[o + 1], out[o + 2], out[o + 3] = admitted, remaining, newtat - now
  out[o + 4], out[o + 5] = math.max(0, newtat - tol - now), limit
end
if ok then
  for i = 1, levels do
    local a = (i - 1) * 15
    local micros = math.floor(tonumber(ARGV[a + 13]) * tonumber(ARGV[a + 4]) * 1000 + 0.5)
    redis.call('HSET', KEYS[2 * i - 1], 'tat', tats[i], 'lim', ARGV[a + 1], 'per', ARGV[a + 2])
    redis.call('PEXPIRE', KEYS[2 * i - 1], ARGV[a + 7])
    redis.call('HINCRBY', KEYS[2 * i], ARGV[a + 8], micros)
  end
end
return out
`

const (
	// levels is the depth of one decision: key, project, tenant.
	levels = 3
	// argsPerLevel is the number of ARGV strings per level.
	argsPerLevel = 15
)

// call is one decision's keys and arguments, built once per tenant so that
// the clients' own cost is what is measured.
type call struct {
	keys []string
	args []string
	anys []any // args as go-redis takes them
}

// newCall builds the keys and arguments of tenant n's three-level decision:
// every key carries the tenant's hash tag, every limit admits (a limit of 10⁹
// a second), so every call runs the write path.
func newCall(n int) call {
	tenant := fmt.Sprintf("tenant-%05d", n)
	tag := "{ns/" + tenant + "}"
	names := [levels]string{"key:ak_" + strconv.Itoa(n*7919), "project:checkout", "tenant"}
	c := call{}
	for i, name := range names {
		c.keys = append(c.keys, tag+"b:"+name+":per_second", tag+"u:2026112902")
		c.args = append(c.args,
			"1000000000000", "1000", "100000000", "1000", "charge", "0", "120000",
			name+"|per_second", "2026112902", "7776000000", tenant, "per_second",
			"0.000125", "", strconv.Itoa(i))
	}
	c.anys = make([]any, len(c.args))
	for i, s := range c.args {
		c.anys[i] = s
	}
	return c
}
