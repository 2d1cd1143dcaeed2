package service

import (
	"strconv"
	"unicode/utf8"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// MaxHits is the largest number of hits one descriptor may add (or refund).
const MaxHits = 1_000_000_000_000

// Defaults of RequestLimits. Envoy sends one descriptor per matching
// rate_limits action and one entry per action of a descriptor, so real
// requests carry a handful of each; a value comes from a header or a path,
// which Envoy bounds at 60 KiB for all headers together.
const (
	DefaultMaxDescriptors = 256
	DefaultMaxEntries     = 64
	DefaultMaxEntryBytes  = 8192
)

// RequestLimits bounds the size of one request. A request past a bound is
// answered InvalidArgument with the reason before any configuration or
// store is consulted. Zero or negative fields take their defaults.
type RequestLimits struct {
	// Descriptors is the most descriptors one request may carry.
	Descriptors int
	// Entries is the most entries one descriptor may carry.
	Entries int
	// EntryBytes is the longest domain, entry key or entry value in bytes.
	EntryBytes int
}

// withDefaults returns l with every unset field at its default.
func (l RequestLimits) withDefaults() RequestLimits {
	if l.Descriptors <= 0 {
		l.Descriptors = DefaultMaxDescriptors
	}
	if l.Entries <= 0 {
		l.Entries = DefaultMaxEntries
	}
	if l.EntryBytes <= 0 {
		l.EntryBytes = DefaultMaxEntryBytes
	}

	return l
}

// Reasons for InvalidArgument, used as the reason label of
// ratelimit_invalid_requests_total.
const (
	reasonMalformed      = "malformed"
	reasonEmptyDomain    = "empty_domain"
	reasonNoDescriptors  = "no_descriptors"
	reasonTooManyDescs   = "too_many_descriptors"
	reasonNoEntries      = "empty_descriptor"
	reasonTooManyEntries = "too_many_entries"
	reasonEmptyKey       = "empty_entry_key"
	reasonTooLong        = "entry_too_long"
	reasonUTF8           = "invalid_utf8"
	reasonHits           = "hits_overflow"
	reasonOverride       = "invalid_limit_override"
	reasonEntity         = "empty_entity"
	reasonUnstorable     = "unstorable"
	reasonCount          = "invalid_token_count"
	reasonPrice          = "no_price"
)

// invalidError is a request refused as invalid: gRPC InvalidArgument with
// msg, counted under reason.
type invalidError struct {
	reason, msg string
}

func (e *invalidError) Error() string { return e.msg }

func invalid(reason, msg string) *invalidError { return &invalidError{reason: reason, msg: msg} }

// The checks below are shared by parse, which checks a decoded request, and
// scanRequest, which checks the wire bytes before they are decoded; both
// report the same problem in the same words.

func (l RequestLimits) checkDescriptors(n int) *invalidError {
	if n > l.Descriptors {
		return invalid(reasonTooManyDescs, "service: request has more than "+strconv.Itoa(l.Descriptors)+" descriptors")
	}
	return nil
}

func (l RequestLimits) checkEntries(i, n int) *invalidError {
	if n > l.Entries {
		return invalid(reasonTooManyEntries, "service: descriptor "+strconv.Itoa(i)+" has more than "+strconv.Itoa(l.Entries)+" entries")
	}
	return nil
}

// checkText checks a domain (i < 0) or the key or value of entry j of
// descriptor i, of size bytes: its length and whether it is valid UTF-8.
func (l RequestLimits) checkText(what string, i, j, size int, valid bool) *invalidError {
	if size > l.EntryBytes {
		return invalid(reasonTooLong, "service: "+place(what, i, j)+" is longer than "+strconv.Itoa(l.EntryBytes)+" bytes")
	}
	if !valid {
		return invalid(reasonUTF8, "service: "+place(what, i, j)+" is not valid UTF-8")
	}
	return nil
}

func place(what string, i, j int) string {
	if i < 0 {
		return what
	}
	return "descriptor " + strconv.Itoa(i) + " entry " + strconv.Itoa(j) + " " + what
}

// oneItem is the item of a one-descriptor request with its entries.
type oneItem struct {
	item    [1]item
	entries [4]descriptors.Entry
}

// parse validates req against the request limits and converts its
// descriptors into items, each with what it asked. Its work is linear in the
// size of the request and stops at the first problem.
func (s *Service) parse(req *pb.RateLimitRequest) ([]item, error) {
	l := s.limits
	domain := req.GetDomain()
	if domain == "" {
		return nil, invalid(reasonEmptyDomain, "service: rate limit domain must not be empty")
	}
	if e := l.checkText("domain", -1, 0, len(domain), utf8.ValidString(domain)); e != nil {
		return nil, e
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, invalid(reasonNoDescriptors, "service: rate limit descriptor list must not be empty")
	}
	if e := l.checkDescriptors(len(ds)); e != nil {
		return nil, e
	}
	total := 0
	for i, d := range ds {
		n := len(d.GetEntries())
		if n == 0 {
			return nil, invalid(reasonNoEntries, "service: descriptor "+strconv.Itoa(i)+" has no entries")
		}
		if e := l.checkEntries(i, n); e != nil {
			return nil, e
		}
		total += n
	}
	var entries []descriptors.Entry
	var items []item
	if len(ds) == 1 && total <= len(oneItem{}.entries) {
		// The common request: one descriptor of a few entries, in one
		// allocation.
		one := &oneItem{}
		items, entries = one.item[:], one.entries[:total]
	} else {
		entries = make([]descriptors.Entry, total)
		items = make([]item, len(ds))
	}
	reqHits := uint64(1)
	if h := req.GetHitsAddend(); h != 0 {
		reqHits = uint64(h)
	}
	n := 0
	for i, d := range ds {
		es := d.GetEntries()
		a := &items[i].asked
		a.entries = entries[n : n+len(es) : n+len(es)]
		for j, e := range es {
			key, value := e.GetKey(), e.GetValue()
			if key == "" {
				return nil, invalid(reasonEmptyKey, "service: descriptor "+strconv.Itoa(i)+" entry "+strconv.Itoa(j)+" has an empty key")
			}
			if e := l.checkText("key", i, j, len(key), utf8.ValidString(key)); e != nil {
				return nil, e
			}
			if e := l.checkText("value", i, j, len(value), utf8.ValidString(value)); e != nil {
				return nil, e
			}
			a.entries[j] = descriptors.Entry{Key: key, Value: value}
		}
		n += len(es)
		a.hits, a.own = reqHits, false
		if h := d.GetHitsAddend(); h != nil {
			a.hits, a.own = h.GetValue(), true
		}
		if a.hits > MaxHits {
			return nil, invalid(reasonHits, "service: descriptor "+strconv.Itoa(i)+" hits "+strconv.FormatUint(a.hits, 10)+" exceed "+strconv.FormatUint(MaxHits, 10))
		}
		a.negative = d.GetIsNegativeHits()
		if s.adjust != nil {
			a.settles = leaseOf(a.entries)
		}
		items[i].decided.worst = -1
	}
	return items, nil
}
