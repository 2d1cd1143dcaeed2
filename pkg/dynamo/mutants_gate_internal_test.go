package dynamo

import (
	"errors"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY gate.go `s.cfg.RejectionCacheSize <= 0` gated: NewStore applies WithDefaults, which turns a size of 0 into DefaultRejectionCacheSize, so the store never sees 0.

// TestEnforcesOnly: a part is decided first only when each of its debits is
// an enforced consume or check, whose refusal refuses the whole plan.
func TestEnforcesOnly(t *testing.T) {
	tests := []struct {
		name   string
		debits []cascade.Debit
		want   bool
	}{
		{"enforced consume", []cascade.Debit{{Role: cascade.Enforce, Op: cascade.Consume}}, true},
		{"enforced check", []cascade.Debit{{Role: cascade.Enforce, Op: cascade.Check}}, true},
		{"enforced consume and check", []cascade.Debit{{Role: cascade.Enforce, Op: cascade.Consume}, {Role: cascade.Enforce, Op: cascade.Check}}, true},
		{"enforced charge", []cascade.Debit{{Role: cascade.Enforce, Op: cascade.Charge}}, false},
		{"enforced refund", []cascade.Debit{{Role: cascade.Enforce, Op: cascade.Refund}}, false},
		{"advisory consume", []cascade.Debit{{Role: cascade.Advisory, Op: cascade.Consume}}, false},
		{"quota check", []cascade.Debit{{Role: cascade.Quota, Op: cascade.Check}}, false},
		{"enforced consume, then an advisory one", []cascade.Debit{{Role: cascade.Enforce, Op: cascade.Consume}, {Role: cascade.Advisory, Op: cascade.Consume}}, false},
		{"no debit", nil, true},
	}
	for _, tt := range tests {
		if got := enforcesOnly(&part{debits: tt.debits}); got != tt.want {
			t.Errorf("%s: enforcesOnly() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestStopped: parts decided first settle the plan when one of them failed
// or refused an enforced debit; an advisory refusal does not.
func TestStopped(t *testing.T) {
	enforced := []cascade.Debit{{Role: cascade.Enforce}, {Role: cascade.Enforce}}
	advisory := []cascade.Debit{{Role: cascade.Advisory}, {Role: cascade.Advisory}}
	ok := cascade.Status{OK: true}
	tests := []struct {
		name  string
		parts []*part
		want  bool
	}{
		{"none", nil, false},
		{"all admitted", []*part{{debits: enforced, dec: cascade.Decision{Statuses: []cascade.Status{ok, ok}}}}, false},
		{"failed", []*part{{debits: enforced, err: errors.New("x")}}, true},
		{"an enforced debit refused, second of the part", []*part{{debits: enforced, dec: cascade.Decision{Statuses: []cascade.Status{ok, {}}}}}, true},
		{"an advisory debit refused", []*part{{debits: advisory, dec: cascade.Decision{Statuses: []cascade.Status{ok, {}}}}}, false},
		{"the second part refused", []*part{
			{debits: enforced, dec: cascade.Decision{Statuses: []cascade.Status{ok, ok}}},
			{debits: enforced, dec: cascade.Decision{Statuses: []cascade.Status{{}, ok}}},
		}, true},
		{"the second part failed", []*part{
			{debits: advisory, dec: cascade.Decision{Statuses: []cascade.Status{{}, {}}}},
			{debits: enforced, err: errors.New("x")},
		}, true},
	}
	for _, tt := range tests {
		if got := stopped(tt.parts); got != tt.want {
			t.Errorf("%s: stopped() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
