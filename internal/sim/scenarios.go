package main

import (
	"fmt"
	"sort"
	"time"
)

// scenarios are the named runs (-scenario): the bounds of docs/scale.md and
// the calibrations against the project's own measurements.
var scenarios = map[string]Scenario{
	"hot": {
		About:    "one tenant, 100 replicas, 1,000,000 requests/s of demand, a limit of 500,000/s",
		Replicas: 100, Tenants: 1, Limit: 500_000, Demand: 1_000_000,
		Duration: 60 * time.Second, Window: 10 * time.Second, Settle: 30 * time.Second,
	},
	"zipf": {
		About:    "10,000 tenants over 100 replicas, Zipf (s = 1) demand of 1,000,000/s in all, 1,000/s each",
		Replicas: 100, Tenants: 10_000, Zipf: 1, Limit: 1000, Demand: 1_000_000,
		Duration: 60 * time.Second, Window: 10 * time.Second, Settle: 30 * time.Second,
	},
	"joinleave": {
		About:    "hot, with a replica joining at 35 s and 10 leaving at 45 s, the oldest first",
		Replicas: 100, Tenants: 1, Limit: 500_000, Demand: 1_000_000,
		Duration: 60 * time.Second, Window: 10 * time.Second, Settle: 30 * time.Second,
		Changes: []Change{{At: 35 * time.Second, Join: 1}, {At: 45 * time.Second, Leave: 10}},
	},
	"throttle": {
		About:    "hot behind ON_UNAVAILABLE=local, DynamoDB throttling the hot bucket's partition for 5 s at 35 s",
		Replicas: 100, Tenants: 1, Limit: 500_000, Demand: 1_000_000, Degrade: true,
		Duration: 60 * time.Second, Window: 10 * time.Second, Settle: 30 * time.Second,
		Throttle: &Window{At: 35 * time.Second, For: 5 * time.Second},
	},
	"burst": {
		About:    "hot at a quarter of the demand, bursting to 4× for 5 s at 35 s",
		Replicas: 100, Tenants: 1, Limit: 500_000, Demand: 250_000,
		Duration: 60 * time.Second, Window: 10 * time.Second, Settle: 30 * time.Second,
		Bursts: []Burst{{At: 35 * time.Second, For: 5 * time.Second, Factor: 4}},
	},
	"calib-hotitem":  calibHotItem,
	"calib-doubling": calibDoubling,
	"calib-outage":   calibOutage,
}

// scenario returns the scenario named name.
func scenario(name string) (Scenario, error) {
	sc, ok := scenarios[name]
	if !ok {
		return Scenario{}, fmt.Errorf("no scenario %q; there are %v", name, scenarioNames())
	}
	sc.Name = name
	return sc, nil
}

// scenarioNames lists the scenarios, sorted.
func scenarioNames() []string {
	var out []string
	for n := range scenarios {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
