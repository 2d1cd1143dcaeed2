package lease

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"sync"
	"time"
)

// MinKeyBytes is the shortest signing key accepted: 256 bits, HMAC-SHA256's
// output size.
const MinKeyBytes = 32

// encoding is base64url without padding, strict: trailing bits must be
// zero, so that one token has one spelling (newlines, which Go's decoder
// skips, are refused before decoding).
var encoding = base64.RawURLEncoding.Strict()

// key is one HMAC key with its id and a pool of HMACs keyed by it (an HMAC
// that is Reset restarts from its keyed state, sparing the key schedule).
type key struct {
	id   [keyIDBytes]byte
	pool sync.Pool
}

func newKey(secret []byte) *key {
	k := &key{}
	sum := sha256.Sum256(secret)
	copy(k.id[:], sum[:keyIDBytes])
	secret = append([]byte(nil), secret...)
	k.pool.New = func() any { return hmac.New(sha256.New, secret) }
	return k
}

// mac appends the truncated HMAC-SHA256 of msg to dst.
func (k *key) mac(dst, msg []byte) []byte {
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	k.pool.Put(h)
	return append(dst, out[:macBytes]...)
}

// Keyring signs leases with its current key and verifies them with the
// current key or any previous one. It is immutable and safe for concurrent
// use.
type Keyring struct {
	keys []*key // keys[0] is the current key
}

// NewKeyring returns a keyring that signs with current and verifies with
// current and every previous key. Every key must be at least MinKeyBytes
// long; a previous key equal to another key is dropped; two distinct keys
// whose ids collide (odds 2^-32) are refused, one of them must be replaced.
func NewKeyring(current []byte, previous ...[]byte) (*Keyring, error) {
	k := &Keyring{}
	seen := map[[keyIDBytes]byte][]byte{}
	for i, secret := range append([][]byte{current}, previous...) {
		if len(secret) < MinKeyBytes {
			which := "the signing key"
			if i > 0 {
				which = fmt.Sprintf("previous key %d", i)
			}
			return nil, fmt.Errorf("lease: %s is %d bytes, want at least %d (e.g. openssl rand -base64 48)", which, len(secret), MinKeyBytes)
		}
		kk := newKey(secret)
		if other, ok := seen[kk.id]; ok {
			if hmac.Equal(other, secret) {
				continue
			}
			return nil, fmt.Errorf("lease: previous key %d has the key id of another key; generate another", i)
		}
		seen[kk.id] = secret
		k.keys = append(k.keys, kk)
	}
	return k, nil
}

// Generated returns a keyring with one random key, for a service with no
// key configured: its leases verify on this process only, until it exits.
func Generated() (*Keyring, error) {
	secret := make([]byte, MinKeyBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("lease: generate a key: %w", err)
	}
	return NewKeyring(secret)
}

// KeyID returns the id of the current key as 8 hex digits: the first 4
// bytes of its SHA-256, as tokens carry it. It names a key in logs without
// revealing it.
func (k *Keyring) KeyID() string {
	return fmt.Sprintf("%x", k.keys[0].id)
}

// Sign returns the token of l, signed with the current key. It fails when
// l cannot be verified: an id empty or longer than
// cascade.MaxSettlementID, an expiry not after 1970, a limit tokenbucket
// refuses, a negative or too large estimate, a negative shard, or a lease
// past the token's bounds (ErrTooLarge). Expires is kept to the
// millisecond.
func (k *Keyring) Sign(l *Lease) (string, error) {
	if err := check(l); err != nil {
		return "", err
	}
	cur := k.keys[0]
	b := make([]byte, 0, 256)
	b = append(b, versionOf(l))
	b = append(b, cur.id[:]...)
	b = appendBody(b, l)
	b = cur.mac(b, b)
	if len(b) > maxEncoded {
		return "", fmt.Errorf("%w: a token of %d characters (at most %d)", ErrTooLarge, encoding.EncodedLen(len(b)), MaxTokenBytes)
	}
	return encoding.EncodeToString(b), nil
}

// Verify returns the lease of token, checking in order that it is a token
// of a version this package reads (ErrMalformed), that its key is in the keyring
// (ErrUnknownKey), that its signature matches (ErrBadSignature, compared in
// constant time), that its body decodes (ErrMalformed; nothing unsigned is
// parsed) and that it has not expired at now (ErrExpired: now is at or
// after Expires). The error wraps exactly one of them; the lease is nil
// with any error.
func (k *Keyring) Verify(token string, now time.Time) (*Lease, error) {
	b, err := decodeToken(token)
	if err != nil {
		return nil, err
	}
	body := b[:len(b)-macBytes]
	kk := k.find([keyIDBytes]byte(body[1:headBytes]))
	if kk == nil {
		return nil, fmt.Errorf("%w: key id %x", ErrUnknownKey, body[1:headBytes])
	}
	var sum [macBytes]byte
	if !hmac.Equal(kk.mac(sum[:0], body), b[len(body):]) {
		return nil, ErrBadSignature
	}
	l, err := decodeBody(body[0], body[headBytes:])
	if err != nil {
		return nil, err
	}
	if !now.Before(l.Expires) {
		return nil, fmt.Errorf("%w: at %s", ErrExpired, l.Expires.UTC().Format(time.RFC3339Nano))
	}
	return l, nil
}

// decodeToken checks a token's size and alphabet and returns its bytes,
// at least a header and a signature long, of a version this package reads.
func decodeToken(token string) ([]byte, error) {
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: %d characters (at most %d)", ErrMalformed, len(token), MaxTokenBytes)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, fmt.Errorf("%w: byte %d is not base64url", ErrMalformed, i)
		}
	}
	b, err := encoding.DecodeString(token)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case len(b) < headBytes+macBytes:
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	case b[0] != version1 && b[0] != version2:
		return nil, fmt.Errorf("%w: version %d (want %d or %d)", ErrMalformed, b[0], version1, version2)
	}
	return b, nil
}

// find returns the key whose id is id, or nil.
func (k *Keyring) find(id [keyIDBytes]byte) *key {
	for _, kk := range k.keys {
		if kk.id == id {
			return kk
		}
	}
	return nil
}
