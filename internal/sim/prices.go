package main

// Price is DynamoDB's on-demand price of capacity, in US dollars per
// million request units, as published on a date.
type Price struct {
	// Date is when the prices were read from AWS's pricing page.
	Date string
	// Region the prices are for.
	Region string
	// WriteUnit and ReadUnit are dollars per million write and read
	// request units.
	WriteUnit, ReadUnit float64
}

// Prices is the one table of prices the simulator reports in: on-demand,
// standard table class, us-east-1 (https://aws.amazon.com/dynamodb/pricing/on-demand/).
var Prices = Price{Date: "2026-11-29", Region: "us-east-1", WriteUnit: 0.625, ReadUnit: 0.125}

// perMillion is the cost in dollars of a million decisions that consumed
// wcu write and rcu read units in all over decisions decisions.
func (p Price) perMillion(wcu, rcu float64, decisions int64) float64 {
	if decisions == 0 {
		return 0
	}
	return (wcu*p.WriteUnit + rcu*p.ReadUnit) / float64(decisions)
}
