package lease

import (
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// v1Token is a lease signed by the code before money limits (format
// version 1): chainLease with the tenant's tpm settled by an adjustment
// named usage, signed with keyA. Leases issued before an upgrade must
// still verify and decode after it.
const v1Token = "AZfarA4QQUFFQ0F3UUZCZ2NJQ1FvTJvQ-KKMNAkDbGxtB2RlZmF1bHQKa2V5LTdmM2E5YwZncHQtNG8DcnBtA3RwbQ1wcm9qLXBheW1lbnRzC3RlbmFudC1hY21lBXVzYWdlAAMBAgMAAgiwCbAJeAIKwJoMwJoMeOgHAQYDAwIIsAmwCXgCCsCaDMCaDHjoBwEHAwECCLAJsAl4AgsIwJoMwJoMeOgHX_4ih21ZtKhvR7rKiLlXpA"

// moneyLease is chainLease with a daily budget in dollars on every level
// beside rpm and tpm: $3 and $15 per million input and output tokens and a
// tenth of a cent a request, an estimate of $0.0025.
func moneyLease(t testing.TB) *Lease {
	t.Helper()
	cal, err := tokenbucket.NewCalendar(tokenbucket.Daily, "America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	usd, err := tokenbucket.Budget(50_000_000*tokenbucket.PerToken, cal, false)
	if err != nil {
		t.Fatal(err)
	}
	l := chainLease(t)
	for i := range l.Buckets {
		l.Buckets[i].Limits = append(l.Buckets[i].Limits, Limit{Name: "daily_usd", Bucket: usd, Estimate: 2_500_000,
			Money: true, Price: descriptors.Price{Input: 3_000_000, Output: 15_000_000, Request: 1000}})
	}
	l.Buckets[1].Limits[2].Adjustment = "team_usd"
	return l
}

func TestVersion1TokenStillVerifies(t *testing.T) {
	k := mustKeyring(t, keyA)
	want := chainLease(t)
	want.Buckets[2].Limits[1].Adjustment = "usage"
	got, err := k.Verify(v1Token, t0)
	if err != nil {
		t.Fatalf("Verify(a version 1 token) = %v", err)
	}
	if !sameLease(got, want) {
		t.Errorf("Verify(a version 1 token) = %+v, want %+v", got, want)
	}
	// A lease without money is still written in version 1, byte for byte,
	// so that a replica not yet upgraded settles it.
	if tok := mustSign(t, k, want); tok != v1Token {
		t.Errorf("Sign(a lease without money) = %s, want the version 1 token %s", tok, v1Token)
	}
}

func TestMoneyRoundTrip(t *testing.T) {
	k := mustKeyring(t, keyA)
	l := moneyLease(t)
	tok := mustSign(t, k, l)
	if b, _ := encoding.DecodeString(tok); b[0] != version2 {
		t.Errorf("a lease with money is written in version %d, want 2", b[0])
	}
	got, err := k.Verify(tok, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !sameLease(got, l) {
		t.Errorf("Verify(Sign(l)) = %+v, want %+v", got, l)
	}
	if again := mustSign(t, k, got); again != tok {
		t.Errorf("Sign(Verify(token)) = %s, want %s", again, tok)
	}
	// A free model: money at a price of zero.
	l.Buckets[0].Limits[2].Price = descriptors.Price{}
	if got, err := k.Verify(mustSign(t, k, l), t0); err != nil || !got.Buckets[0].Limits[2].Money {
		t.Errorf("a money limit at a price of zero = %+v, %v; want it in money", got, err)
	}
	t.Logf("a three-level chain with rpm, tpm and a daily budget in dollars: %d characters", len(tok))
}

func TestForgedPriceFailsTheSignature(t *testing.T) {
	k := mustKeyring(t, keyA)
	genuine := mustSign(t, k, moneyLease(t))
	for _, tc := range []struct {
		name string
		edit func(l *Lease)
	}{
		{"cheaper output", func(l *Lease) { l.Buckets[0].Limits[2].Price.Output = 1 }},
		{"no request price", func(l *Lease) { l.Buckets[2].Limits[2].Price.Request = 0 }},
		{"a money limit turned to tokens", func(l *Lease) {
			l.Buckets[1].Limits[2].Money, l.Buckets[1].Limits[2].Price = false, descriptors.Price{}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := moneyLease(t)
			tc.edit(l)
			for _, forged := range []string{reencode(t, genuine, l), resign(genuine, l, keyB)} {
				if got, err := k.Verify(forged, t0); !isOneOf(err, []error{ErrBadSignature}) {
					t.Errorf("Verify(forged) = %+v, %v; want ErrBadSignature", got, err)
				}
			}
		})
	}
}

func TestMalformedMoney(t *testing.T) {
	k := mustKeyring(t, keyA)
	s := []string{"d"}
	// One bucket of one limit named s[0]: name field, capacity, refill
	// amount, period, estimate, then the rest (a price).
	limit := func(name uint64, rest ...uint64) []uint64 {
		return append([]uint64{1, 0, 0, 0, 0, 1, name, 2, 2, 2, 2}, rest...)
	}
	good := rawBody(s, limit(2, 2, 2, 2)...)
	if _, err := k.Verify(signRawAs(k, version2, good), t0); err != nil {
		t.Fatalf("the hand-built version 2 token does not verify: %v", err)
	}
	for _, tc := range []struct {
		name string
		v    byte
		body []byte
		want string
	}{
		{"version 2 without money", version2, rawBody(s, limit(0)...), "version 2 lease without a money limit"},
		{"no price", version2, rawBody(s, limit(2)...), "input price"},
		{"price past MaxMicros", version2, rawBody(s, limit(2, 2, (descriptors.MaxMicros/1000+1)<<1, 2)...), "output price"},
		{"price in micro-dollars past MaxMicros", version2, rawBody(s, limit(2, 2, 2, (descriptors.MaxMicros+1)<<1|1)...), "request price"},
		{"flagged name past the table", version2, rawBody(s, limit(4, 2, 2, 2)...), "limit name"},
		{"version 1 reads no money bit", version1, rawBody(s, limit(2, 2, 2, 2)...), "limit name"},
		{"other version", 3, good, "version 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.Verify(signRawAs(k, tc.v, tc.body), t0)
			if !isOneOf(err, []error{ErrMalformed}) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify = %+v, %v; want ErrMalformed saying %q", got, err, tc.want)
			}
		})
	}
}

func TestSignRefusesAPrice(t *testing.T) {
	k := mustKeyring(t, keyA)
	for _, tc := range []struct {
		name string
		edit func(lm *Limit)
		want string
	}{
		{"price without money", func(lm *Limit) { lm.Money = false }, "a price on a limit not in money"},
		{"negative price", func(lm *Limit) { lm.Price.Input = -1 }, "outside"},
		{"price past MaxMicros", func(lm *Limit) { lm.Price.Request = descriptors.MaxMicros + 1 }, "outside"},
	} {
		l := moneyLease(t)
		tc.edit(&l.Buckets[0].Limits[2])
		if _, err := k.Sign(l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Sign = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestMoneyTokenSize: a money limit adds its flag and three prices; the
// chain's token stays well under MaxTokenBytes.
func TestMoneyTokenSize(t *testing.T) {
	k := mustKeyring(t, keyA)
	plain, money := mustSign(t, k, chainLease(t)), mustSign(t, k, moneyLease(t))
	if len(money) > 600 {
		t.Errorf("the chain's token with a money limit a level is %d characters, want at most 600", len(money))
	}
	t.Logf("chain: %d characters; with a daily budget in dollars on each level: %d", len(plain), len(money))
}
