// Package benchenv is what the load benchmarks (internal/bench/envoyload,
// internal/bench/dynamoload) share: their knobs from the environment, a
// process's CPU time, DynamoDB Local's process, and the load average.
package benchenv
