package grpcserver

import (
	"encoding/base64"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// encodeGRPCMessage percent-encodes a status message for the grpc-message
// trailer: bytes outside printable ASCII, and '%', as %XX (the gRPC HTTP/2
// protocol's Percent-Encoded rule).
func encodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(msg)+16)
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < ' ' || c > '~' || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// statusDetails returns the grpc-status-details-bin value of st: the
// google.rpc.Status message, base64 without padding, or "" when st has no
// details (as grpc-go writes it).
func statusDetails(st *status.Status) string {
	if st.Code() == codes.OK {
		return "" // and no copy of the status to find out
	}
	p := st.Proto()
	if p == nil || len(p.GetDetails()) == 0 {
		return ""
	}
	b, err := proto.Marshal(p)
	if err != nil {
		return ""
	}
	return base64.RawStdEncoding.EncodeToString(b)
}

// parseTimeout parses a grpc-timeout header: at most 8 digits and a unit
// (H, M, S, m, u, n). A value out of range is capped rather than refused,
// as grpc-go does.
func parseTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	const maxDuration = time.Duration(1<<63 - 1)
	if unit > 0 && n > int64(maxDuration/unit) {
		return maxDuration, true
	}
	return time.Duration(n) * unit, true
}

// errStatus is the status a handler's error stands for (Unknown for an
// error that carries none, Canceled or DeadlineExceeded for a context's
// error), as grpc-go converts it.
func errStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}
