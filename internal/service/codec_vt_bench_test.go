//go:build vtprotobuf

package service

import "testing"

// BenchmarkEncodeResponseVT: go test -tags vtprotobuf -run '^$' -bench EncodeResponse ./internal/service
func BenchmarkEncodeResponseVT(b *testing.B) {
	m := oneStatusResponse()
	buf := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.MarshalToSizedBufferVTStrict(buf[:m.SizeVT()]); err != nil {
			b.Fatal(err)
		}
	}
}
