package grpcserver

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// readUntil reads frames from a until one matches want, the connection
// ends, or d passes; it returns the matching frame (nil if none) and
// whether the server closed the connection.
func readUntil(t *testing.T, a *attacker, d time.Duration, want func(http2.Frame) bool) (http2.Frame, bool) {
	t.Helper()
	_ = a.nc.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := a.fr.ReadFrame()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, false
		case err != nil:
			return nil, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err)
		case want(f):
			return f, false
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

func goAwayWith(code http2.ErrCode, debug string) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		return ok && g.ErrCode == code && string(g.DebugData()) == debug
	}
}

// TestPingPolicy: grpc-go's ping policy. Without a call open, a client's
// pings are strikes, and the third strike ends the connection with GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings"; the first ping is answered.
func TestPingPolicy(t *testing.T) {
	fx := start(t, Options{}, reverse)
	a := dialAttacker(t, fx.addr)
	defer a.nc.Close()
	for i := range 4 {
		if err := a.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if f, _ := readUntil(t, a, 5*time.Second, func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }); f == nil {
		t.Fatal("the first ping was not answered")
	}
	if f, _ := readUntil(t, a, 5*time.Second, goAwayWith(http2.ErrCodeEnhanceYourCalm, "too_many_pings")); f == nil {
		t.Fatal("four pings without a call: no GOAWAY too_many_pings")
	}
}

// TestPingPolicyPermits: with PermitWithoutStream and a MinTime the
// client keeps, its pings are answered and the connection stays.
func TestPingPolicyPermits(t *testing.T) {
	fx := start(t, Options{KeepalivePolicy: keepalive.EnforcementPolicy{MinTime: time.Millisecond, PermitWithoutStream: true}}, reverse)
	a := dialAttacker(t, fx.addr)
	defer a.nc.Close()
	for i := range 5 {
		time.Sleep(5 * time.Millisecond)
		_ = a.fr.WritePing(false, [8]byte{byte(i)})
		if err := a.bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if f, closed := readUntil(t, a, 5*time.Second, func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() }); f == nil {
			t.Fatalf("ping %d: no answer (closed: %v)", i, closed)
		}
	}
}

// TestKeepalivePing: a connection silent for Keepalive.Time is pinged, and
// closed when nothing comes within Keepalive.Timeout.
func TestKeepalivePing(t *testing.T) {
	fx := start(t, Options{Keepalive: keepalive.ServerParameters{Time: time.Second, Timeout: 100 * time.Millisecond}}, reverse)
	a := dialAttacker(t, fx.addr)
	defer a.nc.Close()
	_ = a.bw.Flush()
	t0 := time.Now()
	if f, _ := readUntil(t, a, 5*time.Second, func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }); f == nil {
		t.Fatal("a silent connection was not pinged within 5 s of Keepalive.Time (1 s)")
	}
	if _, closed := readUntil(t, a, 5*time.Second, func(http2.Frame) bool { return false }); !closed {
		t.Fatal("a connection that did not answer the keepalive ping is still open")
	}
	if d := time.Since(t0); d < time.Second {
		t.Errorf("closed %v after it opened, want after Keepalive.Time (1 s) and Timeout", d)
	}
}

// TestMaxConnectionIdle: a connection that holds no call for
// MaxConnectionIdle is sent GOAWAY.
func TestMaxConnectionIdle(t *testing.T) {
	fx := start(t, Options{Keepalive: keepalive.ServerParameters{MaxConnectionIdle: 100 * time.Millisecond}}, reverse)
	a := dialAttacker(t, fx.addr)
	defer a.nc.Close()
	_ = a.bw.Flush()
	if f, _ := readUntil(t, a, 5*time.Second, func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }); f == nil {
		t.Fatal("an idle connection was not sent GOAWAY within 5 s of MaxConnectionIdle (100 ms)")
	}
}

// TestGraceAgainstAClientThatDoesNotRead: MaxConnectionAgeGrace holds even
// when the client never reads what the server writes (the drain's GOAWAY
// cannot be written): the connection is closed.
func TestGraceAgainstAClientThatDoesNotRead(t *testing.T) {
	fx := start(t, Options{Keepalive: keepalive.ServerParameters{MaxConnectionAge: 100 * time.Millisecond, MaxConnectionAgeGrace: 200 * time.Millisecond}}, reverse)
	a := dialAttacker(t, fx.addr)
	defer a.nc.Close()
	// The client grants all the window there is, then sends calls whose
	// answers fill the socket's buffers and never reads: the server's
	// writes stall, the drain's GOAWAY among them.
	_ = a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow})
	_ = a.fr.WriteWindowUpdate(0, maxWindow-defaultWindow)
	msg, err := proto.Marshal(wrapperspb.Bytes(make([]byte, 60<<10)))
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte{0, byte(len(msg) >> 24), byte(len(msg) >> 16), byte(len(msg) >> 8), byte(len(msg))}, msg...)
	hdr := a.requestPath("/test.Echo/Echo")
	_ = a.nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
	for id := uint32(1); id < 400; id += 2 {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
		if err := a.fr.WriteData(id, true, body); err != nil {
			break
		}
	}
	_ = a.bw.Flush()
	time.Sleep(1500 * time.Millisecond) // age 100 ms + grace 200 ms, with room
	if _, closed := readUntil(t, a, 5*time.Second, func(http2.Frame) bool { return false }); !closed {
		t.Fatal("the connection is still open after its age and grace, with a client that did not read")
	}
}
