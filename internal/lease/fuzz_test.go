package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// fuzzLeases are the leases whose tokens seed FuzzVerify.
func fuzzLeases(t testing.TB) []*Lease {
	odd := tokenbucket.Limit{Capacity: 1001, RefillAmount: 7, RefillPeriod: 1234 * time.Millisecond}
	return []*Lease{
		chainLease(t),
		moneyLease(t),
		{ID: "x", Domain: "d", Expires: t0.Add(time.Second)},
		{ID: "y", Expires: t0.Add(time.Hour), Buckets: []Bucket{{}}},
		{ID: "eevKw6-Qq2oTOsv9", Domain: "llm", Expires: t0.Add(time.Minute), Buckets: []Bucket{{
			Key:    cascade.Key{Namespace: "ns", Entity: "e", Resource: "r"},
			Shard:  31,
			Limits: []Limit{{Name: "odd", Bucket: odd, Estimate: 999}, {Name: "default", Adjustment: "route-usage", Bucket: odd}},
		}}},
	}
}

// FuzzVerify feeds Verify arbitrary tokens, seeded with genuine ones and
// some of their mutations: it never panics, reports exactly one reason
// for a refusal, and accepts only a token Sign produced (a seed), whose
// lease signs back to the same token.
func FuzzVerify(f *testing.F) {
	k := mustKeyring(f, keyA, keyB)
	genuine := map[string]bool{}
	for _, l := range fuzzLeases(f) {
		for _, signer := range []*Keyring{k, mustKeyring(f, keyB), mustKeyring(f, keyC)} {
			tok := mustSign(f, signer, l)
			if signer != k && signer.keys[0].id != k.keys[1].id {
				f.Add(tok) // an unknown key
				continue
			}
			genuine[tok] = true
			f.Add(tok)
			f.Add(tok[:len(tok)/2])
			f.Add(tok + "A")
		}
	}
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, token string) {
		l, err := k.Verify(token, t0)
		if err != nil {
			if l != nil {
				t.Fatalf("Verify = %+v with error %v", l, err)
			}
			if !isOneOf(err, []error{ErrMalformed, ErrBadSignature, ErrUnknownKey, ErrExpired}) {
				t.Fatalf("Verify error %v wraps not exactly one sentinel", err)
			}
			return
		}
		if !genuine[token] {
			t.Fatalf("Verify accepted %q, which Sign did not produce: %+v", token, l)
		}
		signer := k
		if b, _ := encoding.DecodeString(token); [keyIDBytes]byte(b[1:headBytes]) != k.keys[0].id {
			signer = mustKeyring(t, keyB)
		}
		if again := mustSign(t, signer, l); again != token {
			t.Fatalf("Sign(Verify(token)) = %q, want %q", again, token)
		}
	})
}

// FuzzDecodeBody feeds the body decoder arbitrary bytes, as if signed
// (Verify parses nothing unsigned, so FuzzVerify rarely reaches it), in
// either format (the first byte picks it): it never panics, fails only with
// ErrMalformed, and whatever it decodes is a lease Sign accepts and that
// verifies back to itself.
func FuzzDecodeBody(f *testing.F) {
	for _, l := range fuzzLeases(f) {
		body := appendBody([]byte{versionOf(l)}, l)
		f.Add(body)
		f.Add(body[:len(body)-1])
		f.Add(append([]byte{version1 + version2 - body[0]}, body[1:]...)) // the other format
	}
	k := mustKeyring(f, keyA)
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) == 0 {
			return
		}
		l, err := decodeBody(version1+body[0]%2, body[1:])
		if err != nil {
			if l != nil || !isOneOf(err, []error{ErrMalformed}) {
				t.Fatalf("decodeBody = %+v, %v; want nil, ErrMalformed", l, err)
			}
			return
		}
		tok, err := k.Sign(l)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return // a body near the bound, its id and strings re-encoded
			}
			t.Fatalf("decodeBody gave %+v, which Sign refuses: %v", l, err)
		}
		got, err := k.Verify(tok, l.Expires.Add(-time.Millisecond))
		if err != nil || !sameLease(got, l) {
			t.Fatalf("Verify(Sign(decodeBody)) = %+v, %v; want %+v", got, err, l)
		}
	})
}
