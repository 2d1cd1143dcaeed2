package cfntest

import (
	"bytes"
	"encoding/json"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// call is one DynamoDB request as IAM authorizes it: a TransactWriteItems
// is one call per item (dynamodb:PutItem for a Put, …).
type call struct {
	Step   string   // the command or store method that made it
	Action string   // "dynamodb:GetItem"
	Index  string   // the index a Query reads ("" for the table)
	Table  string   // the table named
	Keys   []string // the partition keys named (for a Query on an index, the index's)
	Stream bool     // a DynamoDB Streams call: on the table's stream
}

// originHeader names the client a call came from, for calls that may
// arrive after their step ended (a call its client gave up on).
const originHeader = "X-Test-Origin"

// originClient is an HTTP client that names its calls' origin.
type originClient struct {
	dynamodb.HTTPClient
	name string
}

func (o originClient) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set(originHeader, o.name)
	return o.HTTPClient.Do(req)
}

// recorder is an HTTP proxy in front of DynamoDB Local that notes every
// call, and can answer UpdateItem calls with a throttling error.
type recorder struct {
	mu       sync.Mutex
	step     string
	calls    []call
	throttle func(pk string) bool
	srv      *httptest.Server
}

func newRecorder(t testing.TB, endpoint string) *recorder {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		api, op, _ := strings.Cut(req.Header.Get("X-Amz-Target"), ".")
		calls := parseCall(op, body)
		if strings.HasPrefix(api, "DynamoDBStreams_") {
			calls = []call{{Action: "dynamodb:" + op, Stream: true}}
		}
		r.mu.Lock()
		step := r.step
		if o := req.Header.Get(originHeader); o != "" {
			step = o // a client that names itself (see originClient), whenever its call arrives
		}
		for i := range calls {
			calls[i].Step = step
		}
		r.calls = append(r.calls, calls...)
		throttle := r.throttle
		r.mu.Unlock()
		if op == "UpdateItem" && throttle != nil && len(calls) == 1 && len(calls[0].Keys) == 1 && throttle(calls[0].Keys[0]) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"throttled by the test"}`)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// Endpoint is the proxy's URL.
func (r *recorder) Endpoint() string { return r.srv.URL }

// Step names the calls that follow and returns those noted since the last
// Step.
func (r *recorder) Step(name string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step = name
	return r.calls
}

// Take returns every call noted and forgets them.
func (r *recorder) Take() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// SetThrottle makes UpdateItem calls on the partition keys it reports
// true for fail with ProvisionedThroughputExceededException.
func (r *recorder) SetThrottle(f func(pk string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.throttle = f
}

type av map[string]any

func pkOf(item map[string]av) string {
	s, _ := item["PK"]["S"].(string)
	return s
}

var keyCond = regexp.MustCompile(`^\s*(#?\w+)\s*=\s*(:\w+)`)

// parseCall turns one request body into the calls IAM sees.
func parseCall(op string, body []byte) []call {
	var in struct {
		TableName     string
		IndexName     string
		Key           map[string]av
		Item          map[string]av
		RequestItems  map[string]struct{ Keys []map[string]av }
		TransactItems []map[string]struct {
			TableName string
			Key       map[string]av
			Item      map[string]av
		}
		KeyConditionExpression    string
		ExpressionAttributeNames  map[string]string
		ExpressionAttributeValues map[string]av
	}
	_ = json.Unmarshal(body, &in)
	c := call{Action: "dynamodb:" + op, Table: in.TableName, Index: in.IndexName}
	switch op {
	case "GetItem", "UpdateItem", "DeleteItem":
		c.Keys = []string{pkOf(in.Key)}
	case "PutItem":
		c.Keys = []string{pkOf(in.Item)}
	case "BatchGetItem":
		for table, ka := range in.RequestItems {
			c.Table = table
			for _, k := range ka.Keys {
				c.Keys = append(c.Keys, pkOf(k))
			}
		}
	case "Query":
		if m := keyCond.FindStringSubmatch(in.KeyConditionExpression); m != nil {
			s, _ := in.ExpressionAttributeValues[m[2]]["S"].(string)
			c.Keys = []string{s}
		}
	case "BatchWriteItem":
		var bw struct {
			RequestItems map[string][]struct {
				DeleteRequest struct{ Key map[string]av }
				PutRequest    struct{ Item map[string]av }
			}
		}
		_ = json.Unmarshal(body, &bw)
		for table, reqs := range bw.RequestItems {
			c.Table = table
			for _, r := range reqs {
				if pk := pkOf(r.DeleteRequest.Key); pk != "" {
					c.Keys = append(c.Keys, pk)
				}
				if pk := pkOf(r.PutRequest.Item); pk != "" {
					c.Keys = append(c.Keys, pk)
				}
			}
		}
	case "TransactWriteItems":
		var out []call
		for _, ti := range in.TransactItems {
			for kind, x := range ti {
				action := map[string]string{"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}[kind]
				pk := pkOf(x.Key)
				if kind == "Put" {
					pk = pkOf(x.Item)
				}
				out = append(out, call{Action: "dynamodb:" + action, Table: x.TableName, Keys: []string{pk}})
			}
		}
		return out
	}
	return []call{c}
}
