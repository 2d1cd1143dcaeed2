package grpcserver

import (
	"time"

	"golang.org/x/net/http2"
)

// The bounds every connection keeps, whatever its client sends. Each is
// the bound grpc-go's server, Go's HTTP/2 server or hyper keeps against a
// published attack; docs/operations.md states what they add up to.
const (
	// maxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE: a request's
	// header list larger than this is answered with an error. A header
	// block (of any stream: a request, trailers, a refused or a reset
	// stream) whose encoded or decoded size passes maxHeaderBlock ends the
	// connection: the CONTINUATION flood (CVE-2023-45288), and HPACK bombs
	// (a few bytes that decode to a large list).
	maxHeaderListSize = 1 << 20
	maxHeaderBlock    = 2 * maxHeaderListSize

	// maxWriteQueue bounds the bytes queued to the client: past it, the
	// reader stops reading until the queue has been written (grpc-go stops
	// at 50 queued control frames). A client that stops reading is cut by
	// the write deadline (Keepalive.Timeout) instead of growing the queue.
	maxWriteQueue = 256 << 10

	// maxConnBuffered bounds the request bytes one connection holds at
	// once: partial requests, messages waiting for a streaming handler,
	// and the requests of handlers still running. A DATA frame that would
	// pass it fails its call with ResourceExhausted.
	maxConnBuffered = 16 << 20

	// Stream resets, by the client (RST_STREAM of a call not yet answered,
	// within rapidResetAge of its HEADERS) or caused by it (a stream error
	// this side answers with RST_STREAM, or a call refused because the
	// slots are full): beyond resetBurst at once, refilled at resetRate a
	// second, the connection ends with ENHANCE_YOUR_CALM. Rapid reset
	// (CVE-2023-44487) and MadeYouReset (CVE-2025-8671). A reset later
	// than rapidResetAge is a cancellation (Envoy's timeout when the store
	// is slow): the client could as well have let the call end, and it
	// costs nothing more than a call.
	resetBurst    = 1000
	resetRate     = 1000
	rapidResetAge = 10 * time.Millisecond

	// Frames that ask for work and carry no call: SETTINGS, PRIORITY,
	// RST_STREAM of a stream already closed, empty DATA, HEADERS or
	// CONTINUATION frames that end nothing, and WINDOW_UPDATEs beyond the
	// two (stream and connection) each DATA frame sent may earn
	// (CVE-2019-9513, -9514, -9515, -9518). Pings have their own policy
	// (Options.KeepalivePolicy).
	junkBurst = 10000
	junkRate  = 10000

	// maxPingStrikes is grpc-go's: a third ping too soon ends the
	// connection with GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
	maxPingStrikes = 2
	// pingWithoutStreamFloor is grpc-go's: without a call open, and
	// without PermitWithoutStream, a client may ping once every two hours.
	pingWithoutStreamFloor = 2 * time.Hour

	// Defaults of grpc-go's keepalive.ServerParameters and
	// EnforcementPolicy (their zero values).
	defaultKeepaliveTime    = 2 * time.Hour
	defaultKeepaliveTimeout = 20 * time.Second
	defaultKeepaliveMinTime = 5 * time.Minute
)

// calmError ends a connection whose client passed a budget: GOAWAY with
// code and debug data, then close.
type calmError struct {
	code  http2.ErrCode
	debug string
}

func (e calmError) Error() string { return "grpcserver: " + e.debug }

var (
	errTooManyResets = calmError{http2.ErrCodeEnhanceYourCalm, "too_many_resets"}
	errTooManyFrames = calmError{http2.ErrCodeEnhanceYourCalm, "too_many_control_frames"}
	errTooManyPings  = calmError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
	errHeaderFlood   = calmError{http2.ErrCodeEnhanceYourCalm, "header_block_too_large"}
)

// budget is a token bucket in whole tokens: burst at most, refilled at
// rate a second. The zero value of last starts it full.
type budget struct {
	tokens int
	last   time.Time
}

// take spends one token at now; false when none is left.
func (b *budget) take(now time.Time, burst, rate int) bool {
	if b.last.IsZero() {
		b.tokens, b.last = burst, now
	} else if d := now.Sub(b.last); d > 0 {
		add := int(min(d, time.Minute) * time.Duration(rate) / time.Second)
		if add > 0 {
			b.tokens = min(burst, b.tokens+add)
			b.last = now
		}
	}
	if b.tokens == 0 {
		return false
	}
	b.tokens--
	return true
}

// spendReset counts a reset against the connection's budget; c.mu held.
func (c *conn) spendResetLocked() error {
	if !c.resets.take(time.Now(), resetBurst, resetRate) {
		return errTooManyResets
	}
	return nil
}

// spendJunk counts a frame that carries no call; the reader's.
func (c *conn) spendJunk() error {
	if !c.junk.take(time.Now(), junkBurst, junkRate) {
		return errTooManyFrames
	}
	return nil
}

// checkPing applies the ping policy to a client's ping, as grpc-go's
// server does: a ping sooner than MinTime after the last one, with no
// headers or data sent in between, is a strike; so is any ping within two
// hours while no call is open, unless PermitWithoutStream. c.mu held.
func (c *conn) checkPingLocked(now time.Time) error {
	defer func() { c.lastPingAt = now }()
	if c.sentSincePing {
		c.sentSincePing, c.pingStrikes = false, 0
		return nil
	}
	floor := c.s.o.KeepalivePolicy.MinTime
	if c.slots == 0 && !c.s.o.KeepalivePolicy.PermitWithoutStream {
		floor = max(floor, pingWithoutStreamFloor)
	}
	if c.lastPingAt.Add(floor).After(now) {
		c.pingStrikes++
	}
	if c.pingStrikes > maxPingStrikes {
		return errTooManyPings
	}
	return nil
}
