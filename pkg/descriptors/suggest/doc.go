// Package suggest finds the word a user probably meant: the nearest of a
// set of candidates by edit distance, for the "did you mean" hints of the
// command line (commands, flags) and of descriptor files (keys).
//
// It is pure: no state, no I/O, safe for concurrent use.
package suggest
