// Package lease signs and verifies leases: what an admission debited (every
// bucket of every level of a chain, with the estimate per limit), carried
// by Envoy from the rate-limit answer to the access log or the stream-end
// call, so that the cost known after the response can be settled against
// exactly those buckets, once (the store settles an id at most once).
//
// # Token
//
// A token is base64url without padding (strict: one spelling per token) of
//
//	version (1 byte, 1) · key id (4 bytes: SHA-256 of the key, first 4) ·
//	id · expiry (unix ms) · string table · domain · buckets · HMAC
//
// where numbers are uvarints, strings a uvarint length and their bytes,
// and the string table holds every distinct string once (domain,
// namespaces, entities, resources, limit and adjustment names), referred to
// by index. Per bucket: namespace, entity, resource, shard, limit count; per
// limit: name (its index doubled, plus one when an adjustment's name
// follows), capacity, refill amount, refill period (ms) and estimate, these
// four written as v/1000·2 when v is a multiple of 1000 and v·2+1
// otherwise, so whole tokens and whole seconds take fewer bytes. The HMAC is HMAC-SHA256 over
// every byte before it, truncated to its first 16 bytes (128 bits, as RFC
// 2104 §5 allows: at least half the output and at least 80 bits). A token
// for a three-level chain with two limits a level is 236 characters
// (TestTokenSize); docs/leases.md lays the format out byte by byte.
//
// A limit in dollars carries the price of its request's resource at
// admission, so that a price changed on reload never touches what an
// admitted request is charged. A lease with such a limit is written in
// format version 2 (each limit's name index times four, with a flag for
// money, and the price after the estimate); any other is written in
// version 1, unchanged, so that replicas not yet upgraded settle it. Both
// are read.
//
// Verify checks in this order, and its error wraps exactly one sentinel:
// the token is canonical base64url of a version it reads within MaxTokenBytes
// (else ErrMalformed); its key id is in the keyring (ErrUnknownKey); the
// HMAC matches, compared in constant time (ErrBadSignature); the signed body
// decodes within bounds (MaxBuckets, MaxLimits, limits tokenbucket accepts,
// nothing left over; else ErrMalformed), checked before anything is
// allocated for what it claims; now is before the expiry (ErrExpired).
// Reason names each for a metric label.
//
// # Keys
//
// A Keyring signs with its current key and verifies with it or any previous
// key, so that a fleet rotates without rejecting leases in flight: add the
// new key as a previous key everywhere, then make it current everywhere,
// then drop the old one once the leases it signed have expired. Keys are
// the raw bytes of the configured strings, at least MinKeyBytes (32) long
// (openssl rand -base64 48 makes a good one). FromSettings reads
// LEASE_SIGNING_KEY and LEASE_SIGNING_KEY_PREVIOUS, or
// LEASE_SIGNING_KEY_FILE, or generates a key when none is set (then leases
// verify on this process only). A Ring holds a key file's keyring behind an
// atomic pointer and rereads the file every interval, keeping the old keys
// when the new contents do not parse.
//
// # Security
//
// A lease carries no secret. Without a key nobody can make a token that
// verifies: a forged or altered one fails the HMAC. A genuine token can be
// replayed; the store settles each id once, and an expired one is refused,
// so a replay moves no bucket twice. Whoever holds a key can sign leases
// for any bucket until that key is rotated out. The cost settled against a
// lease comes beside it and is not signed: only Envoy should reach the
// service that receives it. Tokens are not encrypted: whoever reads the
// access logs reads the bucket names (entities).
//
// The package does no I/O but reading key files, never logs, and all of it
// is safe for concurrent use.
package lease
