package descriptors_test

import (
	"fmt"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

func Example() {
	yaml := `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "ip.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ip := range []string{"50.0.0.1", "50.0.0.5"} {
		m, ok := cfg.Match("edge_proxy_per_ip", []descriptors.Entry{{Key: "remote_address", Value: ip}})
		l := m.Rule.Limits[0]
		fmt.Println(ok, m.Rule.FullKey, l.RequestsPerUnit, l.Unit, l.Deny, m.EntityID())
	}
	// Output:
	// true edge_proxy_per_ip.remote_address 10 SECOND false remote_address=50.0.0.1
	// true edge_proxy_per_ip.remote_address_50.0.0.5 0 SECOND true remote_address=50.0.0.5
}

func ExampleConfig_Match_shareThreshold() {
	yaml := `
domain: files
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	cfg, _ := descriptors.Parse([]descriptors.File{{Name: "f.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	for _, p := range []string{"/files/a.pdf", "/files/b.csv"} {
		m, _ := cfg.Match("files", []descriptors.Entry{{Key: "path", Value: p}})
		fmt.Println(m.Entries[0].Value, m.EntityID(), m.MetricKey)
	}
	// Output:
	// /files/* path~%2Ffiles%2F* files.path_/files/*
	// /files/* path~%2Ffiles%2F* files.path_/files/*
}

func ExampleParse_limits() {
	yaml := `
namespace: acme
domain: llm
descriptors:
  - key: api_key
    entity: true
    descriptors:
      - key: model
        resource: true
        limits:
          - {name: rpm, unit: minute, requests_per_unit: 60, burst: 120}
          - {name: tpm, unit: minute, requests_per_unit: 100000, charge: post}
`
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "llm.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	m, _ := cfg.Match("llm", []descriptors.Entry{{Key: "api_key", Value: "k1"}, {Key: "model", Value: "gpt"}})
	fmt.Println(m.Rule.Namespace, m.Rule.Levels[0].Entity, m.Rule.Levels[1].Resource)
	for _, l := range m.Rule.Limits {
		fmt.Printf("%s %d %s charge=%q %d\n", l.ID, l.RequestsPerUnit, l.Unit, l.Charge, l.Bucket.Capacity)
	}
	// Output:
	// acme true true
	// rpm 60 MINUTE charge="" 120000
	// tpm 100000 MINUTE charge="post" 100000000
}

func ExampleError() {
	yaml := `
domain: d
descriptors:
  - key: k
    ratelimit:
      unit: day
  - key: j
    rate_limit:
      unit: fortnight
`
	_, err := descriptors.Parse([]descriptors.File{{Name: "d.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	fmt.Println(err)
	// Output:
	// descriptors: 2 problems:
	// d.yaml:5: ratelimit: config error, unknown key 'ratelimit'; did you mean 'rate_limit'?
	// d.yaml:9: unit: invalid rate limit unit 'fortnight': want one of second, minute, hour, day, week, month, year (any case)
}

func ExampleConfig_Dump() {
	yaml := `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
  - key: database
    value: default
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5, unit_multiplier: 10}
`
	cfg, _ := descriptors.Parse([]descriptors.File{{Name: "m.yaml", Data: []byte(yaml)}}, descriptors.Options{})
	fmt.Print(cfg.Dump())
	// Output:
	// mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false
	// mongo_cps.database_default: unit=MINUTE requests_per_unit=5 unit_multiplier=10, shadow_mode: true
}
