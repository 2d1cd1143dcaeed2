package main

import (
	"context"
	"os"
	"testing"
	"testing/synctest"
	"time"
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

// TestZipfWarmShort is "zipf" cut down to a fleet that asks about 8,000
// write units a second of its table (9,000 decisions a second over 1,000
// tenants, the top three over their limit), twice what a new on-demand
// table takes at once: on a new table the tenants' bound breaks while
// DynamoDB throttles it (0.64 of what the limits allow from 2 s to 4 s);
// on one pre-warmed to 16,000 write units a second it holds.
func TestZipfWarmShort(t *testing.T) {
	for _, c := range []struct {
		name  string
		warm  float64
		holds bool
	}{{"new", 0, false}, {"pre-warmed", 16_000, true}} {
		t.Run(c.name, func(t *testing.T) {
			sc := short("zipf", func(sc *Scenario) {
				sc.Tenants, sc.Demand, sc.Limit = 1000, 9000, 340
				sc.Duration, sc.Window, sc.Settle = 4*time.Second, 2*time.Second, 2*time.Second
				sc.WarmWrites = c.warm
			})
			var r *run
			synctest.Test(t, func(t *testing.T) {
				var err error
				if r, err = simulate(sc); err != nil {
					t.Fatal(err)
				}
			})
			if testing.Verbose() {
				r.report(os.Stdout, 0)
			}
			breaches := r.check(bounds["zipf"])
			if c.holds && len(breaches) > 0 || !c.holds && len(breaches) == 0 {
				t.Errorf("breaches %v, want the bound to hold: %v", breaches, c.holds)
			}
		})
	}
}
