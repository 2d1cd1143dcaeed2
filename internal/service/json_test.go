package service

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dynalimit/dynalimit/internal/metrics"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

func TestServeJSON(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		bodies   []string // earlier bodies are sent first; the last is checked
		opts     []Option
		storeErr error
		noConfig bool
		want     int
		wantBody string // substring of the last body
		wantHdr  map[string]string
	}{
		{
			name: "ok", method: http.MethodPost,
			bodies:   []string{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`},
			want:     http.StatusOK,
			wantBody: `"overallCode":"OK"`,
			wantHdr:  map[string]string{"Content-Type": "application/json"},
		},
		{
			name: "over limit", method: http.MethodPost,
			opts: []Option{WithResponseHeaders(true, "", "", "")},
			bodies: []string{
				`{"domain":"api","hitsAddend":3,"descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`,
				`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`,
			},
			want:     http.StatusTooManyRequests,
			wantBody: `"overallCode":"OVER_LIMIT"`,
			wantHdr:  map[string]string{"RateLimit-Remaining": "0", "RateLimit-Limit": "3"},
		},
		{
			name: "malformed JSON", method: http.MethodPost,
			bodies: []string{`{"domain":`}, want: http.StatusBadRequest, wantBody: "decode request",
		},
		{
			name: "unknown field", method: http.MethodPost,
			bodies: []string{`{"domain":"api","bogus":1}`}, want: http.StatusBadRequest, wantBody: "decode request",
		},
		{
			name: "invalid request", method: http.MethodPost,
			bodies: []string{`{"domain":"api"}`}, want: http.StatusBadRequest, wantBody: "descriptor list must not be empty",
		},
		{
			name: "wrong method", method: http.MethodGet,
			bodies: []string{``}, want: http.StatusMethodNotAllowed, wantHdr: map[string]string{"Allow": "POST"},
		},
		{
			name: "store down, allow", method: http.MethodPost, storeErr: errDown,
			bodies: []string{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`},
			want:   http.StatusOK, wantBody: `"overallCode":"OK"`,
		},
		{
			name: "store down, block", method: http.MethodPost, storeErr: errDown,
			opts:   []Option{WithOnUnavailable(true)},
			bodies: []string{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`},
			want:   http.StatusServiceUnavailable, wantBody: `"overallCode":"OVER_LIMIT"`,
		},
		{
			name: "no configuration", method: http.MethodPost, noConfig: true,
			bodies: []string{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`},
			want:   http.StatusServiceUnavailable, wantBody: "no rate limit configuration",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newFakeStore()
			st.setErr(tt.storeErr)
			cfg := mustConfig(t, testConfig)
			if tt.noConfig {
				cfg = nil
			}
			svc := New(st, func() *descriptors.Config { return cfg }, tt.opts...)
			var rec *httptest.ResponseRecorder
			for _, b := range tt.bodies {
				rec = httptest.NewRecorder()
				svc.ServeJSON(rec, httptest.NewRequest(tt.method, "/json", strings.NewReader(b)))
			}
			if rec.Code != tt.want {
				t.Errorf("ServeJSON() status = %d, want %d (body %s)", rec.Code, tt.want, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("ServeJSON() body = %s, want it to contain %s", rec.Body, tt.wantBody)
			}
			for k, v := range tt.wantHdr {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("ServeJSON() header %s = %q, want %q", k, got, v)
				}
			}
			if rec.Code == http.StatusOK || rec.Code == http.StatusTooManyRequests {
				var v map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
					t.Errorf("ServeJSON() body is not JSON: %v", err)
				}
			}
		})
	}
}

func TestServeJSONBodyLimit(t *testing.T) {
	cfg := mustConfig(t, testConfig)
	reg := prometheus.NewRegistry()
	svc := New(newFakeStore(), func() *descriptors.Config { return cfg }, WithMetrics(metrics.New(reg)))
	body := `{"domain":"` + strings.Repeat("a", maxJSONBody) + `"}`
	rec := httptest.NewRecorder()
	svc.ServeJSON(rec, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("ServeJSON(%d-byte body) status = %d, want 400", len(body), rec.Code)
	}
	if got := counterValue(t, reg, "ratelimit_invalid_requests_total", map[string]string{"reason": reasonMalformed}); got != 1 {
		t.Errorf("invalid requests {reason=malformed} = %v, want 1", got)
	}
}
