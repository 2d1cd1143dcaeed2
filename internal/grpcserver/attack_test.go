package grpcserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dynalimit/dynalimit/internal/israce"
)

// attacker writes frames on a raw connection.
type attacker struct {
	nc  net.Conn
	bw  *bufio.Writer
	fr  *http2.Framer
	hb  bytes.Buffer
	enc *hpack.Encoder
	n   int64 // bytes written
}

func dialAttacker(t *testing.T, addr string) *attacker {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	a := &attacker{nc: nc}
	a.bw = bufio.NewWriterSize(countWriter{nc, &a.n, attackPace}, 64<<10)
	a.fr = http2.NewFramer(a.bw, nc)
	a.fr.AllowIllegalWrites = true
	a.enc = hpack.NewEncoder(&a.hb)
	_, _ = a.bw.WriteString(clientPreface)
	_ = a.fr.WriteSettings()
	return a
}

// countWriter counts what it writes and, when pace is set, rests that
// long after each write (of 64 KiB at most): an attacker on another
// machine spends none of the server's cores, and this one shares two with
// the server and the other connection's client. Paced, it still sends
// over 100 MB/s.
type countWriter struct {
	w    io.Writer
	n    *int64
	pace time.Duration
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	*c.n += int64(n)
	if c.pace > 0 {
		time.Sleep(c.pace)
	}
	return n, err
}

// request is the header block of a gRPC call of test.Attack's method.
func (a *attacker) request(method string) []byte { return a.requestPath("/test.Attack/" + method) }

// requestPath is the header block of a gRPC call of path.
func (a *attacker) requestPath(path string) []byte {
	a.hb.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = a.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	return slices.Clone(a.hb.Bytes())
}

// body is a gRPC message holding an empty BytesValue.
var body = []byte{0, 0, 0, 0, 0}

// attack is one published HTTP/2 attack: it writes until it has sent
// what it means to, or the server stops it (an error).
type attack struct {
	name string
	run  func(a *attacker, deadline time.Time) error
	// closes: the native transport ends the connection (otherwise the
	// attack must be harmless: bounded, and the other connection keeps
	// its latency).
	closes bool
	// grpcGo, when set, is why grpc-go's server is not held to the p99
	// bound on this attack: it keeps reading a flood it does not end,
	// and on two cores its work competes with the other connection's.
	grpcGo string
}

const grpcGoKeepsReading = "grpc-go keeps the connection and processes every frame"

var attacks = []attack{
	{"rapid reset (CVE-2023-44487)", func(a *attacker, end time.Time) error {
		hdr := a.request("Slow")
		for id := uint32(1); time.Now().Before(end) && a.n < 8<<20; id += 2 {
			_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
			_ = a.fr.WriteData(id, true, body)
			if err := a.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, ""},
	{"MadeYouReset (CVE-2025-8671): stream errors the server must reset", func(a *attacker, end time.Time) error {
		hdr := a.request("Slow")
		for id := uint32(1); time.Now().Before(end) && a.n < 8<<20; id += 2 {
			_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
			_ = a.fr.WriteData(id, true, body)
			if err := a.fr.WriteWindowUpdate(id, 0); err != nil { // a stream error: RST_STREAM PROTOCOL_ERROR
				return err
			}
		}
		return a.bw.Flush()
	}, true, ""},
	{"CONTINUATION flood (CVE-2023-45288)", func(a *attacker, end time.Time) error {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.request("Fast")})
		frag := bytes.Repeat([]byte{0x82}, 16<<10) // one-byte indexed fields (:method GET)
		for time.Now().Before(end) && a.n < 64<<20 {
			if err := a.fr.WriteContinuation(1, false, frag); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, ""},
	{"CONTINUATION flood on trailers", func(a *attacker, end time.Time) error {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.request("Slow"), EndHeaders: true})
		_ = a.fr.WriteData(1, false, body)
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndStream: true})
		frag := bytes.Repeat([]byte{0x82}, 16<<10)
		for time.Now().Before(end) && a.n < 64<<20 {
			if err := a.fr.WriteContinuation(1, false, frag); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, "grpc-go reads a header block to its end before it checks its size: its RSS and the other connection pay for it"},
	{"HPACK bomb: one large table entry, referenced again and again", func(a *attacker, end time.Time) error {
		// A 4 KiB value enters the dynamic table (index 62), then each
		// byte 0xbe adds 4 KiB to the decoded list.
		blk := []byte{0x40, 0x01, 'x', 0x7f, 0x81, 0x1f} // literal with indexing, name "x", value length 4096 (7-bit prefix 127 + 3969)
		blk = append(blk, bytes.Repeat([]byte{'a'}, 4096)...)
		hdr := append(a.request("Fast"), blk...)
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr})
		frag := bytes.Repeat([]byte{0xbe}, 16<<10)
		for time.Now().Before(end) && a.n < 64<<20 {
			if err := a.fr.WriteContinuation(1, false, frag); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"PING flood, nothing read (CVE-2019-9512)", func(a *attacker, end time.Time) error {
		for i := 0; i < 200_000 && time.Now().Before(end); i++ {
			if err := a.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"SETTINGS flood, nothing read (CVE-2019-9515)", func(a *attacker, end time.Time) error {
		for i := 0; i < 200_000 && time.Now().Before(end); i++ {
			if err := a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(65535 + i%2)}); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"empty DATA flood (CVE-2019-9518)", func(a *attacker, end time.Time) error {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.request("Slow"), EndHeaders: true})
		for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
			if err := a.fr.WriteData(1, false, nil); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"empty HEADERS and CONTINUATION flood", func(a *attacker, end time.Time) error {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1})
		for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
			if err := a.fr.WriteContinuation(1, false, nil); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"WINDOW_UPDATE flood", func(a *attacker, end time.Time) error {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.request("Slow"), EndHeaders: true})
		for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
			if err := a.fr.WriteWindowUpdate(uint32(i%2), 1); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"WINDOW_UPDATE overflow", func(a *attacker, end time.Time) error {
		for i := 0; i < 4 && time.Now().Before(end); i++ {
			if err := a.fr.WriteWindowUpdate(0, 1<<31-1); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, ""},
	{"zero-window slow reader (CVE-2019-9517)", func(a *attacker, end time.Time) error {
		// The client grants no window and never reads: answers wait for
		// window, then the socket fills and the write deadline ends it.
		_ = a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		hdr := a.request("Fast")
		for id := uint32(1); time.Now().Before(end) && a.n < 8<<20; id += 2 {
			_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
			if err := a.fr.WriteData(id, true, body); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"stream-id exhaustion", func(a *attacker, end time.Time) error {
		hdr := a.request("Fast")
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1<<31 - 1, BlockFragment: hdr, EndHeaders: true})
		_ = a.fr.WriteData(1<<31-1, true, body)
		for id := uint32(1); time.Now().Before(end) && a.n < 1<<20; id += 2 {
			_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr, EndHeaders: true})
			if err := a.fr.WriteData(id, true, body); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"PRIORITY flood (CVE-2019-9513)", func(a *attacker, end time.Time) error {
		for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
			if err := a.fr.WritePriority(uint32(2*i+1), http2.PriorityParam{StreamDep: uint32(2*i + 3), Weight: 255}); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
	{"RST_STREAM flood on closed streams (CVE-2019-9514)", func(a *attacker, end time.Time) error {
		_ = a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.request("Fast"), EndHeaders: true})
		_ = a.fr.WriteData(1, true, body)
		for i := 0; i < 1_000_000 && time.Now().Before(end); i++ {
			if err := a.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
				return err
			}
		}
		return a.bw.Flush()
	}, true, grpcGoKeepsReading},
}

// Bounds the attack tests hold the server to.
const (
	attackFor    = 2 * time.Second
	victimCalls  = 1000
	maxRSSGrowth = 64 << 20 // docs/operations.md: at most ~35 MiB a connection, plus the runtime's slack
	// latencySlack is what the machine's scheduler adds on two cores
	// shared by the server, the attacker and the other connection's
	// client (with make test's other work, or a core kept busy): a
	// runnable thread may wait a few milliseconds for a core.
	latencySlack  = 5 * time.Millisecond
	closeDeadline = 3 * time.Second
	// grpcGoCloseWait is how long grpc-go's connection is watched for its
	// close: logged, not held (grpc-go keeps most attacked connections
	// open), and a wait of closeDeadline each made the suite 30 s longer.
	grpcGoCloseWait = 250 * time.Millisecond
	attackPace      = 500 * time.Microsecond
)

// TestAttacks sends each published HTTP/2 attack on one connection while
// a second connection makes victimCalls calls, on both transports (and
// the native one answering inline or on goroutines): the attacked
// connection is closed or the attack harmless, the victim's p99 stays
// within 2× of its unattacked p99 (plus latencySlack for the scheduler
// of a two-core machine), with no error, the server's RSS grows by at
// most maxRSSGrowth, and no more handlers run at once than
// MaxConcurrentStreams.
func TestAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes; run without -short")
	}
	if israce.Enabled {
		t.Skip("latency and memory under -race are not the server's; make test runs this without it")
	}
	for _, kind := range []string{"native", "native-inline", "grpc-go"} {
		t.Run(kind, func(t *testing.T) {
			for _, at := range attacks {
				t.Run(at.name, func(t *testing.T) { runAttack(t, kind, at) })
			}
		})
	}
}

func runAttack(t *testing.T, kind string, at attack) {
	child := startAttackChild(t, kind)
	cc, err := grpc.NewClient(child.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	victim(t, cc, 200) // warm up
	base := p99(victim(t, cc, victimCalls))
	child.stats(t, cc)
	rss0 := child.rss(t)

	a := dialAttacker(t, child.addr)
	defer a.nc.Close()
	_ = a.nc.SetWriteDeadline(time.Now().Add(attackFor + time.Second))
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			peak.Store(max(peak.Load(), child.rss(t)))
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	attackErr := make(chan error, 1)
	go func() { attackErr <- at.run(a, time.Now().Add(attackFor)) }()
	lat := victim(t, cc, victimCalls)
	aerr := <-attackErr
	wait := closeDeadline
	if kind == "grpc-go" {
		wait = grpcGoCloseWait
	}
	closed := closedByServer(a.nc, wait)
	close(stop)
	wg.Wait()

	st := child.stats(t, cc)
	got := p99(lat)
	t.Logf("%s, %s: sent %d bytes (%v); closed: %v; victim p99 %v (unattacked %v); RSS +%d KiB; most handlers at once %d",
		kind, at.name, a.n, aerr, closed, got, base, (peak.Load()-rss0)>>10, st.MaxHandlers)
	switch {
	case got <= 2*base+latencySlack:
	case kind == "grpc-go" && at.grpcGo != "":
		t.Logf("grpc-go: the other connection's p99 = %v under attack, above 2 × %v + %v: known, %s", got, base, latencySlack, at.grpcGo)
	default:
		t.Errorf("the other connection's p99 = %v under attack, want ≤ 2 × %v + %v", got, base, latencySlack)
	}
	if grow := peak.Load() - rss0; grow > maxRSSGrowth {
		if kind == "grpc-go" && at.grpcGo != "" {
			t.Logf("grpc-go: the server's RSS grew by %d MiB, above %d MiB: known, %s", grow>>20, maxRSSGrowth>>20, at.grpcGo)
		} else {
			t.Errorf("the server's RSS grew by %d MiB, want ≤ %d MiB", grow>>20, maxRSSGrowth>>20)
		}
	}
	if st.MaxHandlers > attackMaxStreams+1 { // +1: the victim's own call
		t.Errorf("%d handlers ran at once, want ≤ MaxConcurrentStreams (%d) + the victim's", st.MaxHandlers, attackMaxStreams)
	}
	if kind != "grpc-go" && at.closes && !closed {
		t.Errorf("the attacked connection is still open %v after the attack", closeDeadline)
	}
}

// victim makes n calls of Fast one after another and returns their
// latencies; any error fails the test.
func victim(t *testing.T, cc *grpc.ClientConn, n int) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, 0, n)
	out := new(wrapperspb.BytesValue)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t0 := time.Now()
		err := cc.Invoke(ctx, "/test.Attack/Fast", wrapperspb.Bytes([]byte("v")), out)
		lat = append(lat, time.Since(t0))
		cancel()
		if err != nil {
			t.Fatalf("a call on the other connection failed: %v", err)
		}
	}
	return lat
}

func p99(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// closedByServer reads what the server sent until the connection ends:
// true when it ended (the server closed it) within wait.
func closedByServer(nc net.Conn, wait time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, nc)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}
