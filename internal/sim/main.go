package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"testing"
	"testing/synctest"
	"time"
)

func main() {
	name := flag.String("scenario", "hot", fmt.Sprintf("the scenario to run, or all: %v", scenarioNames()))
	scale := flag.Float64("scale", 1, "multiply demand and limits by this (and replicas too with -scale_replicas)")
	scaleReplicas := flag.Bool("scale_replicas", false, "scale the replicas too")
	seconds := flag.Int("seconds", 0, "simulated seconds (0: the scenario's)")
	settle := flag.Duration("settle", 0, "when the bounds start to apply (0: the scenario's)")
	window := flag.Duration("window", 0, "each row's window, whole seconds (0: the scenario's)")
	warmWCU := flag.Float64("warm_wcu", 0, "pre-warm the table to this many write units a second, after -scale (0: the scenario's)")
	warmRCU := flag.Float64("warm_rcu", 0, "pre-warm the table to this many read units a second, after -scale (0: the scenario's)")
	testing.Init()
	flag.Parse()
	names := []string{*name}
	if *name == "all" {
		names = scenarioNames()
	}
	var tests []testing.InternalTest
	for _, n := range names {
		sc, err := scenario(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		sc = sc.scaled(*scale, *scaleReplicas)
		if *seconds > 0 {
			sc.Duration = time.Duration(*seconds) * time.Second
		}
		if *settle > 0 {
			sc.Settle = *settle
		}
		if *window >= time.Second {
			sc.Window = window.Truncate(time.Second)
		}
		if *warmWCU > 0 {
			sc.WarmWrites = *warmWCU
		}
		if *warmRCU > 0 {
			sc.WarmReads = *warmRCU
		}
		tests = append(tests, testing.InternalTest{Name: n, F: func(t *testing.T) { runAndReport(t, sc) }})
	}
	// A synctest bubble needs a *testing.T: the scenarios run as tests.
	testing.Main(func(pat, s string) (bool, error) { return regexp.MatchString(pat, s) }, tests, nil, nil)
}

// runAndReport runs sc in a bubble and prints its table.
func runAndReport(t *testing.T, sc Scenario) {
	wall := time.Now()
	var r *run
	synctest.Test(t, func(t *testing.T) {
		var err error
		if r, err = simulate(sc); err != nil {
			t.Fatal(err)
		}
	})
	r.report(os.Stdout, time.Since(wall))
	if b, ok := bounds[sc.Name]; ok {
		breaches := r.check(b)
		for _, br := range breaches {
			fmt.Println("BOUND BROKEN:", br)
		}
		if len(breaches) == 0 {
			fmt.Printf("bounds held: %+v\n", b)
		}
	}
	fmt.Println()
}
