package main

import (
	"context"
	"testing"
	"testing/synctest"
)

// TestWarmTable: a scenario's WarmWrites and WarmReads pre-warm its table
// (CreateTable's WarmThroughput): it starts with the partitions they need
// at 1,000 write and 3,000 read units a partition, and a scenario without
// them on a new on-demand table's four. Scaling scales them.
func TestWarmTable(t *testing.T) {
	for _, c := range []struct {
		name          string
		writes, reads float64
		scale         float64
		want          int
	}{
		{"new", 0, 0, 1, 4},
		{"writes", 100_000, 0, 1, 100},
		{"reads", 0, 90_000, 1, 30},
		{"scaled", 100_000, 0, 0.1, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sc, err := scenario("zipf")
				if err != nil {
					t.Fatal(err)
				}
				sc.WarmWrites, sc.WarmReads = c.writes, c.reads
				r, err := newRun(context.Background(), sc.scaled(c.scale, true))
				if err != nil {
					t.Fatal(err)
				}
				if parts, splits := r.fake.Partitions(table); len(parts) != c.want || splits != 0 {
					t.Errorf("%d partitions, %d splits; want %d and 0", len(parts), splits, c.want)
				}
			})
		})
	}
}
