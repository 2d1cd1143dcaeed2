package sidebyside

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Domain is the domain of the scenarios' rules (testdata/runtime).
const Domain = "sbs"

// Desc is one request descriptor.
type Desc struct {
	// Entries are key, value, key, value…
	Entries []string
	// Hits is the descriptor's own hits_addend, when set.
	Hits *uint64
	// PerDay, when not 0, is a limit override of that many a day.
	PerDay uint32
}

// Step is one ShouldRateLimit call.
type Step struct {
	Descs []Desc
	// Differs, when set, says why this service answers this step otherwise
	// than envoyproxy/ratelimit by design; Ours is then its answer, compared
	// instead of the recorded one.
	Differs string
	Ours    *Answer
}

// Scenario is a run of one binary with Env added to the common settings.
type Scenario struct {
	Name  string
	Env   []string
	Steps []Step
	// Scrape compares the Prometheus series at PROMETHEUS_ADDR at the end.
	Scrape bool
}

// Answer is what a call answered, in comparable form.
type Answer struct {
	Overall  string
	Statuses []Status
	// Headers are RateLimit-Limit and RateLimit-Remaining when present
	// (RateLimit-Reset differs by design: window end against refill).
	Headers map[string]string `json:",omitempty"`
	// Metadata is the dynamic metadata as JSON with sorted keys and no
	// spaces (protobuf's text form of an override varies its spacing).
	Metadata string `json:",omitempty"`
}

// Status is one descriptor's status.
type Status struct {
	Code      string
	Limit     string `json:",omitempty"` // requests_per_unit/unit
	Remaining uint32
}

// Recording is what the recorder wrote from envoyproxy/ratelimit.
type Recording struct {
	// Legacy names the old service's build.
	Legacy string
	// Answers holds each scenario's answers, step by step.
	Answers map[string][]Answer
	// Series holds, for scenarios with Scrape, the ratelimit_service_*
	// series of the final scrape (see Series).
	Series map[string][]string
	// UDS is what the old service did with GRPC_UDS set.
	UDS UDS
}

// UDS is what a binary started with GRPC_UDS does.
type UDS struct {
	AnsweredOverSocket bool
	ListensOnGRPCPort  bool
}

func d(entries ...string) Desc { return Desc{Entries: entries} }

func hits(n uint64, ds Desc) Desc { ds.Hits = &n; return ds }

func call(ds ...Desc) Step { return Step{Descs: ds} }

// allOrNothing marks a refused request whose other descriptors the old
// service debited (it counts every hit of a request, refused or not) and
// this service did not: their remaining counts are one higher here.
func allOrNothing(s Step, ours Answer) Step {
	s.Differs = "all-or-nothing: a refused request debits none of its descriptors here; the old service counts them"
	s.Ours = &ours
	return s
}

func over(statuses ...Status) Answer { return Answer{Overall: "OVER_LIMIT", Statuses: statuses} }

func okStatus(limit string, remaining uint32) Status {
	return Status{Code: "OK", Limit: limit, Remaining: remaining}
}

func overStatus(limit string) Status { return Status{Code: "OVER_LIMIT", Limit: limit} }

func repeat(n int, s Step) []Step {
	out := make([]Step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func steps(groups ...[]Step) []Step {
	var out []Step
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// Scenarios are the runs, in order.
var Scenarios = []Scenario{
	{
		// The request the old service answers OK under QUOTA_MODE: one
		// exhausted descriptor beside one that is not.
		Name: "quota_mode",
		Env:  []string{"QUOTA_MODE=true"},
		Steps: steps(
			[]Step{call(d("key3", "x")), call(d("key3", "x")), call(d("key3", "x"), d("key2", "y"))},
			repeat(5, call(d("key3", "x"), d("key2", "y"))),
			[]Step{call(d("key2", "y")), call(d("user", "q"))},
		),
	},
	{
		Name: "enforced",
		Steps: []Step{
			call(d("key3", "z")),
			allOrNothing(call(d("key3", "z"), d("key2", "w")), over(overStatus("1/DAY"), okStatus("5/DAY", 5))),
			{
				Descs:   []Desc{d("key2", "w")},
				Differs: "all-or-nothing: the refused request before did not debit key2 here; the old service counted it",
				Ours:    &Answer{Overall: "OK", Statuses: []Status{okStatus("5/DAY", 4)}},
			},
			call(d("api", "a", "path", "/v1")),
			call(d("api", "a", "path", "/v1"), d("user", "e")),
			call(d("api", "a")),
			call(d("nothing", "here")),
		},
	},
	{
		Name:  "shadow_and_unlimited",
		Steps: steps(repeat(3, call(d("shadow", "s"))), []Step{call(d("free", "f"), d("shadow", "s")), call(d("free", "f"))}),
	},
	{
		Name: "quota_rules",
		Steps: steps(
			repeat(3, call(d("quota", "a"))),
			[]Step{
				allOrNothing(call(d("quota", "a"), d("user", "r")), over(overStatus("2/DAY"), okStatus("10/DAY", 10))),
				call(d("quota", "b"), d("quota", "a")),
			},
		),
	},
	{
		Name: "hits_addend",
		Steps: []Step{
			call(hits(0, d("user", "h"))),
			call(hits(4, d("user", "h"))),
			call(hits(0, d("user", "h"))),
			call(hits(6, d("user", "h"))),
			call(hits(0, d("user", "h"))),
		},
	},
	{
		// Envoy Gateway's usage-based limit: a check before each request,
		// the response's cost of 10 charged when its stream is done.
		Name: "usage_based",
		Steps: []Step{
			call(hits(0, d("usage", "u"))), call(hits(10, d("usage", "u"))),
			call(hits(0, d("usage", "u"))), call(hits(10, d("usage", "u"))),
			call(hits(0, d("usage", "u"))), call(hits(10, d("usage", "u"))),
			call(hits(0, d("usage", "u"))), call(hits(10, d("usage", "u"))),
			call(hits(0, d("usage", "u"))),
		},
	},
	{
		Name: "headers",
		Env:  []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"},
		Steps: steps(
			repeat(4, call(d("api", "h", "path", "/x"))),
			[]Step{call(d("user", "hd"), d("api", "h", "path", "/y")), call(d("free", "hf"))},
		),
	},
	{
		Name: "metadata",
		Env:  []string{"RESPONSE_DYNAMIC_METADATA=true"},
		Steps: steps(
			[]Step{
				call(d("user", "m")),
				call(d("free", "m"), d("user", "m")),
				call(hits(0, d("user", "m2")), d("quota", "m")),
				call(Desc{Entries: []string{"user", "o"}, PerDay: 7}),
			},
			repeat(2, call(d("shadow", "m"), d("quota", "m"))),
			[]Step{allOrNothing(call(d("quota", "m"), d("user", "m")), Answer{
				Overall:  "OVER_LIMIT",
				Statuses: []Status{overStatus("2/DAY"), okStatus("10/DAY", 8)},
				Metadata: `{"descriptors":[{"entries":["quota=m"]},{"entries":["user=m"]}],"domain":"sbs","metadata":{"tier":"standard"}}`,
			})},
		),
	},
	{
		Name:   "prometheus",
		Env:    []string{"USE_PROMETHEUS=true", "PROMETHEUS_PATH=/metrics", "STATS_FLUSH_INTERVAL=100ms"},
		Scrape: true,
		Steps: steps(
			repeat(12, call(d("user", "p"))),
			repeat(2, call(d("shadow", "p"))),
			repeat(3, call(d("quota", "p"))),
			[]Step{call(d("api", "p", "path", "/z")), call(d("free", "p")), call(d("nothing", "p"))},
		),
	},
}

// Request builds a step's request.
func (s Step) Request() *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: Domain}
	for _, ds := range s.Descs {
		rd := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(ds.Entries); i += 2 {
			rd.Entries = append(rd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: ds.Entries[i], Value: ds.Entries[i+1]})
		}
		if ds.Hits != nil {
			rd.HitsAddend = wrapperspb.UInt64(*ds.Hits)
		}
		if ds.PerDay != 0 {
			rd.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: ds.PerDay, Unit: typev3.RateLimitUnit_DAY}
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

// Play sends a scenario's steps in order and returns the answers.
func Play(ctx context.Context, c pb.RateLimitServiceClient, sc Scenario) ([]Answer, error) {
	out := make([]Answer, 0, len(sc.Steps))
	for i, st := range sc.Steps {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := c.ShouldRateLimit(cctx, st.Request())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s step %d: %w", sc.Name, i, err)
		}
		a, err := AnswerOf(resp)
		if err != nil {
			return nil, fmt.Errorf("%s step %d: %w", sc.Name, i, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// AnswerOf puts a response in comparable form.
func AnswerOf(resp *pb.RateLimitResponse) (Answer, error) {
	a := Answer{Overall: resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		s := Status{Code: st.GetCode().String(), Remaining: st.GetLimitRemaining()}
		if l := st.GetCurrentLimit(); l != nil {
			s.Limit = strconv.FormatUint(uint64(l.GetRequestsPerUnit()), 10) + "/" + l.GetUnit().String()
		}
		a.Statuses = append(a.Statuses, s)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		switch strings.ToLower(h.GetKey()) {
		case "ratelimit-limit", "ratelimit-remaining":
			if a.Headers == nil {
				a.Headers = map[string]string{}
			}
			a.Headers[h.GetKey()] = h.GetValue()
		}
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		b, err := protojson.Marshal(md)
		if err != nil {
			return Answer{}, err
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return Answer{}, err
		}
		b, err = json.Marshal(v) // sorted keys
		if err != nil {
			return Answer{}, err
		}
		a.Metadata = strings.ReplaceAll(string(b), " ", "")
	}
	return a, nil
}

// Series returns the ratelimit_service_* samples of a Prometheus text
// exposition as sorted "name{labels} value" lines. Response-time
// histograms keep their count only: their buckets and sum are timings.
func Series(exposition string) []string {
	var out []string
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, "ratelimit_service_") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		if strings.HasPrefix(name, "ratelimit_service_response_time_seconds") && !strings.HasSuffix(name, "_count") {
			continue
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}
