package service

import (
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds the body ServeJSON reads.
const maxJSONBody = 1 << 20

// ServeJSON is envoyproxy/ratelimit's /json endpoint: it decodes a
// proto-JSON RateLimitRequest from a POST body and answers with the
// proto-JSON RateLimitResponse and status 200 (OK) or 429 (OVER_LIMIT).
// A malformed body or request is 400 (counted as an invalid request),
// another method 405; when the store failed and ON_UNAVAILABLE blocked the
// request the answer is 503 (with the response), and any other failure is
// 500 (503 when no configuration is loaded). The response's headers are also set on the HTTP response.
func (s *Service) ServeJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "service: method not allowed, use POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		s.metrics.InvalidRequest(reasonMalformed)
		http.Error(w, "service: read request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		s.metrics.InvalidRequest(reasonMalformed)
		http.Error(w, "service: decode request: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, blocked, err := s.decide(r.Context(), &req)
	if err != nil {
		code := http.StatusInternalServerError
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "service: encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	for _, hv := range resp.GetResponseHeadersToAdd() {
		h.Set(hv.GetKey(), hv.GetValue())
	}
	h.Set("Content-Type", "application/json")
	switch {
	case blocked:
		w.WriteHeader(http.StatusServiceUnavailable)
	case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	default:
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.Write(out)
}
