// Package lateness measures how late this process runs: a goroutine that
// asks to sleep a short interval, in a loop, and records how much later
// than asked it woke. On a machine with CPU to spare that is tens of
// microseconds; when the process's CPU is saturated (more runnable
// goroutines than cores, a CPU quota throttled, a long GC assist) it is
// the delay every goroutine of the process sees, a call's answer waiting
// to be read among them.
//
// A DynamoDB call that runs out of its budget while the process runs late
// by a large part of that budget was late in this process's own queue, not
// DynamoDB's: Meter.Late tells the two apart (the metrics count such
// timeouts apart, and ON_UNAVAILABLE=local tries such an item again at
// once).
package lateness
