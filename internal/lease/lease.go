package lease

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// DefaultTTL is how long a lease settles when LEASE_TTL is unset.
const DefaultTTL = 15 * time.Minute

// MaxTTL is the longest LEASE_TTL accepted: a store keeps every settled
// lease id until the lease expires.
const MaxTTL = 24 * time.Hour

// Limit is one limit of a leased bucket: its name in the bucket item, its
// shape, and the estimate debited.
type Limit struct {
	Name     string
	Bucket   tokenbucket.Limit
	Estimate tokenbucket.Millitokens
	// Adjustment is the name of the adjustment that settles the limit when
	// it is not Name (a rule's unnamed limit, selected by its descriptor
	// path); empty otherwise.
	Adjustment string
	// Money is set for a limit in dollars (descriptors.Limit.Money), and
	// Price is then the price of the request's resource at its admission:
	// its settlement charges the reported tokens at that price, whatever
	// the prices are when it settles. Price is zero when Money is not set.
	Money bool
	Price descriptors.Price
}

// Bucket is one bucket item the admission debited.
type Bucket struct {
	Key    cascade.Key
	Shard  int
	Limits []Limit
}

// Lease is what an admission debited, for a settlement after the response.
type Lease struct {
	// ID names the lease and the settlement of it: 1 to
	// cascade.MaxSettlementID bytes (NewID makes one).
	ID string
	// Domain is the rate-limit domain of the admission.
	Domain string
	// Expires is when the lease stops settling; a token keeps it to the
	// millisecond.
	Expires time.Time
	// Buckets are the bucket items debited, every level of a chain.
	Buckets []Bucket
}

// Errors that Verify wraps, exactly one per failure. Reason names each.
var (
	// ErrMalformed: the token does not decode (bad base64, a count or a
	// length out of bounds, a limit tokenbucket would refuse, bytes left
	// over) or is larger than MaxTokenBytes.
	ErrMalformed = errors.New("lease: malformed token")
	// ErrUnknownKey: the token names a key the keyring does not hold
	// (signed by another deployment, or by a key rotated out).
	ErrUnknownKey = errors.New("lease: signed by an unknown key")
	// ErrBadSignature: the key is known and the signature does not match:
	// a forged or altered token.
	ErrBadSignature = errors.New("lease: bad signature")
	// ErrExpired: a genuine lease whose expiry has passed.
	ErrExpired = errors.New("lease: expired")
)

// Reason returns the metric label of a Verify error: "malformed",
// "bad_signature", "unknown_key" or "expired"; "" for nil. An error that
// wraps none of them (Verify returns none such) is "malformed".
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, ErrUnknownKey):
		return "unknown_key"
	}
	return "malformed"
}

// idBytes is the size of an id before encoding: 96 bits, so that ids
// drawn by every process that ever ran collide with negligible odds.
const idBytes = 12

// idSource draws ids: AES-128 of a counter under a key drawn from
// crypto/rand once per process. AES is a permutation, so a process never
// repeats a block; the first 12 bytes of distinct blocks collide with odds
// of 2^-96 per pair, within a process and across processes alike.
var idSource struct {
	block   cipher.Block
	counter atomic.Uint64
}

func init() {
	var key [16]byte
	_, _ = rand.Read(key[:]) // never fails (crypto/rand panics rather than return short)
	b, err := aes.NewCipher(key[:])
	if err != nil {
		panic("lease: " + err.Error()) // unreachable: a 16-byte key is valid
	}
	idSource.block = b
}

// NewID returns a new lease id, unique across replicas and restarts: 16
// printable characters (12 bytes, base64url without padding). It is safe
// for concurrent use.
func NewID() string {
	var in, out [aes.BlockSize]byte
	binary.BigEndian.PutUint64(in[:8], idSource.counter.Add(1))
	idSource.block.Encrypt(out[:], in[:])
	return base64.RawURLEncoding.EncodeToString(out[:idBytes])
}
