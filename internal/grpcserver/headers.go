package grpcserver

import (
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// Header blocks are checked as RFC 9113 §8.2–8.3 requires of a request and
// its trailers. A block that breaks a rule is malformed: its stream is
// reset with PROTOCOL_ERROR (a stream error, §8.1.1), as Go's HTTP/2 server
// and grpc-go answer it, and the connection goes on.

// Pseudo-header fields of a request, as bits of block.pseudo.
const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

// block is what the reader knows of the header block it is decoding.
type block struct {
	// raw counts the block's encoded bytes (HEADERS and CONTINUATION
	// payloads), decoded the size of its fields as SETTINGS_MAX_HEADER_LIST_SIZE
	// counts them (name + value + 32 each); both count for blocks no call
	// reads (trailers, refused and reset streams), so that a flood of
	// CONTINUATION frames is bounded whatever stream it names.
	raw, decoded int
	pseudo       int  // the pseudo-header fields seen
	regular      bool // a regular field has been seen
	malformed    bool
	// rst, when not zero, resets the stream once the block has been
	// decoded (the block must be decoded all the same: HPACK's table
	// is the connection's).
	rst http2.ErrCode
}

// checkField checks one field of a request's header block (trailers when
// trailers is set) and notes in b whether the block is malformed.
func (b *block) checkField(name, value string, trailers bool) {
	if name == "" {
		b.malformed = true
		return
	}
	if name[0] == ':' {
		if trailers || b.regular {
			b.malformed = true // §8.3: pseudo-headers come first, and never in trailers
			return
		}
		bit := 0
		switch name {
		case ":method":
			bit = pseudoMethod
		case ":scheme":
			bit = pseudoScheme
		case ":path":
			bit = pseudoPath
		case ":authority":
			bit = pseudoAuthority
		}
		if bit == 0 || b.pseudo&bit != 0 || value == "" && bit != pseudoAuthority {
			b.malformed = true // unknown, duplicated or empty (§8.3.1)
			return
		}
		b.pseudo |= bit
	} else {
		b.regular = true
		if !validFieldName(name) {
			b.malformed = true
			return
		}
		switch name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			b.malformed = true // §8.2.2: connection-specific fields
			return
		case "te":
			if value != "trailers" {
				b.malformed = true
				return
			}
		}
	}
	if !httpguts.ValidHeaderFieldValue(value) || value != "" && (isSpace(value[0]) || isSpace(value[len(value)-1])) {
		b.malformed = true // §8.2.1
	}
}

// complete reports whether a request's block had every pseudo-header a
// request needs (§8.3.1: CONNECT is not served here).
func (b *block) complete() bool {
	const need = pseudoMethod | pseudoScheme | pseudoPath
	return b.pseudo&need == need
}

// validFieldName reports a regular field name RFC 9113 accepts: a token
// (RFC 9110) with no upper-case letter (§8.2).
func validFieldName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' || !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }
