package lease

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// reencode returns the token of l with the header and signature of a
// genuine token: what an attacker without the key can do, changing a
// field and encoding the lease again.
func reencode(t *testing.T, genuine string, l *Lease) string {
	t.Helper()
	b, err := encoding.DecodeString(genuine)
	if err != nil {
		t.Fatal(err)
	}
	forged := appendBody(append([]byte(nil), b[:headBytes]...), l)
	forged = append(forged, b[len(b)-macBytes:]...)
	return encoding.EncodeToString(forged)
}

// resign returns the token of l signed with attacker's key but naming the
// key id of the genuine token.
func resign(genuine string, l *Lease, attacker []byte) string {
	b, _ := encoding.DecodeString(genuine)
	forged := appendBody(append([]byte(nil), b[:headBytes]...), l)
	forged = newKey(attacker).mac(forged, forged)
	return encoding.EncodeToString(forged)
}

func TestForgedFieldsFailTheSignature(t *testing.T) {
	k := mustKeyring(t, keyA)
	genuine := mustSign(t, k, chainLease(t))
	for _, tc := range []struct {
		name string
		edit func(l *Lease)
	}{
		{"changed estimate", func(l *Lease) { l.Buckets[0].Limits[1].Estimate = 1 }},
		{"changed capacity", func(l *Lease) { l.Buckets[2].Limits[1].Bucket.Capacity *= 2 }},
		{"changed bucket entity", func(l *Lease) { l.Buckets[1].Key.Entity = "proj-billing" }},
		{"changed bucket namespace", func(l *Lease) { l.Buckets[1].Key.Namespace = "other" }},
		{"changed shard", func(l *Lease) { l.Buckets[1].Shard = 0 }},
		{"bucket dropped", func(l *Lease) { l.Buckets = l.Buckets[:2] }},
		{"bucket added", func(l *Lease) { l.Buckets = append(l.Buckets, l.Buckets[0]) }},
		{"later expiry", func(l *Lease) { l.Expires = l.Expires.Add(24 * time.Hour) }},
		{"other id", func(l *Lease) { l.ID = NewID() }},
		{"other domain", func(l *Lease) { l.Domain = "other" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := chainLease(t)
			tc.edit(l)
			for _, forged := range []string{reencode(t, genuine, l), resign(genuine, l, keyB)} {
				got, err := k.Verify(forged, t0)
				if !isOneOf(err, []error{ErrBadSignature}) {
					t.Errorf("Verify(forged) = %+v, %v; want ErrBadSignature", got, err)
				}
			}
		})
	}
}

// signRaw signs arbitrary body bytes with k's current key, as version 1:
// a token whose signature is good, so that only decoding can refuse it.
func signRaw(k *Keyring, body []byte) string { return signRawAs(k, version1, body) }

// signRawAs is signRaw in format v.
func signRawAs(k *Keyring, v byte, body []byte) string {
	b := append([]byte{v}, k.keys[0].id[:]...)
	b = append(b, body...)
	return encoding.EncodeToString(k.keys[0].mac(b, b))
}

// rawBody builds a body by hand: id, expiry, strings, domain index, then
// the rest as given (bucket count and buckets).
func rawBody(strs []string, rest ...uint64) []byte {
	b := appendString(nil, "id")
	b = binary.AppendUvarint(b, uint64(t0.Add(time.Hour).UnixMilli()))
	b = binary.AppendUvarint(b, uint64(len(strs)))
	for _, s := range strs {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, 0)
	for _, v := range rest {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func TestMalformedWithAGoodSignature(t *testing.T) {
	k := mustKeyring(t, keyA)
	s := []string{"d"}
	limit := func(capacity, amount, periodMs, estimate uint64) []uint64 {
		return []uint64{1, 0, 0, 0, 0, 1, 0, capacity, amount, periodMs, estimate}
	}
	cat := func(parts ...[]uint64) []uint64 {
		var out []uint64
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	good := rawBody(s, limit(2, 2, 2, 2)...)
	if _, err := k.Verify(signRaw(k, good), t0); err != nil {
		t.Fatalf("the hand-built token does not verify: %v", err)
	}
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"empty body", nil, "id length"},
		{"empty id", append(appendString(nil, ""), good[3:]...), "id of 0 bytes"},
		{"long id", appendString(nil, strings.Repeat("i", 65)), "id of 65 bytes"},
		{"expiry past int64", append(appendString(nil, "id"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "expiry"},
		{"expiry at the epoch", append(appendString(nil, "id"), 0), "expiry at the epoch"},
		{"string count past the bytes", rawBody(nil)[:len(rawBody(nil))-2], "string count"},
		{"string past the end", append(rawBody(nil)[:len(rawBody(nil))-2], 1, 100), "overruns"},
		{"domain index past the table", rawBody(s, 0)[:len(rawBody(s, 0))-2], "domain"},
		{"empty table", append(rawBody(nil)[:len(rawBody(nil))-1], 0, 0), "empty table"},
		{"bucket count past the bound", rawBody(s, MaxBuckets+1), "bucket count"},
		{"bucket count past the bytes", rawBody(s, 3, 0, 0, 0, 0, 0), "bucket count"},
		{"shard past MaxShard", rawBody(s, 1, 0, 0, 0, MaxShard+1, 0), "shard"},
		{"limit count past the bytes", rawBody(s, 1, 0, 0, 0, 0, 2, 0, 2, 2, 2, 2), "limit count"},
		{"limit name past the table", rawBody(s, 1, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2), "limit name"},
		{"flagged limit name past the table", rawBody(s, 1, 0, 0, 0, 0, 1, 3, 0, 2, 2, 2, 2), "limit name"},
		{"adjustment past the table", rawBody(s, 1, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2), "adjustment name"},
		{"zero capacity", rawBody(s, limit(0, 2, 2, 2)...), "capacity must be"},
		{"zero refill", rawBody(s, limit(2, 0, 2, 2)...), "refill amount must be"},
		{"zero period, then a calendar past the table", rawBody(s, limit(2, 2, 0, 2)...), "calendar"},
		{"zero period, then a string that is no calendar", rawBody(s, limit(2, 2, 0, 0)...), "a calendar needs"},
		{"capacity past MaxMillitokens", rawBody(s, limit((1<<60+1)<<1|1, 2, 2, 2)...), "capacity"},
		{"capacity in tokens past MaxMillitokens", rawBody(s, limit((1<<60/1000+1)<<1, 2, 2, 2)...), "capacity"},
		{"capacity in tokens past uint64", rawBody(s, limit(1<<63, 2, 2, 2)...), "capacity"},
		{"period past MaxPeriod", rawBody(s, limit(2, 2, 2*(3_153_600_000+1), 2)...), "refill period"},
		{"estimate past MaxMillitokens", rawBody(s, limit(2, 2, 2, (1<<60+1)<<1|1)...), "estimate"},
		{"non-canonical number", rawBody(s, limit(2, 2, 2, 1000<<1|1)...), "canonical"},
		{"bytes left over", append(append([]byte(nil), good...), 0), "left over"},
		{"two buckets declared, one given", rawBody(s, cat([]uint64{2}, limit(2, 2, 2, 2)[1:])...), "does not decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.Verify(signRaw(k, tc.body), t0)
			if !isOneOf(err, []error{ErrMalformed}) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify = %+v, %v; want ErrMalformed saying %q", got, err, tc.want)
			}
		})
	}
}

func TestMalformedBeforeDecoding(t *testing.T) {
	k := mustKeyring(t, keyA)
	tok := mustSign(t, k, chainLease(t))
	for _, tc := range []struct{ name, token, want string }{
		{"empty", "", "0 bytes"},
		{"too long", strings.Repeat("A", MaxTokenBytes+1), "4097 characters"},
		{"a newline", tok[:10] + "\n" + tok[10:], "not base64url"},
		{"padding", tok + "==", "not base64url"},
		{"standard base64", strings.ReplaceAll(strings.ReplaceAll(tok, "-", "+"), "_", "/") + "+", "not base64url"},
		{"trailing bits", trailingBits(t, tok), "illegal base64"},
		{"other version", encoding.EncodeToString(append([]byte{3}, make([]byte, 40)...)), "version 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(tc.token, t0)
			if !isOneOf(err, []error{ErrMalformed}) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify = %v, want ErrMalformed saying %q", err, tc.want)
			}
		})
	}
}

// trailingBits returns tok with a byte appended, encoded with a bit set
// among the unused bits of its last character.
func trailingBits(t *testing.T, tok string) string {
	b, err := encoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	for len(b)%3 != 1 {
		b = append(b, 0)
	}
	s := encoding.EncodeToString(b)
	if s[len(s)-1] != 'A' {
		t.Fatalf("last character %q, want A", s[len(s)-1])
	}
	return s[:len(s)-1] + "B"
}
