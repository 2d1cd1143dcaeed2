package memstore

import (
	"context"
	"strconv"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/cascade"
)

// TestAcquireAllocations pins what Acquire allocates for a plan of n
// distinct buckets that all exist already: up to inline debits it works in
// arrays on its stack and allocates only the decision's statuses; past
// inline its working slices go to the heap; past largePlan it names the
// buckets with a map. The steps sit exactly at those bounds.
func TestAcquireAllocations(t *testing.T) {
	tests := []struct {
		name string
		n    int
		want float64
	}{
		{"one debit", 1, 1},
		{"inline debits", inline, 1},
		{"one past inline", inline + 1, 6},
		{"largest plan without a map", largePlan, 6},
		{"one past largePlan", largePlan + 1, 9},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			p := &cascade.Plan{}
			for i := range tt.n {
				p.Debits = append(p.Debits, debit("e"+strconv.Itoa(i), benchLimit, cascade.Consume, 1))
			}
			mustAcquire(t, s, p.Debits...) // the buckets exist from here on
			got := testing.AllocsPerRun(50, func() {
				if _, err := s.Acquire(ctx, p); err != nil {
					t.Fatalf("Acquire(%d debits) error = %v, want nil", tt.n, err)
				}
			})
			if got != tt.want {
				t.Errorf("allocations of Acquire(%d debits) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}
