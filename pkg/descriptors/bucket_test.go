package descriptors_test

import (
	"strconv"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

func TestBucketEntries(t *testing.T) {
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "f.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: a
        descriptors:
          - key: b
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: zone
    value: eu
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 10}
`)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bucket map[string]string
		want   string // keys in order; "" for no rule
	}{
		{map[string]string{"path": "/x", "tenant": "t"}, "tenant,path"},
		{map[string]string{"tenant": "t", "zone": "eu"}, "zone,tenant"},
		{map[string]string{"tenant": "t", "zone": "us"}, ""},
		{map[string]string{"b": "1", "a": "2", "tenant": "t"}, "tenant,a,b"},
		{map[string]string{"api": "k"}, "api"},
		{map[string]string{"tenant": "t"}, ""}, // a level without a limit
		{map[string]string{"api": "k", "extra": "x"}, ""},
		{map[string]string{}, ""},
	} {
		es, ok := cfg.BucketEntries("edge", c.bucket)
		got := ""
		for i, e := range es {
			if i > 0 {
				got += ","
			}
			got += e.Key
			if e.Value != c.bucket[e.Key] {
				t.Errorf("%v: entry %v", c.bucket, e)
			}
		}
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%v: %q %v, want %q", c.bucket, got, ok, c.want)
		}
		if ok {
			if _, matched := cfg.Match("edge", es); !matched {
				t.Errorf("%v: %v does not match", c.bucket, es)
			}
		}
	}
	if _, ok := cfg.BucketEntries("other", map[string]string{"api": "k"}); ok {
		t.Error("unknown domain ordered")
	}
}

// TestBucketEntriesBounded: a bucket of many keys costs at most
// MaxBucketSteps visits, whatever it holds.
func TestBucketEntriesBounded(t *testing.T) {
	cfg, err := descriptors.Parse([]descriptors.File{{Name: "f.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: k
    descriptors:
      - key: k
        descriptors:
          - key: k
            rate_limit: {unit: second, requests_per_unit: 1}
`)}}, descriptors.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := map[string]string{}
	for i := range 64 {
		b["x"+strconv.Itoa(i)] = "v"
	}
	b["k"] = "v"
	if _, ok := cfg.BucketEntries("edge", b); ok {
		t.Error("ordered a bucket no rule has")
	}
}
