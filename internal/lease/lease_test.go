package lease

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/pkg/cascade"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// t0 is the instant the tests sign at; leases expire 15 minutes later.
var t0 = time.UnixMilli(1_790_000_000_123)

var (
	keyA = []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") // 48 bytes
	keyB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	keyC = []byte("cccccccccccccccccccccccccccccccccccccccccccccccc")
)

func mustKeyring(t testing.TB, current []byte, previous ...[]byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustLimit(t testing.TB, perPeriod uint64, period time.Duration) tokenbucket.Limit {
	t.Helper()
	l, err := tokenbucket.Rate(perPeriod, period, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// chainLease is the lease of an LLM request admitted on a three-level chain
// (key → project → tenant), each level with a request limit and a token
// limit: the shape the issue measures.
func chainLease(t testing.TB) *Lease {
	t.Helper()
	rpm, tpm := mustLimit(t, 600, time.Minute), mustLimit(t, 100_000, time.Minute)
	bucket := func(entity string, shard int) Bucket {
		return Bucket{
			Key:   cascade.Key{Namespace: "default", Entity: entity, Resource: "gpt-4o"},
			Shard: shard,
			Limits: []Limit{
				{Name: "rpm", Bucket: rpm, Estimate: 1 * tokenbucket.PerToken},
				{Name: "tpm", Bucket: tpm, Estimate: 500 * tokenbucket.PerToken},
			},
		}
	}
	return &Lease{
		ID:      "AAECAwQFBgcICQoL", // NewID's shape: 16 characters
		Domain:  "llm",
		Expires: t0.Add(DefaultTTL),
		Buckets: []Bucket{bucket("key-7f3a9c", 0), bucket("proj-payments", 3), bucket("tenant-acme", 1)},
	}
}

func mustSign(t testing.TB, k *Keyring, l *Lease) string {
	t.Helper()
	tok, err := k.Sign(l)
	if err != nil {
		t.Fatalf("Sign(%+v) = %v", l, err)
	}
	return tok
}

// sameLease reports whether two leases are equal, expiries compared as
// instants.
func sameLease(a, b *Lease) bool {
	if !a.Expires.Equal(b.Expires) {
		return false
	}
	x, y := *a, *b
	x.Expires, y.Expires = time.Time{}, time.Time{}
	if len(x.Buckets) == 0 && len(y.Buckets) == 0 {
		x.Buckets, y.Buckets = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

func TestRoundTrip(t *testing.T) {
	k := mustKeyring(t, keyA)
	odd, err := tokenbucket.NewLimit(1, tokenbucket.MaxMillitokens, tokenbucket.MaxPeriod)
	if err != nil {
		t.Fatal(err)
	}
	cal, err := tokenbucket.NewCalendar(tokenbucket.Monthly, "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	usd, err := tokenbucket.Budget(2_000_000_000*tokenbucket.PerToken, cal, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		l    *Lease
	}{
		{"chain", chainLease(t)},
		{"a calendar budget beside a rate", &Lease{ID: "c", Domain: "llm", Expires: t0.Add(time.Minute),
			Buckets: []Bucket{{Key: cascade.Key{Entity: "team"}, Limits: []Limit{
				{Name: "monthly_usd", Bucket: usd, Estimate: 900_000_000},
				{Name: "tpm", Bucket: mustLimit(t, 10, time.Second), Estimate: 1000},
			}}}}},
		{"an adjustment named apart from its limit", &Lease{ID: "z", Domain: "default/eg/http", Expires: t0.Add(time.Minute),
			Buckets: []Bucket{{Key: cascade.Key{Entity: "e"}, Limits: []Limit{
				{Name: "default", Adjustment: "route-usage", Bucket: mustLimit(t, 10, time.Second), Estimate: 3},
				{Name: "tpm", Bucket: mustLimit(t, 10, time.Second)},
			}}}}},
		{"no buckets", &Lease{ID: "x", Domain: "d", Expires: t0.Add(time.Second)}},
		{"empty strings and a bucket with no limit", &Lease{ID: "y", Expires: t0.Add(time.Hour), Buckets: []Bucket{{}}}},
		{"extreme numbers", &Lease{
			ID: strings.Repeat("i", cascade.MaxSettlementID), Domain: "ドメイン", Expires: t0.Add(MaxTTL),
			Buckets: []Bucket{{
				Key:   cascade.Key{Namespace: "n\x00s", Entity: "e|ntity", Resource: "r"},
				Shard: MaxShard,
				Limits: []Limit{
					{Name: "odd", Bucket: odd, Estimate: tokenbucket.MaxMillitokens},
					{Name: "odd", Bucket: odd, Estimate: 0},
					{Name: "one", Bucket: tokenbucket.Limit{Capacity: 1001, RefillAmount: 999, RefillPeriod: 1001 * time.Millisecond}, Estimate: 7},
				},
			}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := mustSign(t, k, tc.l)
			got, err := k.Verify(tok, t0)
			if err != nil {
				t.Fatalf("Verify(Sign(l)) = %v", err)
			}
			if !sameLease(got, tc.l) {
				t.Errorf("Verify(Sign(l)) = %+v, want %+v", got, tc.l)
			}
			if again := mustSign(t, k, got); again != tok {
				t.Errorf("Sign(Verify(token)) = %s, want the token again %s", again, tok)
			}
		})
	}
}

func TestExpiresToTheMillisecond(t *testing.T) {
	k := mustKeyring(t, keyA)
	l := chainLease(t)
	l.Expires = t0.Add(DefaultTTL + 999*time.Microsecond)
	got, err := k.Verify(mustSign(t, k, l), t0)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(DefaultTTL); !got.Expires.Equal(want) {
		t.Errorf("Expires = %s, want %s (truncated to the millisecond)", got.Expires, want)
	}
}

func TestSignRefuses(t *testing.T) {
	k := mustKeyring(t, keyA)
	for _, tc := range []struct {
		name    string
		edit    func(l *Lease)
		tooLarg bool
	}{
		{"empty id", func(l *Lease) { l.ID = "" }, false},
		{"long id", func(l *Lease) { l.ID = strings.Repeat("x", cascade.MaxSettlementID+1) }, false},
		{"zero expiry", func(l *Lease) { l.Expires = time.Time{} }, false},
		{"expiry at the epoch", func(l *Lease) { l.Expires = time.UnixMilli(0) }, false},
		{"negative shard", func(l *Lease) { l.Buckets[1].Shard = -1 }, false},
		{"shard past MaxShard", func(l *Lease) { l.Buckets[1].Shard = MaxShard + 1 }, true},
		{"zero limit", func(l *Lease) { l.Buckets[2].Limits[0].Bucket = tokenbucket.Limit{} }, false},
		{"sub-millisecond period", func(l *Lease) { l.Buckets[2].Limits[0].Bucket.RefillPeriod += time.Microsecond }, false},
		{"negative estimate", func(l *Lease) { l.Buckets[0].Limits[1].Estimate = -1 }, false},
		{"estimate past MaxMillitokens", func(l *Lease) { l.Buckets[0].Limits[1].Estimate = tokenbucket.MaxMillitokens + 1 }, false},
		{"too many buckets", func(l *Lease) { l.Buckets = make([]Bucket, MaxBuckets+1) }, true},
		{"too many limits", func(l *Lease) { l.Buckets[0].Limits = make([]Limit, MaxLimits+1) }, true},
		{"too many characters", func(l *Lease) { l.Buckets[0].Key.Entity = strings.Repeat("e", maxEncoded) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := chainLease(t)
			tc.edit(l)
			tok, err := k.Sign(l)
			if err == nil {
				t.Fatalf("Sign = %q, want an error", tok)
			}
			if !strings.HasPrefix(err.Error(), "lease: ") {
				t.Errorf("Sign error %q lacks the package prefix", err)
			}
			if errors.Is(err, ErrTooLarge) != tc.tooLarg {
				t.Errorf("Sign = %v; wraps ErrTooLarge: %v, want %v", err, !tc.tooLarg, tc.tooLarg)
			}
		})
	}
}

func TestLargestTokenVerifies(t *testing.T) {
	k := mustKeyring(t, keyA)
	l := chainLease(t)
	// Grow an entity until the token reaches MaxTokenBytes exactly.
	for n := 0; ; n++ {
		l.Buckets[0].Key.Entity = strings.Repeat("e", n)
		tok, err := k.Sign(l)
		if err != nil {
			if !errors.Is(err, ErrTooLarge) {
				t.Fatal(err)
			}
			break
		}
		if len(tok) > MaxTokenBytes-4 {
			if _, err := k.Verify(tok, t0); err != nil {
				t.Fatalf("Verify(token of %d characters) = %v", len(tok), err)
			}
		}
	}
}

// expectedError is what Verify must report for a token whose decoded bytes
// are b where the genuine token's are orig: malformed when the version
// changed to one this package does not read or b does not decode, an
// unknown key when the key id changed, else a bad signature (the version
// byte is signed).
func expectedError(orig, b []byte, decodes bool) []error {
	switch {
	case !decodes || len(b) != len(orig):
		return []error{ErrMalformed, ErrBadSignature}
	case b[0] != version1 && b[0] != version2:
		return []error{ErrMalformed}
	case string(b[1:headBytes]) != string(orig[1:headBytes]):
		// The key id changed: the signature is never checked against a
		// key the keyring does not hold.
		return []error{ErrUnknownKey}
	}
	return []error{ErrBadSignature}
}

func TestEverySingleByteChangeFails(t *testing.T) {
	k := mustKeyring(t, keyA)
	tok := mustSign(t, k, chainLease(t))
	orig, err := encoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	others := alphabet + "=+/ \n\r\x00\xff."
	seen := map[string]int{}
	for i := 0; i < len(tok); i++ {
		for j := 0; j < len(others); j++ {
			if others[j] == tok[i] {
				continue
			}
			bad := tok[:i] + others[j:j+1] + tok[i+1:]
			l, err := k.Verify(bad, t0)
			if err == nil {
				t.Fatalf("Verify(token with byte %d = %q) accepted %+v", i, others[j], l)
			}
			b, decErr := encoding.DecodeString(bad)
			want := expectedError(orig, b, decErr == nil && strings.IndexByte(alphabet, others[j]) >= 0)
			if !isOneOf(err, want) {
				t.Fatalf("Verify(token with byte %d = %q) = %v, want one of %v", i, others[j], err, want)
			}
			seen[Reason(err)]++
		}
	}
	t.Logf("%d characters, reasons %v", len(tok), seen)
	if seen["malformed"] == 0 || seen["bad_signature"] == 0 || seen["unknown_key"] == 0 {
		t.Errorf("reasons %v: want every change of the body, the key id and the encoding seen", seen)
	}
}

func isOneOf(err error, targets []error) bool {
	n := 0
	for _, e := range []error{ErrMalformed, ErrBadSignature, ErrUnknownKey, ErrExpired} {
		if errors.Is(err, e) {
			n++
		}
	}
	if n != 1 {
		return false
	}
	for _, e := range targets {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func TestEveryTruncationFails(t *testing.T) {
	k := mustKeyring(t, keyA)
	tok := mustSign(t, k, chainLease(t))
	for i := range len(tok) {
		l, err := k.Verify(tok[:i], t0)
		if err == nil {
			t.Fatalf("Verify(first %d characters) accepted %+v", i, l)
		}
		if !isOneOf(err, []error{ErrMalformed, ErrBadSignature}) {
			t.Fatalf("Verify(first %d characters) = %v, want malformed or a bad signature", i, err)
		}
	}
	for _, extra := range []string{"A", "AA", "AAA", "AAAA", tok} {
		if _, err := k.Verify(tok+extra, t0); !isOneOf(err, []error{ErrMalformed, ErrBadSignature}) {
			t.Errorf("Verify(token + %d characters) = %v, want malformed or a bad signature", len(extra), err)
		}
	}
}

func TestUnknownKey(t *testing.T) {
	tok := mustSign(t, mustKeyring(t, keyB), chainLease(t))
	_, err := mustKeyring(t, keyA, keyC).Verify(tok, t0)
	if !isOneOf(err, []error{ErrUnknownKey}) {
		t.Fatalf("Verify(token of another key) = %v, want ErrUnknownKey", err)
	}
	if Reason(err) != "unknown_key" {
		t.Errorf("Reason = %q, want unknown_key", Reason(err))
	}
}

// TestRotation walks a fleet through a rotation from key A to key B: every
// token signed at any step verifies at every later step until A is
// dropped, and only the current key signs.
func TestRotation(t *testing.T) {
	steps := []*Keyring{
		mustKeyring(t, keyA),       // before
		mustKeyring(t, keyA, keyB), // 1: B added as a previous key everywhere
		mustKeyring(t, keyB, keyA), // 2: B made current everywhere
		mustKeyring(t, keyB),       // 3: A dropped once its leases expired
	}
	signedBy := []string{"A", "A", "B", "B"}
	for i, signer := range steps {
		tok := mustSign(t, signer, chainLease(t))
		for j, verifier := range steps {
			_, err := verifier.Verify(tok, t0)
			knows := signedBy[i] == "B" && j >= 1 || signedBy[i] == "A" && j <= 2
			if knows && err != nil {
				t.Errorf("a token of step %d (key %s) at step %d: %v, want it verified", i, signedBy[i], j, err)
			}
			if !knows && !errors.Is(err, ErrUnknownKey) {
				t.Errorf("a token of step %d (key %s) at step %d: %v, want ErrUnknownKey", i, signedBy[i], j, err)
			}
		}
	}
	if a, b := mustKeyring(t, keyA).KeyID(), steps[2].KeyID(); steps[1].KeyID() != a || b == a {
		t.Errorf("KeyID at steps 1, 2 = %s, %s; want A's %s then another", steps[1].KeyID(), b, a)
	}
}

func TestExpired(t *testing.T) {
	k := mustKeyring(t, keyA)
	l := chainLease(t)
	tok := mustSign(t, k, l)
	for _, tc := range []struct {
		now  time.Time
		want error
	}{
		{t0, nil},
		{l.Expires.Add(-time.Millisecond), nil},
		{l.Expires.Add(-time.Nanosecond), nil},
		{l.Expires, ErrExpired},
		{l.Expires.Add(time.Hour), ErrExpired},
	} {
		got, err := k.Verify(tok, tc.now)
		if tc.want == nil && (err != nil || got == nil) {
			t.Errorf("Verify at %s = %v, %v; want the lease", tc.now, got, err)
		}
		if tc.want != nil && (got != nil || !isOneOf(err, []error{tc.want})) {
			t.Errorf("Verify at %s = %v, %v; want nil, %v", tc.now, got, err, tc.want)
		}
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{ErrMalformed, "malformed"},
		{ErrBadSignature, "bad_signature"},
		{ErrUnknownKey, "unknown_key"},
		{ErrExpired, "expired"},
		{errors.New("other"), "malformed"},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestNewKeyring(t *testing.T) {
	short := make([]byte, MinKeyBytes-1)
	for _, tc := range []struct {
		name     string
		current  []byte
		previous [][]byte
		want     string
	}{
		{"short current", short, nil, "the signing key is 31 bytes, want at least 32"},
		{"empty current", nil, nil, "the signing key is 0 bytes, want at least 32"},
		{"short previous", keyA, [][]byte{keyB, short}, "previous key 2 is 31 bytes, want at least 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewKeyring(tc.current, tc.previous...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewKeyring = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	k := mustKeyring(t, keyA, keyA, keyB, keyA)
	if len(k.keys) != 2 {
		t.Errorf("NewKeyring(A, A, B, A) holds %d keys, want 2 (repeats dropped)", len(k.keys))
	}
	secret := []byte(strings.Repeat("k", MinKeyBytes))
	signer := mustKeyring(t, secret)
	secret[0] = 'x' // the keyring holds its own copy
	if _, err := signer.Verify(mustSign(t, signer, chainLease(t)), t0); err != nil {
		t.Errorf("Verify after the caller changed its key slice: %v", err)
	}
}

func TestGenerated(t *testing.T) {
	a, err := Generated()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generated()
	if err != nil {
		t.Fatal(err)
	}
	tok := mustSign(t, a, chainLease(t))
	if _, err := a.Verify(tok, t0); err != nil {
		t.Errorf("a generated keyring refuses its own token: %v", err)
	}
	if _, err := b.Verify(tok, t0); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("another generated keyring: %v, want ErrUnknownKey", err)
	}
}

func TestNewID(t *testing.T) {
	const goroutines, each = 4, 5000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range ids {
		wg.Go(func() {
			for range each {
				ids[g] = append(ids[g], NewID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, list := range ids {
		for _, id := range list {
			if seen[id] {
				t.Fatalf("NewID repeated %q", id)
			}
			seen[id] = true
			if len(id) != 16 || len(id) > cascade.MaxSettlementID {
				t.Fatalf("NewID() = %q: %d characters, want 16", id, len(id))
			}
			if _, err := encoding.DecodeString(id); err != nil {
				t.Fatalf("NewID() = %q is not base64url: %v", id, err)
			}
		}
	}
}
